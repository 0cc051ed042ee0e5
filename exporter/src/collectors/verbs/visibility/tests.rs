//! The comparison with a stand-in for `ibv_get_device_list`, on sysfs trees of plain
//! directories (`class/infiniband/<device>`, as the kernel's class lists its devices).

use std::cell::Cell;

use super::*;
use crate::metrics::{encode, Format};

fn sysfs(devices: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for device in devices {
        std::fs::create_dir_all(dir.path().join("class/infiniband").join(device)).unwrap();
    }
    dir
}

fn text(samples: Samples) -> String {
    encode(samples, Format::PrometheusText).unwrap()
}

#[test]
fn a_device_verbs_does_not_list_is_invisible() {
    let sysfs = sysfs(&["mlx5_0", "rxe0"]);
    let mut samples = Samples::default();
    let listed = || Ok::<_, String>(vec!["mlx5_0".to_string()]);
    Visibility::default()
        .collect(sysfs.path(), listed, &mut samples)
        .unwrap();
    let text = text(samples);
    assert!(
        text.contains("hpcnode_rdma_device_visible_to_verbs{device=\"mlx5_0\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("hpcnode_rdma_device_visible_to_verbs{device=\"rxe0\"} 0"),
        "{text}"
    );
}

#[test]
fn verbs_is_asked_again_only_when_sysfs_devices_change() {
    let sysfs = sysfs(&["rxe0"]);
    let visibility = Visibility::default();
    let calls = Cell::new(0);
    let list = || {
        calls.set(calls.get() + 1);
        Ok::<_, String>(vec!["rxe0".to_string()])
    };
    for _ in 0..3 {
        visibility
            .collect(sysfs.path(), list, &mut Samples::default())
            .unwrap();
    }
    assert_eq!(calls.get(), 1);
    std::fs::create_dir_all(sysfs.path().join("class/infiniband/rxe1")).unwrap();
    let mut samples = Samples::default();
    visibility
        .collect(sysfs.path(), list, &mut samples)
        .unwrap();
    assert_eq!(calls.get(), 2);
    assert!(text(samples).contains("{device=\"rxe1\"} 0"));
}

#[test]
fn a_failed_list_is_an_error_and_is_asked_again() {
    let sysfs = sysfs(&["rxe0"]);
    let visibility = Visibility::default();
    let mut samples = Samples::default();
    let err = visibility
        .collect(sysfs.path(), || Err("ENOMEM"), &mut samples)
        .unwrap_err();
    assert!(err.cause.contains("ibv_get_device_list"), "{}", err.cause);
    let listed = || Ok::<_, String>(vec!["rxe0".to_string()]);
    visibility
        .collect(sysfs.path(), listed, &mut samples)
        .unwrap();
    assert!(text(samples).contains("{device=\"rxe0\"} 1"));
}

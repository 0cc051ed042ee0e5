//! Reporters exported under the RDMA device whose PCI function is their instance, with mlx5's
//! reporter names (`fw`, `fw_fatal`: `drivers/net/ethernet/mellanox/mlx5/core/health.c`;
//! `tx`, `rx` on the port: `en/reporter_tx.c`, `en/reporter_rx.c`); no devlink, no error.

use std::sync::{Arc, Mutex};

use super::*;
use crate::collector::Collector;
use crate::collectors::rdma::module_eeprom::tests::{roce_and_ib_ports, samples};
use crate::collectors::rdma::{NameFilter, RdmaCollector, CLASS_DIR};
use crate::error::ErrorKind;
use crate::sync::lock;

/// A dump's answer, and how many were asked for.
struct Dump {
    answer: Result<Vec<Reporter>, i32>,
    asked: Mutex<usize>,
}

impl HealthSource for Arc<Dump> {
    fn health_reporters(&self, _: Instant) -> Result<Vec<Reporter>, ExchangeError> {
        *lock(&self.asked) += 1;
        (self.answer.clone()).map_err(|errno| ReplyError::Kernel(errno).into())
    }
}

fn reporter(device: &str, port: Option<u32>, name: &str, healthy: bool, errors: u64) -> Reporter {
    Reporter {
        bus: "pci".into(),
        device: device.into(),
        port,
        name: name.into(),
        healthy,
        errors,
        recoveries: errors.saturating_sub(1),
    }
}

/// Two mlx5 PFs, one with its firmware in error and a TX timeout recovered on its port, and
/// a netdevsim instance (bus `netdevsim`), which is no RDMA device's.
fn mlx5_dump() -> Vec<Reporter> {
    vec![
        reporter("0000:3b:00.0", None, "fw", true, 0),
        reporter("0000:3b:00.0", None, "fw_fatal", false, 2),
        reporter("0000:3b:00.0", Some(131071), "tx", true, 1),
        reporter("0000:3b:00.0", Some(131071), "rx", true, 0),
        reporter("0000:3b:00.1", None, "fw", true, 0),
        Reporter {
            bus: "netdevsim".into(),
            device: "netdevsim0".into(),
            ..reporter("", None, "empty", true, 0)
        },
    ]
}

fn pushed(listing: &HealthListing, pci_address: &str) -> Output {
    let mut out = Output::default();
    push(listing, &"mlx5_0".into(), pci_address, &mut out);
    out
}

#[test]
fn a_devices_reporters_are_its_pci_functions() {
    let dump = Arc::new(Dump {
        answer: Ok(mlx5_dump()),
        asked: Mutex::new(0),
    });
    let listing = list(&dump, Instant::now());
    let out = pushed(&listing, "0000:3b:00.0");
    assert!(out.errors.is_empty());
    let device = r#"device="mlx5_0""#;
    let expected = |name: &str, reporter: &str, port: &str, value: u64| {
        format!(
            r#"hpcnode_rdma_device_health_reporter_{name}{{{device},reporter="{reporter}",devlink_port="{port}"}} Int({value})"#
        )
    };
    let mut wanted = Vec::new();
    for name in ["errors_total", "recoveries_total", "healthy"] {
        for (reporter, port, errors, healthy) in [
            ("fw", "", 0u64, 1),
            ("fw_fatal", "", 2, 0),
            ("tx", "131071", 1, 1),
            ("rx", "131071", 0, 1),
        ] {
            let value = match name {
                "errors_total" => errors,
                "recoveries_total" => errors.saturating_sub(1),
                _ => healthy,
            };
            wanted.push(expected(name, reporter, port, value));
        }
    }
    assert_eq!(samples(&out), wanted);
    assert_eq!(samples(&pushed(&listing, "0000:3b:00.1")).len(), 3);
    for none in ["0000:af:00.0", "", "netdevsim0"] {
        let out = pushed(&listing, none);
        assert_eq!((samples(&out).len(), out.errors.len()), (0, 0), "{none}");
    }
}

#[test]
fn no_devlink_is_no_reporters_and_a_failed_dump_each_devices_error() {
    let listing = |answer| {
        let dump = Arc::new(Dump {
            answer,
            asked: Mutex::new(0),
        });
        list(&dump, Instant::now())
    };
    // A kernel without devlink has no family; a node without instances an empty dump.
    for answer in [Err(libc::ENOENT), Ok(Vec::new())] {
        let out = pushed(&listing(answer), "0000:3b:00.0");
        assert_eq!((samples(&out).len(), out.errors.len()), (0, 0));
    }
    let out = pushed(&listing(Err(libc::EIO)), "0000:3b:00.0");
    assert_eq!(samples(&out).len(), 0);
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].kind, ErrorKind::Io);
    assert!(out.errors[0]
        .cause
        .starts_with("devlink health reporters: "));
}

/// Through the collector: one dump per listing, each device matched by its `device` link.
#[test]
fn the_collector_dumps_once_a_scrape_and_matches_the_pci_address() {
    let tmp = tempfile::tempdir().unwrap();
    roce_and_ib_ports(tmp.path(), "");
    let pci = tmp
        .path()
        .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
    std::fs::create_dir_all(&pci).unwrap();
    let device = tmp.path().join(CLASS_DIR).join("mlx5_0");
    std::os::unix::fs::symlink(&pci, device.join("device")).unwrap();
    let dump = Arc::new(Dump {
        answer: Ok(mlx5_dump()),
        asked: Mutex::new(0),
    });
    let mut collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    collector.health_source = Some(Box::new(dump.clone()));
    let units = collector.units().unwrap();
    assert_eq!(*lock(&dump.asked), 1);
    let mut out = Output::default();
    collector.collect_unit(&units[0], &mut out);
    let healthy: Vec<_> = (samples(&out).into_iter())
        .filter(|s| s.starts_with("hpcnode_rdma_device_health_reporter_healthy"))
        .collect();
    assert_eq!(healthy.len(), 4, "{healthy:?}");
    assert_eq!(*lock(&dump.asked), 1);
}

//! Roots built from Debian's real rdma-core packages (44.0-2, bookworm; 33.2-1, bullseye;
//! unpacked by `exporter/tests/support/fetch-rdma-userspace.sh`), copied as the packages lay
//! them out, and sysfs trees copied from `tests/fixtures/rdma_edge` (PCI functions with their
//! `driver` links: mlx5_core, mlx4_core, ice; rxe0 without one), with the `uverbs<N>/ibdev`
//! attributes ib_uverbs makes (`ib_uverbs_add_one` in `drivers/infiniband/core/uverbs_main.c`:
//! `uverbs%d`, `ibdev` the device's name).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::elf_versions::tests::rdma_generation;

const MULTIARCH: &str = "usr/lib/x86_64-linux-gnu";

/// A root with `libibverbs1`'s and `ibverbs-providers`' files of `libraries` and
/// `providers` (release names), as dpkg would unpack them.
fn root(dir: &Path, libraries: &str, providers: &str) -> PathBuf {
    let root = dir.join("root");
    let lib = root.join(MULTIARCH);
    std::fs::create_dir_all(&lib).unwrap();
    for entry in std::fs::read_dir(rdma_generation(libraries).join(MULTIARCH)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("libibverbs.so") {
            copy(&path, &lib);
        }
    }
    let providers = rdma_generation(providers);
    // The provider directory and the libraries its links lead to (`libmlx5-rdmav34.so ->
    // ../libmlx5.so.1.24.44.0`), and the config directory.
    copy(&providers.join(MULTIARCH).join("libibverbs"), &lib);
    for entry in std::fs::read_dir(providers.join(MULTIARCH)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if ["libmlx4", "libmlx5", "libefa", "libmana"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            copy(&path, &lib);
        }
    }
    std::fs::create_dir_all(root.join("etc")).unwrap();
    copy(&providers.join("etc/libibverbs.d"), &root.join("etc"));
    root
}

/// `cp -a`: links stay links.
fn copy(from: &Path, into: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(into)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        into.display()
    );
}

/// `rdma_edge`'s sysfs, with a uverbs device for each of `uverbs`.
fn sysfs(dir: &Path, uverbs: &[&str]) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/rdma_edge/sys");
    copy(&fixture, dir);
    let sys = dir.join("sys");
    for (index, device) in uverbs.iter().enumerate() {
        let uverbs = sys.join(format!("class/infiniband_verbs/uverbs{index}"));
        std::fs::create_dir_all(&uverbs).unwrap();
        std::fs::write(uverbs.join("ibdev"), format!("{device}\n")).unwrap();
    }
    sys
}

fn libibverbs() -> &'static Path {
    Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
}

const ALL_UVERBS: [&str; 8] = [
    "irdma0",
    "mlx4_1",
    "mlx4_2",
    "mlx4_3",
    "mlx5_0",
    "mlx5_1",
    "rocep1s0f0",
    "rxe0",
];

/// The providers of a root of `libraries` and `providers` and `rdma_edge`'s sysfs with
/// `uverbs`, after `change` (given the root and the sysfs), with the bookworm library path.
fn case(
    (libraries, providers): (&str, &str),
    uverbs: &[&str],
    change: impl FnOnce(&Path, &Path),
) -> Vec<DeviceProvider> {
    let dir = tempfile::tempdir().unwrap();
    let root = root(dir.path(), libraries, providers);
    let sys = sysfs(dir.path(), uverbs);
    change(&root, &sys);
    device_providers(&root, &sys, Some(libibverbs()))
}

fn status<'a>(providers: &'a [DeviceProvider], device: &str) -> &'a str {
    let provider = providers.iter().find(|p| p.device == device);
    provider.unwrap().status.as_str()
}

const BOOKWORM: (&str, &str) = ("bookworm", "bookworm");

#[test]
fn bookworms_providers_serve_every_device_of_a_known_driver() {
    let providers = case(BOOKWORM, &ALL_UVERBS, |_, _| {});
    let mlx5 = providers.iter().find(|p| p.device == "mlx5_0").unwrap();
    assert_eq!(mlx5.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(mlx5.provider, Some("mlx5"));
    let rxe = providers.iter().find(|p| p.device == "rxe0").unwrap();
    assert_eq!((rxe.driver.as_deref(), rxe.provider), (None, Some("rxe")));
    let irdma = providers.iter().find(|p| p.device == "irdma0").unwrap();
    assert_eq!(
        (irdma.driver.as_deref(), irdma.provider),
        (Some("ice"), Some("irdma"))
    );
    assert!(
        providers.iter().all(|p| p.status == ProviderStatus::Ok),
        "{providers:#?}"
    );
    assert_eq!(providers.len(), ALL_UVERBS.len());
}

#[test]
fn a_removed_provider_is_missing_for_its_devices_only() {
    let providers = case(BOOKWORM, &ALL_UVERBS, |root, _| {
        std::fs::remove_file(root.join(MULTIARCH).join("libibverbs/libmlx5-rdmav34.so")).unwrap()
    });
    for device in ALL_UVERBS {
        let mlx5 = ["mlx5_0", "mlx5_1", "rocep1s0f0"].contains(&device);
        let expected = if mlx5 { "missing" } else { "ok" };
        assert_eq!(status(&providers, device), expected, "{device}");
    }
}

#[test]
fn a_provider_no_driver_file_names_is_missing() {
    let providers = case(BOOKWORM, &ALL_UVERBS, |root, _| {
        std::fs::remove_file(root.join("etc/libibverbs.d/rxe.driver")).unwrap()
    });
    assert_eq!(status(&providers, "rxe0"), "missing");
    assert_eq!(status(&providers, "mlx5_0"), "ok");
}

#[test]
fn bullseyes_libibverbs_finds_only_providers_of_another_abi() {
    // libibverbs 33 looks for lib<name>-rdmav33.so; bookworm's providers are -rdmav34.so.
    let providers = case(("bullseye", "bookworm"), &ALL_UVERBS, |_, _| {});
    assert!(
        providers
            .iter()
            .all(|p| p.status == ProviderStatus::AbiMismatch),
        "{providers:#?}"
    );
}

#[test]
fn a_provider_named_for_this_abi_but_built_for_another_is_a_mismatch() {
    // bullseye's rxe provider (needs IBVERBS_PRIVATE_33) where bookworm's libibverbs looks for
    // librxe-rdmav34.so: the file is there, dlopen fails on the version.
    let providers = case(BOOKWORM, &ALL_UVERBS, |root, _| {
        let bullseye = rdma_generation("bullseye").join(MULTIARCH);
        let target = root.join(MULTIARCH).join("libibverbs/librxe-rdmav34.so");
        std::fs::copy(bullseye.join("libibverbs/librxe-rdmav33.so"), target).unwrap();
    });
    assert_eq!(status(&providers, "rxe0"), "abi_mismatch");
    assert_eq!(status(&providers, "mlx5_0"), "ok");
}

#[test]
fn a_device_without_uverbs_is_invisible_to_verbs() {
    let providers = case(BOOKWORM, &["mlx5_0"], |_, _| {});
    assert_eq!(status(&providers, "mlx5_0"), "ok");
    assert_eq!(status(&providers, "mlx5_1"), "no_uverbs");
    assert_eq!(status(&providers, "rxe0"), "no_uverbs");
}

/// No libibverbs on the library path is a node without verbs userspace; a resolved entry
/// whose file is gone is one applications fail to load.
#[test]
fn without_a_libibverbs_no_userspace_and_with_a_gone_one_missing() {
    let dir = tempfile::tempdir().unwrap();
    let root = root(dir.path(), "bookworm", "bookworm");
    let sys = sysfs(dir.path(), &ALL_UVERBS);
    for (libibverbs, status) in [
        (None, ProviderStatus::NoLibibverbs),
        (
            Some(Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.9")),
            ProviderStatus::Missing,
        ),
    ] {
        let providers = device_providers(&root, &sys, libibverbs);
        assert!(
            providers.iter().all(|p| p.status == status),
            "{providers:#?}"
        );
    }
}

#[test]
fn a_driver_no_provider_serves_is_unknown() {
    let providers = case(BOOKWORM, &ALL_UVERBS, |_, sys| {
        // mlx5_1's PCI function bound to another driver.
        let link = sys.join("class/infiniband/mlx5_1/device/driver");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("../../../../bus/pci/drivers/vfio-pci", &link).unwrap();
    });
    let mlx5 = providers.iter().find(|p| p.device == "mlx5_1").unwrap();
    assert_eq!(mlx5.driver.as_deref(), Some("vfio-pci"));
    assert_eq!(
        (mlx5.provider, mlx5.status),
        (None, ProviderStatus::UnknownDriver)
    );
}

#[test]
fn driver_files_are_read_as_libibverbs_reads_them() {
    let text =
        "# comment\n\n  driver mlx5\n\tdriver\t/opt/ofed/lib/libmlx4 extra\ndriver\nprovider x\n";
    assert_eq!(driver_lines(text), ["mlx5", "/opt/ofed/lib/libmlx4"]);
}

#[test]
fn each_device_is_one_sample_with_its_provider_and_status() {
    let mut samples = Samples::default();
    let providers = [DeviceProvider {
        device: "mlx5_0".into(),
        driver: Some("mlx5_core".into()),
        provider: Some("mlx5"),
        status: ProviderStatus::AbiMismatch,
    }];
    push_samples(&providers, &mut samples);
    let text = crate::metrics::encode(samples, crate::metrics::Format::PrometheusText).unwrap();
    assert!(
        text.contains(r#"hpcnode_rdma_device_provider{device="mlx5_0",provider="mlx5",status="abi_mismatch"} 1"#),
        "{text}"
    );
}

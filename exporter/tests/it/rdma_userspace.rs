//! The `rdma_userspace` collector and `ld_cache` on roots made from Debian's real rdma-core
//! packages (bookworm's 44.0 and bullseye's 33.2, unpacked by
//! `exporter/tests/support/fetch-rdma-userspace.sh`, which `tests/setup.sh` runs), with
//! `ld.so.cache` written by the real `ldconfig -r` in its three layouts: the exact series of
//! each root, and the parser's resolved entry against `ldconfig -p`.

use crate::util;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use hpcnode_exporter::ld_cache::{Cache, Layout};
use util::golden::scrape;
use util::{start_on_root, tests_dir};

const MULTIARCH: &str = "usr/lib/x86_64-linux-gnu";
/// Debian 12's `/etc/ld.so.conf` and libc6's `/etc/ld.so.conf.d/x86_64-linux-gnu.conf`.
const LD_SO_CONF: &str = "include /etc/ld.so.conf.d/*.conf\n\n";
const DEBIAN_CONF: &str = "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n";

/// The unpacked packages of one Debian release.
fn release(name: &str) -> PathBuf {
    let root = std::env::var_os("HPCNODE_RDMA_USERSPACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| tests_dir().join("../target/rdma-userspace"))
        .join(name);
    assert!(
        root.join(MULTIARCH).join("libibverbs.so.1").exists(),
        "{} lacks rdma-core: run exporter/tests/support/fetch-rdma-userspace.sh (tests/setup.sh does)",
        root.display()
    );
    root
}

/// Copies the libraries `pattern` matches (links as links) from a release's multiarch
/// directory to `dir` of the root.
fn install(root: &Path, release_name: &str, pattern: &str, dir: &str) {
    let to = root.join(dir);
    fs::create_dir_all(&to).unwrap();
    let from = release(release_name).join(MULTIARCH);
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cp -a {}/{pattern} {}/",
            from.display(),
            to.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
}

/// A sysfs under `root` with one ConnectX function as the kernel lays it out: `mlx5_0` bound to
/// mlx5_core, with its verbs device `uverbs0`.
fn mlx5_sysfs(root: &Path) {
    let sys = root.join("sys");
    let function = "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0";
    fs::create_dir_all(sys.join(function).join("infiniband/mlx5_0")).unwrap();
    fs::create_dir_all(sys.join(function).join("infiniband_verbs/uverbs0")).unwrap();
    fs::write(
        sys.join(function).join("infiniband_verbs/uverbs0/ibdev"),
        "mlx5_0\n",
    )
    .unwrap();
    // The device's own link to its PCI function, as ib_core registers it.
    std::os::unix::fs::symlink(
        "../../../0000:3b:00.0",
        sys.join(function).join("infiniband/mlx5_0/device"),
    )
    .unwrap();
    fs::create_dir_all(sys.join("bus/pci/drivers/mlx5_core")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../bus/pci/drivers/mlx5_core",
        sys.join(function).join("driver"),
    )
    .unwrap();
    for (class, name) in [("infiniband", "mlx5_0"), ("infiniband_verbs", "uverbs0")] {
        fs::create_dir_all(sys.join("class").join(class)).unwrap();
        std::os::unix::fs::symlink(
            format!("../../{function}/{class}/{name}"),
            sys.join("class").join(class).join(name),
        )
        .unwrap();
    }
}

/// Installs a release's providers: the `.driver` files and the provider directory.
fn install_providers(root: &Path, release_name: &str) {
    let from = release(release_name);
    for dir in ["etc/libibverbs.d", "usr/lib/x86_64-linux-gnu/libibverbs"] {
        let to = root.join(dir);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg(from.join(dir))
            .arg(&to)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// A root with Debian's ld.so.conf and `extra` as `ld.so.conf.d/site.conf`, and a sysfs with
/// one mlx5 device.
fn root_with_conf(extra: Option<&str>) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    mlx5_sysfs(root.path());
    let conf_d = root.path().join("etc/ld.so.conf.d");
    fs::create_dir_all(&conf_d).unwrap();
    fs::write(root.path().join("etc/ld.so.conf"), LD_SO_CONF).unwrap();
    fs::write(conf_d.join("x86_64-linux-gnu.conf"), DEBIAN_CONF).unwrap();
    if let Some(extra) = extra {
        fs::write(conf_d.join("site.conf"), extra).unwrap();
    }
    root
}

fn ldconfig(root: &Path, layout: &str) {
    let status = Command::new("ldconfig")
        .args(["-X", "-r"])
        .arg(root)
        .args(["-c", layout])
        .status()
        .expect("run ldconfig");
    assert!(
        status.success(),
        "ldconfig -r {} -c {layout}",
        root.display()
    );
}

/// `ldconfig -p`'s first x86-64 line for `soname`: the path it prints.
fn ldconfig_first(root: &Path, soname: &str) -> String {
    let out = Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(root.join("etc/ld.so.cache"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with(&format!("{soname} (libc6,x86-64)"))
        })
        .unwrap_or_else(|| panic!("no {soname} in ldconfig -p:\n{text}"));
    line.rsplit_once(" => ").unwrap().1.to_string()
}

fn userspace_lines(root: &Path) -> Vec<String> {
    let exporter = start_on_root("rdma_userspace", root, &[]);
    series(&scrape(&exporter))
}

fn series(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("hpcnode_rdma_userspace_"))
        .map(str::to_string)
        .collect();
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"rdma_userspace\"} 1\n"));
    lines.sort();
    lines
}

/// The series of bookworm's six libraries in the multiarch directory, libibverbs' left out.
fn bookworm_others() -> Vec<String> {
    let mut lines = Vec::new();
    for (library, version) in [
        ("librdmacm.so.1", "1.3.44.0"),
        ("libibumad.so.3", "3.2.44.0"),
        ("libmlx5.so.1", "1.24.44.0"),
        ("libmlx4.so.1", "1.0.44.0"),
        ("libefa.so.1", "1.2.44.0"),
    ] {
        lines.push(format!(
            "hpcnode_rdma_userspace_library_copies{{library=\"{library}\"}} 1"
        ));
        lines.push(format!("hpcnode_rdma_userspace_library_info{{library=\"{library}\",path=\"/{MULTIARCH}/{library}\",version=\"{version}\",resolved=\"1\"}} 1"));
    }
    lines.push("hpcnode_rdma_userspace_library_copies{library=\"libmicmgmt.so.0\"} 0".into());
    lines
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// A root with bookworm's libraries in the multiarch directory and their cache.
pub fn bookworm_root() -> tempfile::TempDir {
    let root = root_with_conf(None);
    install(root.path(), "bookworm", "lib*.so.*", MULTIARCH);
    install_providers(root.path(), "bookworm");
    ldconfig(root.path(), "new");
    root
}

#[test]
fn bookworm_in_the_multiarch_directory_only() {
    let root = bookworm_root();
    let mut expected = bookworm_others();
    expected.push("hpcnode_rdma_userspace_library_copies{library=\"libibverbs.so.1\"} 1".into());
    expected.push(format!("hpcnode_rdma_userspace_library_info{{library=\"libibverbs.so.1\",path=\"/{MULTIARCH}/libibverbs.so.1\",version=\"1.14.44.0\",resolved=\"1\"}} 1"));
    assert_eq!(userspace_lines(root.path()), sorted(expected));
}

/// The incident: bullseye's libibverbs left in /usr/local/lib64, which a site's
/// ld.so.conf.d lists (`site.conf` sorts before `x86_64-linux-gnu.conf`), bookworm's in the
/// multiarch directory: the cache gives the linker the stale copy, in every layout.
#[test]
fn a_stale_copy_in_usr_local_lib64_wins_in_every_cache_layout() {
    for (name, layout) in [
        ("old", Layout::Old),
        ("compat", Layout::Compat),
        ("new", Layout::New),
    ] {
        let root = root_with_conf(Some("/usr/local/lib64\n"));
        install(root.path(), "bookworm", "lib*.so.*", MULTIARCH);
        install(
            root.path(),
            "bullseye",
            "libibverbs.so.1*",
            "usr/local/lib64",
        );
        ldconfig(root.path(), name);

        let cache = Cache::parse(&fs::read(root.path().join("etc/ld.so.cache")).unwrap()).unwrap();
        assert_eq!(cache.layout, layout);
        for soname in ["libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"] {
            let taken = cache.lookup(soname).unwrap();
            assert_eq!(
                taken.path,
                ldconfig_first(root.path(), soname),
                "{name} {soname}"
            );
        }

        let mut expected = bookworm_others();
        expected
            .push("hpcnode_rdma_userspace_library_copies{library=\"libibverbs.so.1\"} 2".into());
        expected.push("hpcnode_rdma_userspace_library_info{library=\"libibverbs.so.1\",path=\"/usr/local/lib64/libibverbs.so.1\",version=\"1.11.33.2\",resolved=\"1\"} 1".into());
        expected.push(format!("hpcnode_rdma_userspace_library_info{{library=\"libibverbs.so.1\",path=\"/{MULTIARCH}/libibverbs.so.1\",version=\"1.14.44.0\",resolved=\"0\"}} 1"));
        assert_eq!(userspace_lines(root.path()), sorted(expected), "{name}");
    }
}

/// Without a cache the linker searches the default directories only: the multiarch copy.
/// After the fix (stale copy removed, `ldconfig` run) the next scrape sees it: the kept
/// reading is dropped when a library directory and the cache change.
#[test]
fn without_a_cache_the_default_directories_and_after_the_fix_one_copy() {
    let root = root_with_conf(Some("/usr/local/lib64\n"));
    install(root.path(), "bookworm", "libibverbs.so.1*", MULTIARCH);
    install(
        root.path(),
        "bullseye",
        "libibverbs.so.1*",
        "usr/local/lib64",
    );
    let exporter = start_on_root("rdma_userspace", root.path(), &[]);
    let lines = series(&scrape(&exporter));
    assert!(lines.contains(&format!("hpcnode_rdma_userspace_library_info{{library=\"libibverbs.so.1\",path=\"/{MULTIARCH}/libibverbs.so.1\",version=\"1.14.44.0\",resolved=\"1\"}} 1")), "{lines:#?}");
    assert!(lines.contains(&"hpcnode_rdma_userspace_library_info{library=\"libibverbs.so.1\",path=\"/usr/local/lib64/libibverbs.so.1\",version=\"1.11.33.2\",resolved=\"0\"} 1".to_string()));

    for file in ["libibverbs.so.1", "libibverbs.so.1.11.33.2"] {
        fs::remove_file(root.path().join("usr/local/lib64").join(file)).unwrap();
    }
    ldconfig(root.path(), "new");
    let lines = series(&scrape(&exporter));
    assert!(
        lines.contains(
            &"hpcnode_rdma_userspace_library_copies{library=\"libibverbs.so.1\"} 1".to_string()
        ),
        "{lines:#?}"
    );
}

/// A merged /usr (`/lib -> usr/lib`): ld.so.conf lists both paths to the multiarch directory;
/// the one file is one copy.
#[test]
fn a_merged_usr_counts_one_file_once() {
    let root = root_with_conf(None);
    install(root.path(), "bookworm", "libibverbs.so.1*", MULTIARCH);
    std::os::unix::fs::symlink("usr/lib", root.path().join("lib")).unwrap();
    ldconfig(root.path(), "new");
    let lines = userspace_lines(root.path());
    let first = ldconfig_first(root.path(), "libibverbs.so.1");
    assert_eq!(
        lines.iter().filter(|l| l.contains("library=\"libibverbs.so.1\"")).cloned().collect::<Vec<_>>(),
        vec![
            "hpcnode_rdma_userspace_library_copies{library=\"libibverbs.so.1\"} 1".to_string(),
            format!("hpcnode_rdma_userspace_library_info{{library=\"libibverbs.so.1\",path=\"{first}\",version=\"1.14.44.0\",resolved=\"1\"}} 1"),
        ]
    );
}

/// The device's provider line of a scrape of `root`.
fn provider_line(root: &Path) -> String {
    let exporter = start_on_root("rdma_userspace", root, &[]);
    let text = scrape(&exporter);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hpcnode_rdma_device_provider{"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    lines[0].to_string()
}

/// Points 1 and 2 together: on bookworm's libraries and providers the mlx5 device's provider
/// loads; with bullseye's libibverbs left in /usr/local/lib64 the linker takes that copy, whose
/// private ABI (IBVERBS_PRIVATE_33) is not the one bookworm's providers need (34): the HCA is
/// there, and no application can open it.
#[test]
fn the_stale_libibverbs_cannot_load_the_installed_provider() {
    let root = bookworm_root();
    assert_eq!(
        provider_line(root.path()),
        "hpcnode_rdma_device_provider{device=\"mlx5_0\",provider=\"mlx5\",status=\"ok\"} 1"
    );
    install(
        root.path(),
        "bullseye",
        "libibverbs.so.1*",
        "usr/local/lib64",
    );
    fs::write(
        root.path().join("etc/ld.so.conf.d/site.conf"),
        "/usr/local/lib64\n",
    )
    .unwrap();
    ldconfig(root.path(), "new");
    assert_eq!(
        ldconfig_first(root.path(), "libibverbs.so.1"),
        "/usr/local/lib64/libibverbs.so.1"
    );
    assert_eq!(
        provider_line(root.path()),
        "hpcnode_rdma_device_provider{device=\"mlx5_0\",provider=\"mlx5\",status=\"abi_mismatch\"} 1"
    );
}

/// A site's link in /usr/local/lib64 to the packaged file (`ln -s`, as some installers make
/// one): two names of one file, in two directories, are one copy, at the path the cache gives.
#[test]
fn a_link_to_the_packaged_file_is_one_copy() {
    let root = root_with_conf(Some("/usr/local/lib64\n"));
    install(root.path(), "bookworm", "libibverbs.so.1*", MULTIARCH);
    let local = root.path().join("usr/local/lib64");
    fs::create_dir_all(&local).unwrap();
    std::os::unix::fs::symlink(
        format!("/{MULTIARCH}/libibverbs.so.1.14.44.0"),
        local.join("libibverbs.so.1"),
    )
    .unwrap();
    ldconfig(root.path(), "new");
    let first = ldconfig_first(root.path(), "libibverbs.so.1");
    assert_eq!(first, "/usr/local/lib64/libibverbs.so.1");
    let lines = userspace_lines(root.path());
    assert_eq!(
        lines.iter().filter(|l| l.contains("library=\"libibverbs.so.1\"")).cloned().collect::<Vec<_>>(),
        vec![
            "hpcnode_rdma_userspace_library_copies{library=\"libibverbs.so.1\"} 1".to_string(),
            format!("hpcnode_rdma_userspace_library_info{{library=\"libibverbs.so.1\",path=\"{first}\",version=\"1.14.44.0\",resolved=\"1\"}} 1"),
        ]
    );
}

/// A stale copy made by hand under the soname's own name (`cp libibverbs.so.1.11.33.2
/// /usr/local/lib64/libibverbs.so.1`): no version in its name, so its newest symbol version
/// (rdma-core 33's `IBVERBS_1.11`) names it, and the two copies are still two versions.
#[test]
fn a_copy_named_by_its_soname_has_its_symbol_version() {
    let root = root_with_conf(Some("/usr/local/lib64\n"));
    install(root.path(), "bookworm", "libibverbs.so.1*", MULTIARCH);
    let local = root.path().join("usr/local/lib64");
    fs::create_dir_all(&local).unwrap();
    fs::copy(
        release("bullseye")
            .join(MULTIARCH)
            .join("libibverbs.so.1.11.33.2"),
        local.join("libibverbs.so.1"),
    )
    .unwrap();
    ldconfig(root.path(), "new");
    let lines = userspace_lines(root.path());
    let ibverbs: Vec<String> = lines
        .into_iter()
        .filter(|l| l.contains("library=\"libibverbs.so.1\""))
        .collect();
    assert_eq!(
        ibverbs,
        vec![
            "hpcnode_rdma_userspace_library_copies{library=\"libibverbs.so.1\"} 2".to_string(),
            format!("hpcnode_rdma_userspace_library_info{{library=\"libibverbs.so.1\",path=\"/{MULTIARCH}/libibverbs.so.1\",version=\"1.14.44.0\",resolved=\"0\"}} 1"),
            "hpcnode_rdma_userspace_library_info{library=\"libibverbs.so.1\",path=\"/usr/local/lib64/libibverbs.so.1\",version=\"IBVERBS_1.11\",resolved=\"1\"} 1".to_string(),
        ]
    );
}

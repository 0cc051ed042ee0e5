//! The `modules` collector end to end: the real binary on fixture roots (procfs, sysfs and the
//! root filesystem's /etc and /lib/modules), whole outputs against `exporter/tests/golden/modules_*.prom`,
//! and on the running kernel's own /proc and /sys.

use crate::util;

use std::fs;
use std::io::Write;
use std::path::Path;

use util::golden::{assert_lines, check_fixture_output, errors_total, has_line, scrape};
use util::{fixture_root, start_on_root, Exporter, HungFiles, TreeCopy};

/// The list from issue 4, plus `8250`, built into every kernel these fixtures stand for.
const EXPECTED: &str =
    "--collector.modules.expected=mlx5_core,mlx5_ib,ib-uverbs,rdma_ucm,ib_ipoib,vfio_pci,nvidia,8250";

fn start(root: &Path, extra: &[&str]) -> Exporter {
    start_on_root("modules", root, extra)
}

fn lines_of<'t>(text: &'t str, metric: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with(['{', ' ']))
        .collect()
}

/// RHEL 7.9 with MLNX_OFED and the NVIDIA driver built on the node: unsigned out-of-tree
/// modules, a proprietary one, kernel-devel of another kernel release installed.
#[test]
fn rhel7_with_unsigned_ofed_and_nvidia() {
    let exporter = start(&fixture_root("modules_rhel7"), &[EXPECTED]);
    let text = check_fixture_output("modules_rhel7", &exporter);
    assert_lines(
        &text,
        &[
            // 12289 = P (bit 0) + O (bit 12) + E (bit 13).
            "hpcnode_kernel_taint_mask 12289",
            "hpcnode_kernel_tainted{flag=\"proprietary_module\",letter=\"P\"} 1",
            "hpcnode_kernel_tainted{flag=\"oot_module\",letter=\"O\"} 1",
            "hpcnode_kernel_tainted{flag=\"unsigned_module\",letter=\"E\"} 1",
            "hpcnode_kernel_tainted{flag=\"warn\",letter=\"W\"} 0",
            "hpcnode_module_info{module=\"nvidia\",state=\"Live\",taints=\"POE\"} 1",
            "hpcnode_module_info{module=\"mlx5_core\",state=\"Live\",taints=\"OE\"} 1",
            // `(POE+)`: the `+` says loading, it is no taint.
            "hpcnode_module_info{module=\"nvidia_peermem\",state=\"Loading\",taints=\"POE\"} 1",
            "hpcnode_module_info{module=\"xfs\",state=\"Live\",taints=\"\"} 1",
            "hpcnode_kernel_modules_supported 1",
            // `build` points at headers of 3.10.0-1160.el7; only 1160.80.1's are installed.
            "hpcnode_kernel_build_dir_present{release=\"3.10.0-1160.el7.x86_64\"} 0",
            // The incident's cause: a newer kernel and its kernel-devel installed, not booted.
            "hpcnode_kernel_installed_build_dir_present{release=\"3.10.0-1160.80.1.el7.x86_64\"} 1",
            "hpcnode_kernel_newer_installed 1",
            "hpcnode_module_sig_enforce 0",
            "hpcnode_module_expected_loaded{module=\"ib_uverbs\"} 1",
            "hpcnode_module_expected_loaded{module=\"vfio_pci\"} 0",
            "hpcnode_module_expected_builtin{module=\"8250\"} 1",
            "hpcnode_module_expected_loaded{module=\"8250\"} 1",
            "hpcnode_module_modprobe_rule{module=\"ib_ipoib\",rule=\"install\",file=\"/etc/modprobe.d/mlnx.conf\"} 1",
            "hpcnode_scrape_collector_success{collector=\"modules\"} 1",
        ],
    );
    assert_eq!(lines_of(&text, "hpcnode_module_info").len(), 32);
    assert_eq!(lines_of(&text, "hpcnode_kernel_tainted").len(), 20);
    // The rescue image has no modules directory, the 957 leftovers of DKMS no image.
    let installed = lines_of(&text, "hpcnode_kernel_installed");
    assert_eq!(installed.len(), 2, "{installed:?}");
    // A BIOS-booted RHEL 7 kernel has neither lockdown nor EFI: no series, no error.
    assert!(lines_of(&text, "hpcnode_kernel_lockdown_mode").is_empty());
    assert!(lines_of(&text, "hpcnode_secure_boot_enabled").is_empty());
    // `nouveau` is blacklisted twice, but it is not an expected module.
    assert!(!text.contains("nouveau"));
    assert_eq!(errors_total(&text, "modules"), 0, "{text}");
}

/// Ubuntu 22.04 booted with Secure Boot: lockdown integrity, signatures enforced, mlx5_ib kept
/// out by `install mlx5_ib /bin/false`, rdma_ucm blacklisted, nvidia refused on the command line.
#[test]
fn secure_boot_host_with_modules_kept_out() {
    let root = fixture_root("modules_secureboot");
    let exporter = start(&root, &[EXPECTED]);
    let text = check_fixture_output("modules_secureboot", &exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_secure_boot_enabled 1",
            "hpcnode_kernel_lockdown_mode{mode=\"integrity\"} 1",
            "hpcnode_kernel_lockdown_mode{mode=\"none\"} 0",
            "hpcnode_kernel_lockdown_mode{mode=\"confidentiality\"} 0",
            "hpcnode_module_sig_enforce 1",
            // The running kernel is the newest: `vmlinuz` and `vmlinuz.old` are only links.
            "hpcnode_kernel_installed{release=\"5.15.0-88-generic\"} 1",
            "hpcnode_kernel_newer_installed 0",
            "hpcnode_kernel_taint_mask 0",
            "hpcnode_module_expected_loaded{module=\"mlx5_ib\"} 0",
            "hpcnode_module_modprobe_rule{module=\"mlx5_ib\",rule=\"install_disabled\",file=\"/etc/modprobe.d/disable-mlx5-ib.conf\"} 1",
            "hpcnode_module_expected_loaded{module=\"rdma_ucm\"} 0",
            "hpcnode_module_modprobe_rule{module=\"rdma_ucm\",rule=\"blacklist\",file=\"/etc/modprobe.d/blacklist-rdma.conf\"} 1",
            "hpcnode_module_expected_loaded{module=\"nvidia\"} 0",
            "hpcnode_module_modprobe_rule{module=\"nvidia\",rule=\"module_blacklist\",file=\"/proc/cmdline\"} 1",
            // Built in (modules.builtin spells it vfio-pci.ko; /sys/module has no initstate).
            "hpcnode_module_expected_loaded{module=\"vfio_pci\"} 1",
            "hpcnode_module_expected_builtin{module=\"vfio_pci\"} 1",
            "hpcnode_module_expected_loaded{module=\"mlx5_core\"} 1",
            "hpcnode_module_expected_builtin{module=\"mlx5_core\"} 0",
            "hpcnode_module_info{module=\"mlx5_core\",state=\"Live\",taints=\"\"} 1",
        ],
    );
    // The absolute `build` link was followed inside --path.rootfs, not on this machine.
    let headers = "/usr/src/linux-headers-5.15.0-91-generic";
    assert!(!Path::new(headers).exists() && root.join(&headers[1..]).is_dir());
    assert!(has_line(
        &text,
        "hpcnode_kernel_build_dir_present{release=\"5.15.0-91-generic\"} 1"
    ));
    // The masked /lib/modprobe.d file and the overridden /usr/lib/modprobe.d one say nothing.
    let rules = lines_of(&text, "hpcnode_module_modprobe_rule");
    assert_eq!(rules.len(), 3, "{rules:#?}");
    assert_eq!(errors_total(&text, "modules"), 0, "{text}");
}

/// The expected modules of the signed-files root (tests/fixtures/README.md tells its story).
const SIGNED_FILES_EXPECTED: &str = "--collector.modules.expected=geniv,pcspkr,lab_mok,lab_foreign_keyid,lab_foreign_serial,lab_unsigned,lab_debian,lab_truncated,8250";

/// Debian 12 on 6.12, booted with module.sig_enforce=1, with out-of-tree modules rebuilt since
/// the boot: every expected module is loaded now, but the files modprobe would load next time
/// (modules.dep, decompressed from xz, zstd and gzip) are signed by Debian's build key, by a
/// MOK key the kernel holds, by a key it lacks, or not at all; one is cut short.
#[test]
fn module_files_and_who_signed_them() {
    let exporter = start(
        &fixture_root("modules_signed_files"),
        &[SIGNED_FILES_EXPECTED],
    );
    let text = check_fixture_output("modules_signed_files", &exporter);
    let debian = "signer=\"Build time autogenerated kernel key\",state=\"issuer_name_match\"";
    assert_lines(
        &text,
        &[
            "hpcnode_module_sig_enforce 1",
            // geniv and the dependency modprobe loads first, once although two modules need it.
            "hpcnode_module_file_signed{module=\"geniv\",file=\"kernel/crypto/geniv.ko.xz\"} 1",
            "hpcnode_module_file_signed{module=\"crypto_null\",file=\"kernel/crypto/crypto_null.ko.xz\"} 1",
            &format!("hpcnode_module_file_signer_trust{{module=\"geniv\",file=\"kernel/crypto/geniv.ko.xz\",{debian}}} 1"),
            &format!("hpcnode_module_file_signer_trust{{module=\"pcspkr\",file=\"kernel/drivers/input/misc/pcspkr.ko.xz\",{debian}}} 1"),
            &format!("hpcnode_module_file_signer_trust{{module=\"lab_debian\",file=\"extra/lab_debian.ko.gz\",{debian}}} 1"),
            // Signed by key identifier, a key /proc/keys shows (enrolled with mokutil).
            "hpcnode_module_file_signer_trust{module=\"lab_mok\",file=\"updates/dkms/lab_mok.ko.xz\",signer=\"keyid:00e3e3837fcbb7f6b9a044a8f424d4683a4ba61a\",state=\"trusted\"} 1",
            // Signed by key identifier, a key the kernel does not hold: refused.
            "hpcnode_module_file_signed{module=\"lab_foreign_keyid\",file=\"updates/dkms/lab_foreign_keyid.ko.zst\"} 1",
            "hpcnode_module_file_signer_trust{module=\"lab_foreign_keyid\",file=\"updates/dkms/lab_foreign_keyid.ko.zst\",signer=\"keyid:d1e7c1326572d660b7d3e4e9cfe004533667504c\",state=\"untrusted\"} 1",
            // By issuer and serial: /proc/keys cannot rule out a key it describes otherwise.
            "hpcnode_module_file_signer_trust{module=\"lab_foreign_serial\",file=\"updates/dkms/lab_foreign_serial.ko.gz\",signer=\"Lab foreign module key\",state=\"unknown\"} 1",
            "hpcnode_module_file_signed{module=\"lab_unsigned\",file=\"extra/lab_unsigned.ko\"} 0",
            "hpcnode_collector_errors_total{collector=\"modules\",kind=\"parse\"} 1",
            "hpcnode_scrape_collector_success{collector=\"modules\"} 1",
        ],
    );
    // Eight files: the truncated one is an error, and built-in 8250 has none.
    assert_eq!(lines_of(&text, "hpcnode_module_file_signed").len(), 8);
    assert_eq!(lines_of(&text, "hpcnode_module_file_signer_trust").len(), 7);
    assert!(!text.contains("lab_truncated.ko.xz\""));
    assert!(!text.contains("file=\"kernel/drivers/tty"));
    let cause = "lab_truncated.ko.xz: not a valid xz stream";
    assert_eq!(exporter.log_with(cause).matches(cause).count(), 1);
}

/// The value of a sample without labels.
fn value_of(text: &str, metric: &str) -> u64 {
    let line = lines_of(text, metric);
    let [line] = line[..] else {
        panic!("no single {metric} in {text}");
    };
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A 91 KB `.ko.xz` of 600 MiB of zeros (tests/fixtures/module_bombs.sh) among the expected
/// modules' files: decoded as a stream (the exporter's peak memory stays far below the image),
/// refused at the 512 MiB image limit, and not decoded again while it is unchanged; the other
/// files are still read.
#[test]
fn a_compressed_module_bomb_costs_one_bounded_decode() {
    let tmp = TreeCopy::with_rootfs("modules_signed_files").dir;
    let modules = tmp.path().join("lib/modules/6.12.117+deb12-amd64");
    let bomb = util::tests_dir().join("fixtures/module_bombs/bomb.ko.xz");
    fs::copy(bomb, modules.join("extra/lab_bomb.ko.xz")).unwrap();
    let mut dep = fs::read_to_string(modules.join("modules.dep")).unwrap();
    dep.push_str("extra/lab_bomb.ko.xz:\n");
    fs::write(modules.join("modules.dep"), dep).unwrap();
    let expected = format!("{SIGNED_FILES_EXPECTED},lab_bomb");
    // Decoding 512 MiB takes a few seconds on a busy machine.
    let exporter = start(tmp.path(), &[&expected, "--scrape.timeout=60s"]);
    let first = scrape(&exporter);
    // Before: 1.24 GB, the whole block held at once. Now a dictionary (8 MiB here) and a tail.
    let peak_kib = exporter.status_field("VmHWM");
    assert!(peak_kib < 128 << 10, "peak RSS {peak_kib} KiB");
    let decoded = value_of(&first, "hpcnode_module_file_decompressed_bytes_total");
    assert!(decoded > 512 << 20, "{decoded}");
    assert!(!first.contains("lab_bomb.ko.xz\""));
    assert!(has_line(
        &first,
        "hpcnode_module_file_signed{module=\"geniv\",file=\"kernel/crypto/geniv.ko.xz\"} 1"
    ));
    let cause = "lab_bomb.ko.xz: decompressed module larger than 512 MiB";
    assert_eq!(exporter.log_with(cause).matches(cause).count(), 1);
    let parse_errors = "hpcnode_collector_errors_total{collector=\"modules\",kind=\"parse\"}";
    for scrapes in 2..=3 {
        let again = scrape(&exporter);
        let decoded_again = value_of(&again, "hpcnode_module_file_decompressed_bytes_total");
        assert_eq!(decoded_again, decoded, "decoded again");
        // Still counted at each scrape (the bomb and the truncated file), and logged once.
        assert!(has_line(&again, &format!("{parse_errors} {}", 2 * scrapes)));
    }
    assert_eq!(exporter.log_with(cause).matches(cause).count(), 1);
}

/// `modules.dep` is read again only when depmod has rewritten it (its stamp changed): a scrape
/// that finds it as it was uses the files it listed, even where its bytes were changed in place
/// with size and time kept (which depmod never does: it writes a new file and renames it).
#[test]
fn modules_dep_is_read_again_only_when_rewritten() {
    let tmp = TreeCopy::with_rootfs("modules_signed_files").dir;
    let dep = tmp
        .path()
        .join("lib/modules/6.12.117+deb12-amd64/modules.dep");
    let exporter = start(tmp.path(), &[SIGNED_FILES_EXPECTED]);
    let geniv_needs = "file=\"kernel/crypto/crypto_null.ko.xz\"";
    assert!(scrape(&exporter).contains(geniv_needs));
    // In place, same length, same modification time: geniv's dependency renamed away.
    let text = fs::read_to_string(&dep).unwrap();
    let modified = fs::metadata(&dep).unwrap().modified().unwrap();
    let edited = text.replace("crypto/crypto_null.ko.xz", "crypto/crypto_nul2.ko.xz");
    assert_eq!(edited.len(), text.len());
    fs::OpenOptions::new()
        .write(true)
        .open(&dep)
        .unwrap()
        .write_all(edited.as_bytes())
        .unwrap();
    fs::File::options()
        .write(true)
        .open(&dep)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert!(
        scrape(&exporter).contains(geniv_needs),
        "read again unchanged"
    );
    // As depmod writes it: a new file renamed over the old one.
    let new = dep.with_extension("dep.new");
    fs::write(&new, edited).unwrap();
    fs::rename(&new, &dep).unwrap();
    assert!(
        !scrape(&exporter).contains(geniv_needs),
        "not read again after depmod"
    );
}

/// The exporter as a user other than root, or a kernel without /proc/keys: the kernel's keys
/// are not visible, so no signer is called untrusted.
#[test]
fn without_the_kernels_keys_no_signer_is_untrusted() {
    let tmp = TreeCopy::with_rootfs("modules_signed_files").dir;
    let root = tmp.path();
    fs::remove_file(root.join("proc/keys")).unwrap();
    let exporter = start(root, &[SIGNED_FILES_EXPECTED]);
    let text = scrape(&exporter);
    let trust = lines_of(&text, "hpcnode_module_file_signer_trust");
    assert_eq!(trust.len(), 7);
    assert!(
        trust.iter().all(|l| l.contains("state=\"unknown\"")),
        "{trust:#?}"
    );
    assert!(has_line(
        &text,
        "hpcnode_module_file_signed{module=\"lab_unsigned\",file=\"extra/lab_unsigned.ko\"} 0"
    ));
}

/// A kernel built without module support (as this CI machine's): no /proc/modules.
#[test]
fn kernel_without_module_support() {
    let exporter = start(&fixture_root("modules_none"), &[EXPECTED]);
    let text = check_fixture_output("modules_none", &exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_kernel_modules_supported 0",
            "hpcnode_module_expected_loaded{module=\"8250\"} 1",
            "hpcnode_module_expected_builtin{module=\"8250\"} 1",
            "hpcnode_module_expected_loaded{module=\"mlx5_core\"} 0",
            "hpcnode_scrape_collector_success{collector=\"modules\"} 1",
        ],
    );
    assert!(lines_of(&text, "hpcnode_module_info").is_empty());
    // Scraped again: still no error, and nothing logged.
    let again = scrape(&exporter);
    assert_eq!(errors_total(&again, "modules"), 0, "{again}");
    assert!(!exporter.log().contains("level=warn"), "{}", exporter.log());
}

/// Past --collector.modules.max-modules, the oldest modules fold into one `other` series that
/// counts them and keeps their taint letters.
#[test]
fn module_series_are_capped() {
    let exporter = start(
        &fixture_root("modules_rhel7"),
        &["--collector.modules.max-modules=4"],
    );
    let text = scrape(&exporter);
    let info = lines_of(&text, "hpcnode_module_info");
    assert_eq!(info.len(), 5, "{info:#?}");
    // The newest four (/proc/modules lists the last loaded first) keep their own series.
    for newest in [
        "nvidia_peermem",
        "nvidia_drm",
        "nvidia_modeset",
        "nvidia_uvm",
    ] {
        assert!(info
            .iter()
            .any(|l| l.contains(&format!("module=\"{newest}\""))));
    }
    assert!(has_line(
        &text,
        "hpcnode_module_info{module=\"other\",state=\"\",taints=\"EOP\"} 28"
    ));
    assert_eq!(errors_total(&text, "modules"), 0);
}

/// Garbage in each file the collector reads: each is reported once per cause, and everything
/// else is still exported.
#[test]
fn broken_input_is_reported_and_the_rest_exported() {
    let tmp = TreeCopy::with_rootfs("modules_secureboot").dir;
    let root = tmp.path();
    fs::write(root.join("proc/sys/kernel/tainted"), "lots\n").unwrap();
    let mut modules = fs::read_to_string(root.join("proc/modules")).unwrap();
    modules.push_str("mlx5_ib 393216 0 - Sleeping 0xffffffffc0d00000\n");
    fs::write(root.join("proc/modules"), modules).unwrap();
    fs::write(root.join("sys/kernel/security/lockdown"), "integrity\n").unwrap();
    fs::write(
        root.join("sys/module/module/parameters/sig_enforce"),
        "maybe\n",
    )
    .unwrap();
    let efivar = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";
    fs::write(root.join(efivar), [6, 0, 0, 0, 7]).unwrap();
    fs::write(root.join("proc/sys/kernel/osrelease"), "../../etc\n").unwrap();
    let fifo = root.join("etc/modprobe.d/fifo.conf");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);

    let exporter = start(root, &[EXPECTED]);
    let text = scrape(&exporter);
    scrape(&exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_collector_errors_total{collector=\"modules\",kind=\"not_regular_file\"} 1",
            "hpcnode_scrape_collector_success{collector=\"modules\"} 1",
            // Unharmed by the bad line next to it, and not counted as loaded from it.
            "hpcnode_module_info{module=\"mlx5_core\",state=\"Live\",taints=\"\"} 1",
            "hpcnode_module_expected_loaded{module=\"mlx5_ib\"} 0",
            "hpcnode_module_modprobe_rule{module=\"rdma_ucm\",rule=\"blacklist\",file=\"/etc/modprobe.d/blacklist-rdma.conf\"} 1",
        ],
    );
    for absent in [
        "hpcnode_kernel_taint_mask",
        "hpcnode_kernel_lockdown_mode",
        "hpcnode_module_sig_enforce",
        "hpcnode_secure_boot_enabled",
        "hpcnode_kernel_build_dir_present",
    ] {
        assert!(lines_of(&text, absent).is_empty(), "{absent} exported");
    }
    for cause in [
        "tainted: not an unsigned integer",
        "modules: expected 'name size refcount deps state address [(taints)]'",
        "lockdown: expected modes with one in [brackets]",
        "sig_enforce: expected Y or N",
        "expected 4 attribute bytes and a 0 or 1",
        "osrelease: not a kernel release",
        "fifo.conf: not a regular file",
    ] {
        // The log is read on a thread of its own, which may lag behind the scrape.
        let log = exporter.log_with(cause);
        assert_eq!(log.matches(cause).count(), 1, "{cause:?} in log:\n{log}");
    }
    // Named and counted, never quoted.
    let log = exporter.log();
    for content in ["lots", "Sleeping", "maybe", "../../etc"] {
        assert!(!log.contains(content), "{content:?} in log:\n{log}");
    }
}

/// This machine's own kernel, read through the real /proc and /sys. The CI kernel has no
/// module support; the facts are read here independently, so the test holds on any kernel.
#[test]
fn running_kernel() {
    let builtin_in_sysfs = fs::read_dir("/sys/module")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .find(|dir| !dir.join("initstate").exists())
        .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned());
    let expected = format!(
        "--collector.modules.expected=hpcnode_no_such_module{}",
        builtin_in_sysfs
            .as_ref()
            .map(|m| format!(",{m}"))
            .unwrap_or_default()
    );
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.modules",
        "--path.procfs=/proc",
        "--path.sysfs=/sys",
        "--path.rootfs=/",
        &expected,
    ]);
    let text = scrape(&exporter);

    let supported = Path::new("/proc/modules").exists();
    let tainted = fs::read_to_string("/proc/sys/kernel/tainted").unwrap();
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let build_dir = Path::new("/lib/modules")
        .join(release.trim())
        .join("build")
        .is_dir();
    assert_lines(
        &text,
        &[
            &format!("hpcnode_kernel_modules_supported {}", u8::from(supported)),
            &format!("hpcnode_kernel_taint_mask {}", tainted.trim()),
            &format!(
                "hpcnode_kernel_build_dir_present{{release=\"{}\"}} {}",
                release.trim(),
                u8::from(build_dir)
            ),
            "hpcnode_module_expected_loaded{module=\"hpcnode_no_such_module\"} 0",
            "hpcnode_scrape_collector_success{collector=\"modules\"} 1",
        ],
    );
    // A /sys/module directory without initstate is a built-in module, on any kernel.
    if let Some(module) = builtin_in_sysfs {
        assert!(has_line(
            &text,
            &format!("hpcnode_module_expected_builtin{{module=\"{module}\"}} 1")
        ));
    }
    if !supported {
        assert!(lines_of(&text, "hpcnode_module_info").is_empty());
    }
    assert_eq!(
        errors_total(&text, "modules"),
        0,
        "{text}\n{}",
        exporter.log()
    );
}

/// An EFI variable read that never returns (firmware runtime services can hang; here a FUSE
/// file that never answers) hides only the Secure Boot state, and is not read again while hung.
#[test]
fn hung_efi_variable_hides_only_secure_boot() {
    let tmp = TreeCopy::with_rootfs("modules_secureboot").dir;
    let root = tmp.path();
    let efivars = root.join("sys/firmware/efi/efivars");
    let names: Vec<String> = fs::read_dir(&efivars)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let Some(_hung) =
        HungFiles::mount("hung_efi_variable_hides_only_secure_boot", &efivars, &names)
    else {
        return;
    };
    let exporter = start(root, &[EXPECTED, "--scrape.timeout=500ms"]);
    for _ in 0..3 {
        let text = scrape(&exporter);
        assert_lines(
            &text,
            &[
                "hpcnode_scrape_collector_success{collector=\"modules\"} 0",
                "hpcnode_kernel_taint_mask 0",
                "hpcnode_module_expected_loaded{module=\"mlx5_ib\"} 0",
                "hpcnode_kernel_lockdown_mode{mode=\"integrity\"} 1",
                "hpcnode_module_sig_enforce 1",
            ],
        );
        assert!(lines_of(&text, "hpcnode_secure_boot_enabled").is_empty());
    }
    let text = scrape(&exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_collector_errors_total{collector=\"modules\",kind=\"timeout\"} 1",
            "hpcnode_collector_errors_total{collector=\"modules\",kind=\"still_running\"} 3",
        ],
    );
}

use super::*;

fn settings(args: &[&str]) -> Result<ModulesSettings, ConfigError> {
    ModulesSettings::from_flags(&Flags::parse((REGISTRATION.flags)(), args)?)
}

/// RHEL 8 and later ship the image in the modules directory (kernel-install copies it to
/// /boot); a running kernel whose image was removed is still compared with the rest.
#[test]
fn kernels_with_their_image_in_lib_modules_are_installed() {
    let root = tempfile::tempdir().unwrap();
    let write = |path: &str, content: &str| {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    write(
        "proc/sys/kernel/osrelease",
        "4.18.0-513.24.1.el8_9.x86_64\n",
    );
    write("lib/modules/4.18.0-513.24.1.el8_9.x86_64/modules.dep", "");
    write("lib/modules/4.18.0-553.el8_10.x86_64/vmlinuz", "");
    write("lib/modules/4.18.0-553.el8_10.x86_64/build/Makefile", "");
    write("lib/modules/4.18.0-477.el8.x86_64/vmlinuz", "");
    let collector = ModulesCollector::new(&Host::of_tree(root.path()), Vec::new(), 10);
    let mut out = Output::default();
    collector.collect_unit(&Unit::Installed, &mut out);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let families = out.samples.families();
    let samples = |desc: &Desc| -> Vec<String> {
        let family = families.iter().find(|f| f.desc.name == desc.name).unwrap();
        family
            .samples()
            .map(|(labels, value)| format!("{{{labels}}} {value:?}"))
            .collect()
    };
    let installed = samples(&KERNEL_INSTALLED);
    assert_eq!(installed.len(), 2, "{installed:?}");
    assert!(
        installed[0].contains("4.18.0-477.el8.x86_64"),
        "{installed:?}"
    );
    assert!(
        installed[1].contains("4.18.0-553.el8_10.x86_64"),
        "{installed:?}"
    );
    let headers = samples(&INSTALLED_BUILD_DIR);
    assert!(
        headers[0].ends_with("Int(0)") && headers[1].ends_with("Int(1)"),
        "{headers:?}"
    );
    assert_eq!(samples(&NEWER_INSTALLED), ["{} Int(1)"]);
}

#[test]
fn expected_modules_are_normalised_like_the_kernel_does() {
    let parsed = settings(&["--collector.modules.expected=mlx5_core, ib-uverbs,ib_uverbs"]);
    assert_eq!(parsed.unwrap().expected, ["mlx5_core", "ib_uverbs"]);
    assert!(settings(&[]).unwrap().expected.is_empty());
    let too_long = "m".repeat(56);
    for bad in [
        "mlx5_core,",
        "a b",
        "../x",
        "nvidia;reboot",
        too_long.as_str(),
    ] {
        let flag = format!("--collector.modules.expected={bad}");
        let err = settings(&[&flag]).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid --collector.modules.expected "),
            "{bad:?}: {err}"
        );
    }
    assert_eq!(settings(&[]).unwrap().max_modules, 2048);
    for bad in ["0", "-1", "65537", "many"] {
        let flag = format!("--collector.modules.max-modules={bad}");
        let err = settings(&[&flag]).unwrap_err().to_string();
        assert!(err.contains("--collector.modules.max-modules"), "{err}");
    }
}

#[test]
fn proc_modules_lines_of_3_10_and_6_x() {
    let text = "nvidia_uvm 1068032 0 - Live 0xffffffffc1a5e000 (POE)\n\
                mlx5_ib 393216 0 - Live 0x0000000000000000 (OE)\n\
                ib_core 421888 9 rdma_ucm,ib_ipoib,ib_umad,mlx5_ib,ib_uverbs, Live 0xffffffffc0a3e000\n\
                pcspkr 12718 0 - Loading 0xffffffffc0520000 (E+)\n\
                dm_mod 124501 - - Live 0xffffffffc04a1000\n";
    let (modules, errors) = parse_modules(Path::new("modules"), text);
    assert!(errors.is_empty(), "{errors:?}");
    let summary: Vec<_> = modules
        .iter()
        .map(|m| (m.name.as_str(), m.state, m.taints.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("nvidia_uvm", "Live", "POE"),
            ("mlx5_ib", "Live", "OE"),
            ("ib_core", "Live", ""),
            ("pcspkr", "Loading", "E"),
            ("dm_mod", "Live", ""),
        ]
    );
}

#[test]
fn a_bad_line_is_reported_and_the_others_kept() {
    let text = "garbage\n\
                mlx5_core 2134016 1 mlx5_ib, Live 0xffffffffc0a3e000 (OE)\n\
                mlx5_core 2134016 1 mlx5_ib, Live 0xffffffffc0a3e000 (OE)\n\
                x 12 0 - Dancing 0x0\n\
                y 12 0 - Live 0x0 (o)\n";
    let (modules, errors) = parse_modules(Path::new("modules"), text);
    assert_eq!(modules.len(), 1);
    assert_eq!(errors.len(), 4);
}

#[test]
fn builtin_index_names_are_the_kernels() {
    let index = parse_builtin_index(
        "kernel/drivers/vfio/pci/vfio-pci.ko\nkernel/drivers/infiniband/core/ib_core.ko\n",
    );
    assert!(index.contains("vfio_pci") && index.contains("ib_core"));
    assert_eq!(index.len(), 2);
}

#[test]
fn cmdline_blacklists() {
    let cmdline =
        "BOOT_IMAGE=/vmlinuz ro modprobe.blacklist=nouveau,mlx5-ib module_blacklist=nvidia quiet";
    assert_eq!(
        parse_cmdline_blacklists(cmdline),
        [
            ("nouveau".to_string(), "blacklist"),
            ("mlx5_ib".to_string(), "blacklist"),
            ("nvidia".to_string(), "module_blacklist"),
        ]
    );
    // The kernel reads `module-blacklist` as `module_blacklist`, and not after `--`; kmod
    // reads `modprobe.blacklist` on the whole line.
    let cmdline =
        "module-blacklist=\"nvidia,nouveau\" -- module_blacklist=ast modprobe.blacklist=i915";
    assert_eq!(
        parse_cmdline_blacklists(cmdline),
        [
            ("nvidia".to_string(), "module_blacklist"),
            ("nouveau".to_string(), "module_blacklist"),
            ("i915".to_string(), "blacklist"),
        ]
    );
}

#[test]
fn lockdown_modes() {
    let modes = |text| -> Option<Vec<String>> {
        let modes = parse_lockdown(text)?;
        Some(modes.into_iter().map(|(m, a)| format!("{m}={a}")).collect())
    };
    assert_eq!(
        modes("none [integrity] confidentiality").unwrap(),
        ["none=false", "integrity=true", "confidentiality=false"]
    );
    assert_eq!(
        modes("[none] integrity confidentiality").unwrap()[0],
        "none=true"
    );
    for bad in [
        "",
        "none integrity",
        "[none] [integrity]",
        "[] none",
        "[None]",
    ] {
        assert_eq!(modes(bad), None, "{bad:?}");
    }
}

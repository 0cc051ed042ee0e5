use super::*;

fn rule(module: &str, action: Action) -> Rule {
    Rule {
        module: module.to_string(),
        action,
    }
}

#[test]
fn install_and_blacklist_rules() {
    let text = "# OFED\n\
                install mlx5_ib /bin/false\n\
                install ib-uverbs /sbin/modprobe --ignore-install ib_uverbs \\\n  && /usr/bin/logger loaded\n\
                install usb-storage true\n\
                # blacklist nouveau\n\
                blacklist rdma-ucm\n\
                options mlx5_core prof_sel=2\n\
                blacklist\n";
    let install = |command: &str| Action::Install(command.to_string());
    assert_eq!(
        parse_rules(text),
        [
            rule("mlx5_ib", install("/bin/false")),
            rule(
                "ib_uverbs",
                install("/sbin/modprobe --ignore-install ib_uverbs && /usr/bin/logger loaded")
            ),
            rule("usb_storage", install("true")),
            rule("rdma_ucm", Action::Blacklist),
        ]
    );
}

#[test]
fn only_a_lone_true_or_false_disables() {
    let disables = |text| parse_rules(text)[0].action.disables();
    assert!(disables("install mlx5_ib /bin/false"));
    assert!(disables("install mlx5_ib true"));
    assert!(!disables("install mlx5_ib /bin/true && modprobe mlx5_ib"));
    assert!(!disables("install mlx5_ib /sbin/truex"));
    assert!(!disables("blacklist true"));
}

#[test]
fn glob_corner_cases() {
    assert!(glob_match(b"*", b""));
    assert!(glob_match(b"a*b*c", b"axxbyyc"));
    assert!(!glob_match(b"a*b*c", b"axxbyy"));
    assert!(glob_match(b"[!0-9]x", b"ax"));
    assert!(!glob_match(b"[!0-9]x", b"1x"));
    assert!(glob_match(b"[]]", b"]"));
    assert!(glob_match(b"[a", b"[a"));
    assert!(glob_match(b"??", b"ab"));
    assert!(!glob_match(b"?", b""));
}

/// kmod's `underscores()`: ranges keep their dashes, unbalanced brackets and an install
/// without a command are syntax errors (the line is ignored).
#[test]
fn patterns_and_syntax_errors_as_kmod_reads_them() {
    let install = |command: &str| Action::Install(command.to_string());
    assert_eq!(
        parse_rules(
            "install mlx[4-5]-ib /bin/false\n\
             blacklist ib-[a-z]*\n\
             install mlx5_ib\n\
             blacklist mlx5]ib\n\
             blacklist mlx5[ib\n"
        ),
        [
            rule("mlx[4-5]_ib", install("/bin/false")),
            rule("ib_[a-z]*", Action::Blacklist),
        ]
    );
}

#[test]
fn kmod_precedence_and_dev_null_masks() {
    let root = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("etc/modprobe.d/mlx5.conf", "blacklist mlx5_ib\n");
    write("usr/lib/modprobe.d/mlx5.conf", "blacklist mlx5_core\n");
    write(
        "usr/local/lib/modprobe.d/local.alias",
        "install ib_srp /bin/true\n",
    );
    write("lib/modprobe.d/90-nvidia.conf", "blacklist nvidia\n");
    write("lib/modprobe.d/.hidden.conf", "blacklist hidden\n");
    write("lib/modprobe.d/README", "blacklist readme\n");
    std::os::unix::fs::symlink(
        "/dev/null",
        root.path().join("etc/modprobe.d/90-nvidia.conf"),
    )
    .unwrap();
    // A file where a directory would be is no directory, as for kmod.
    write("run/modprobe.d", "");

    let mut errors = Vec::new();
    let files = read_config(root.path(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let summary: Vec<(&str, Vec<&str>)> = files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.rules.iter().map(|r| r.module.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("/usr/local/lib/modprobe.d/local.alias", vec!["ib_srp"]),
            ("/etc/modprobe.d/mlx5.conf", vec!["mlx5_ib"]),
        ]
    );
}

#[test]
fn an_unreadable_file_is_an_error_and_the_others_are_read() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("etc/modprobe.d");
    std::fs::create_dir_all(dir.join("sub.conf")).unwrap();
    std::fs::write(dir.join("nouveau.conf"), "blacklist nouveau\n").unwrap();
    let mut errors = Vec::new();
    let files = read_config(root.path(), &mut errors);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].rules, [rule("nouveau", Action::Blacklist)]);
    assert_eq!(errors.len(), 1, "{errors:?}");
}

/// Debian's alternatives link a modprobe.d file by an absolute path
/// (`/etc/modprobe.d/nvidia.conf -> /etc/alternatives/...`): it is followed inside the
/// root, where the exporter in a container finds the host's file, never the container's.
#[test]
fn absolute_links_are_followed_inside_the_root() {
    let root = tempfile::tempdir().unwrap();
    let conf = root.path().join("usr/lib/nvidia/nvidia-modprobe.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, "blacklist nouveau\n").unwrap();
    for dir in ["etc/modprobe.d", "etc/alternatives"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let link = |target: &str, path: &str| {
        std::os::unix::fs::symlink(target, root.path().join(path)).unwrap();
    };
    link(
        "/usr/lib/nvidia/nvidia-modprobe.conf",
        "etc/alternatives/nvidia--nvidia-modprobe.conf",
    );
    link(
        "/etc/alternatives/nvidia--nvidia-modprobe.conf",
        "etc/modprobe.d/nvidia.conf",
    );
    let mut errors = Vec::new();
    let files = read_config(root.path(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(files[0].path, "/etc/modprobe.d/nvidia.conf");
    assert_eq!(files[0].rules, [rule("nouveau", Action::Blacklist)]);
}

//! Opening a path under a root without ever leaving it: openat2 (`RESOLVE_IN_ROOT`,
//! `RESOLVE_BENEATH`, no magic links) where the kernel has it, else a walk in user space that
//! does the same one component at a time (RHEL 8's 4.18 and other kernels before 5.6).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Links followed in one path before giving up with `ELOOP`, as the kernel does (MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// Times an open is retried when openat2 reports a race with a rename or mount elsewhere on
/// the system while it resolved `..` (it answers EAGAIN and asks the caller to retry).
const MAX_RACE_RETRIES: usize = 16;

/// Where a path may lead from the directory it is resolved from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Below it: `..` above it or an absolute link fails with `EXDEV` (`RESOLVE_BENEATH`).
    Beneath,
    /// As if it were `/`: `..` stops at it, absolute links start from it (`RESOLVE_IN_ROOT`).
    InRoot,
}

/// Opens `path` from `dir` within `scope`, never through a magic link: openat2 where the
/// kernel has it (5.6), else a walk that does the same in user space.
pub(super) fn resolve(
    dir: BorrowedFd,
    path: &Path,
    flags: OFlags,
    scope: Scope,
) -> Result<OwnedFd, Errno> {
    if !openat2_available() {
        return walk(dir, path, flags, scope);
    }
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let how = ResolveFlags::NO_MAGICLINKS
        | match scope {
            Scope::Beneath => ResolveFlags::BENEATH,
            Scope::InRoot => ResolveFlags::IN_ROOT,
        };
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), how) {
            Err(Errno::AGAIN) if attempts < MAX_RACE_RETRIES => attempts += 1,
            opened => return opened,
        }
    }
}

/// Whether openat2 can be used: the kernel has it (5.6) and lets this process call it (some
/// container seccomp profiles answer EPERM for system calls they do not know).
fn openat2_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let probe = rustix::fs::openat2(
            rustix::fs::CWD,
            "/",
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_MAGICLINKS,
        );
        !matches!(probe, Err(Errno::NOSYS | Errno::PERM))
    })
}

/// [`resolve`] for kernels without openat2: one component at a time with `O_NOFOLLOW`, so the
/// kernel follows no link; a link's target is read and walked here under the same scope.
/// Magic links are never followed as such (their text is walked like any other target). The
/// final component gets `flags`; the directories on the way are opened `O_PATH`.
fn walk(dir: BorrowedFd, path: &Path, flags: OFlags, scope: Scope) -> Result<OwnedFd, Errno> {
    // Directories entered below `dir`: `..` leaves the last one.
    let mut entered: Vec<OwnedFd> = Vec::new();
    // The components still to walk, the next one last.
    let mut pending = components(path.as_os_str().as_bytes());
    let mut links = 0;
    loop {
        let current = entered.last().map_or(dir, |fd| fd.as_fd());
        let Some(component) = pending.pop() else {
            // The path ended on a directory (`.`, `..`, empty): open it as asked.
            return rustix::fs::openat(current, ".", flags, Mode::empty());
        };
        match component.as_slice() {
            b"." => {}
            b".." => {
                if entered.pop().is_none() && scope == Scope::Beneath {
                    return Err(Errno::XDEV);
                }
            }
            name => {
                let last = pending.is_empty();
                let step = match last {
                    true => flags,
                    false => OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                };
                match rustix::fs::openat(current, name, step | OFlags::NOFOLLOW, Mode::empty()) {
                    Ok(fd) if last => return Ok(fd),
                    Ok(fd) => entered.push(fd),
                    // A link (or a file where a directory belongs, which readlink tells apart).
                    Err(errno @ (Errno::LOOP | Errno::NOTDIR)) => {
                        let Ok(target) = rustix::fs::readlinkat(current, name, Vec::new()) else {
                            return Err(errno);
                        };
                        links += 1;
                        if links > MAX_LINKS {
                            return Err(Errno::LOOP);
                        }
                        let target = target.into_bytes();
                        if target.starts_with(b"/") {
                            match scope {
                                Scope::Beneath => return Err(Errno::XDEV),
                                Scope::InRoot => entered.clear(),
                            }
                        }
                        pending.extend(components(&target));
                    }
                    Err(errno) => return Err(errno),
                }
            }
        }
    }
}

/// A path's components, last first (so that popping gives the next one).
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&byte| byte == b'/')
        .filter(|component| !component.is_empty())
        .rev()
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::sysfs::{AttributeReader, SysDir};
    use rustix::fs::FileType;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// A tree with what a hostile or broken root holds: links out of it, absolute and relative,
    /// beside the relative directory links sysfs is made of. `outside/shadow` is the host's
    /// file that must never be read through the root.
    pub(in crate::sysfs) fn hostile_tree() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
        let shadow = outside.join("shadow");
        for dir in [
            "devices/mlx5_0/ports/1",
            "devices/sibling",
            "class/infiniband",
        ] {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        fs::create_dir_all(&outside).unwrap();
        fs::write(&shadow, "root:$6$secret\n").unwrap();
        fs::write(root.join("devices/mlx5_0/fw_ver"), "20.31\n").unwrap();
        fs::write(root.join("devices/mlx5_0/ports/1/state"), "4: ACTIVE\n").unwrap();
        fs::write(root.join("devices/sibling/board_id"), "MT_0000000223\n").unwrap();
        let link = |target: &Path, name: &str| symlink(target, root.join(name)).unwrap();
        link(Path::new("../../devices/mlx5_0"), "class/infiniband/mlx5_0");
        link(Path::new("../sibling"), "devices/mlx5_0/device");
        link(Path::new("../sibling/board_id"), "devices/mlx5_0/board_id");
        link(&shadow, "devices/mlx5_0/absolute");
        link(
            Path::new("../../../../../../../../../../../../../.."),
            "devices/mlx5_0/up",
        );
        let escape = Path::new("../../../../../../../../../../../../../..").join(&shadow);
        link(&escape, "devices/mlx5_0/relative");
        link(&outside, "devices/mlx5_0/outside");
        link(Path::new("loop"), "devices/mlx5_0/loop");
        tmp
    }

    /// What an open gave: the file's content, `dir` for a directory, or the errno.
    fn opened(fd: Result<OwnedFd, Errno>) -> Result<String, Errno> {
        let fd = fd?;
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) == FileType::Directory {
            return Ok("dir".to_string());
        }
        let mut buf = [0u8; 64];
        let len = rustix::io::read(&fd, &mut buf[..])?;
        Ok(String::from_utf8_lossy(&buf[..len]).into_owned())
    }

    /// The kernel's resolution (openat2) and the walk for kernels without it agree on every
    /// path, and neither ever leaves the root.
    #[test]
    fn links_resolve_inside_the_root_with_and_without_openat2() {
        let tmp = hostile_tree();
        let root = rustix::fs::open(tmp.path().join("root"), OFlags::PATH, Mode::empty()).unwrap();
        let device = tmp.path().join("root/devices/mlx5_0");
        let device = rustix::fs::open(device, OFlags::PATH, Mode::empty()).unwrap();
        let found = |text: &str| Ok(text.to_string());
        let board_id = || found("MT_0000000223\n");
        let in_root = [
            ("class/infiniband/mlx5_0/fw_ver", found("20.31\n")),
            ("class/infiniband/mlx5_0/../sibling/board_id", board_id()),
            ("class/infiniband/mlx5_0/device/board_id", board_id()),
            ("class/infiniband/mlx5_0/board_id", board_id()),
            ("devices/mlx5_0/ports/1/state", found("4: ACTIVE\n")),
            ("devices/mlx5_0/absolute", Err(Errno::NOENT)),
            ("devices/mlx5_0/relative", Err(Errno::NOENT)),
            ("devices/mlx5_0/outside/shadow", Err(Errno::NOENT)),
            ("devices/mlx5_0/up/devices/sibling/board_id", board_id()),
            ("../../../outside/shadow", Err(Errno::NOENT)),
            ("devices/mlx5_0/loop", Err(Errno::LOOP)),
            ("devices/mlx5_0/fw_ver/x", Err(Errno::NOTDIR)),
            ("", found("dir")),
        ];
        let beneath = [
            ("ports/1/state", found("4: ACTIVE\n")),
            ("ports/1/../..", found("dir")),
            ("board_id", Err(Errno::XDEV)),
            ("absolute", Err(Errno::XDEV)),
        ];
        let cases = (in_root.map(|(path, opened)| (&root, path, Scope::InRoot, opened)))
            .into_iter()
            .chain(beneath.map(|(path, opened)| (&device, path, Scope::Beneath, opened)));
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        for (dir, path, scope, expected) in cases {
            let path = Path::new(path);
            let walked = opened(walk(dir.as_fd(), path, flags, scope));
            assert_eq!(walked, expected, "walk {path:?} {scope:?}");
            // On a kernel without openat2 `resolve` is the walk: compared above.
            let resolved = opened(resolve(dir.as_fd(), path, flags, scope));
            assert_eq!(resolved, expected, "openat2 {path:?} {scope:?}");
        }
    }

    /// `/proc/<pid>/fd/<n>` and the like lead anywhere, whatever the root: never followed.
    #[test]
    fn magic_links_are_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let file = fs::File::create(tmp.path().join("secret")).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let proc = SysDir::open(Path::new("/proc"), "").unwrap();
        let name = format!("self/fd/{fd}");
        assert!(proc.read(&name, &mut AttributeReader::default()).is_err());
        let root = rustix::fs::open("/proc", OFlags::PATH, Mode::empty()).unwrap();
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        assert!(walk(root.as_fd(), Path::new(&name), flags, Scope::InRoot).is_err());
    }
}

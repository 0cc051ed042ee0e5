//! A kernel's (major, minor) version, for the few choices that depend on it (kernfs's inode
//! numbers, which capabilities `bpf()` checks). A bottom module: `sysfs/` needs it, and
//! `kernel/` reads its files through `sysfs/`.

/// (major, minor) of a release: `6.1.0-27-amd64` is (6, 1); none when it does not start so.
pub fn major_minor(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_and_minor() {
        assert_eq!(major_minor("6.1.0-27-amd64"), Some((6, 1)));
        assert_eq!(major_minor("3.10.0-1160.el7.x86_64"), Some((3, 10)));
        assert_eq!(major_minor("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(major_minor("garbage"), None);
    }
}

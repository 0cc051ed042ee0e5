//! Kernel releases: the running one (`/proc/sys/kernel/osrelease`), which collectors put in
//! paths under `--path.rootfs` (`lib/modules/<release>/...`), the installed ones named by boot
//! images, and which of two releases is newer.

use std::cmp::Ordering;
use std::path::Path;

use crate::sysfs::SysfsError;

/// The release read from `path`, checked to be usable as one path component; a parse error
/// naming `path` when it is not.
pub fn checked_release(path: &Path, text: &str) -> Result<String, SysfsError> {
    match is_release(text) {
        true => Ok(text.to_string()),
        false => Err(SysfsError::parse(path, "not a kernel release", text)),
    }
}

/// A release such as `3.10.0-1160.el7.x86_64`: one path component, as `uname -r` prints it,
/// never `..` or a path.
pub fn is_release(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text != "."
        && text != ".."
        && text.chars().all(|c| c.is_ascii_graphic() && c != '/')
}

/// The release a kernel image in `/boot` is named for: `vmlinuz-<release>` (x86, and most
/// distributions elsewhere), `vmlinux-<release>` (ppc64le) or `Image-<release>` (SLES on
/// aarch64). Links such as Debian's `vmlinuz` and `vmlinuz.old` name none.
pub fn boot_image_release(file_name: &str) -> Option<&str> {
    ["vmlinuz-", "vmlinux-", "Image-"]
        .iter()
        .find_map(|prefix| file_name.strip_prefix(prefix))
        .filter(|release| is_release(release))
}

/// Which of two releases is newer, in rpm's version order (`rpmvercmp`), which also orders
/// Debian's and SUSE's kernel releases right: runs of digits compare as numbers, runs of
/// letters as text, a number is newer than letters, and what is left over is newer than
/// nothing. `3.10.0-1160.80.1.el7.x86_64` is newer than `3.10.0-1160.el7.x86_64`;
/// `6.1.0-30-amd64` than `6.1.0-28-amd64`.
pub fn compare_releases(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        a = trim_separators(a);
        b = trim_separators(b);
        if a.is_empty() || b.is_empty() {
            return (!a.is_empty()).cmp(&!b.is_empty());
        }
        let numeric = a[0].is_ascii_digit();
        let segment = |text: &[u8]| -> usize {
            let same_kind = |c: &u8| match numeric {
                true => c.is_ascii_digit(),
                false => c.is_ascii_alphabetic(),
            };
            text.iter().take_while(|c| same_kind(c)).count()
        };
        let (a_len, b_len) = (segment(a), segment(b));
        if b_len == 0 {
            // Segments of different kinds: the number is newer.
            return match numeric {
                true => Ordering::Greater,
                false => Ordering::Less,
            };
        }
        let (seg_a, seg_b) = (&a[..a_len], &b[..b_len]);
        let order = match numeric {
            true => {
                let (seg_a, seg_b) = (trim_zeros(seg_a), trim_zeros(seg_b));
                seg_a.len().cmp(&seg_b.len()).then(seg_a.cmp(seg_b))
            }
            false => seg_a.cmp(seg_b),
        };
        if order != Ordering::Equal {
            return order;
        }
        a = &a[a_len..];
        b = &b[b_len..];
    }
}

fn trim_separators(text: &[u8]) -> &[u8] {
    let start = text
        .iter()
        .take_while(|c| !c.is_ascii_alphanumeric())
        .count();
    &text[start..]
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let start = digits.iter().take_while(|c| **c == b'0').count();
    &digits[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_single_path_components() {
        assert!(is_release("3.10.0-1160.el7.x86_64"));
        assert!(is_release("6.18.44-fc-v669"));
        for bad in ["", ".", "..", "../../etc", "6.1 x", &"9".repeat(65)] {
            assert!(!is_release(bad), "{bad:?}");
        }
    }

    #[test]
    fn releases_order_as_rpm_orders_them() {
        use Ordering::*;
        for (older, newer) in [
            ("3.10.0-1160.el7.x86_64", "3.10.0-1160.80.1.el7.x86_64"),
            ("3.10.0-957.el7.x86_64", "3.10.0-1160.el7.x86_64"),
            ("4.18.0-513.24.1.el8_9.x86_64", "4.18.0-553.el8_10.x86_64"),
            (
                "5.14.0-362.8.1.el9_3.x86_64",
                "5.14.0-427.13.1.el9_4.x86_64",
            ),
            ("6.1.0-28-amd64", "6.1.0-30-amd64"),
            ("6.1.0-30-amd64", "6.12.12-amd64"),
            ("5.15.0-91-generic", "5.15.0-105-generic"),
            (
                "5.14.21-150500.55.39-default",
                "5.14.21-150500.55.83-default",
            ),
        ] {
            assert_eq!(compare_releases(older, newer), Less, "{older} < {newer}");
            assert_eq!(compare_releases(newer, older), Greater, "{newer} > {older}");
        }
        assert_eq!(compare_releases("6.1.0-28-amd64", "6.1.0-28-amd64"), Equal);
        assert_eq!(compare_releases("6.01", "6.1"), Equal);
    }

    #[test]
    fn boot_images_name_their_release() {
        assert_eq!(
            boot_image_release("vmlinuz-3.10.0-1160.80.1.el7.x86_64"),
            Some("3.10.0-1160.80.1.el7.x86_64")
        );
        assert_eq!(
            boot_image_release("Image-5.14.21-150500.55.39-default"),
            Some("5.14.21-150500.55.39-default")
        );
        for other in [
            "vmlinuz",
            "vmlinuz.old",
            "initrd.img-6.1.0-28-amd64",
            "config-6.1.0-28-amd64",
            "vmlinuz-",
        ] {
            assert_eq!(boot_image_release(other), None, "{other}");
        }
    }

    #[test]
    fn a_bad_release_is_an_error_naming_the_file() {
        let path = Path::new("/proc/sys/kernel/osrelease");
        assert_eq!(
            checked_release(path, "6.1.0-13-amd64").unwrap(),
            "6.1.0-13-amd64"
        );
        let err = checked_release(path, "../etc").unwrap_err();
        assert!(err.to_string().contains("osrelease"), "{err}");
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::prelude::*;
    use std::path::Component;

    const RELEASE_TOKENS: &[&str] = &["6", ".", "..", "/", "-", "amd64", "el7", " ", "\n", "\0"];

    proptest! {
        /// What is accepted names one directory below `lib/modules`, whatever the file said.
        #[test]
        fn an_accepted_release_is_one_path_component(text in text(RELEASE_TOKENS)) {
            if let Ok(release) = checked_release(Path::new("osrelease"), &text) {
                let path = Path::new("/lib/modules").join(&release);
                prop_assert_eq!(path.parent(), Some(Path::new("/lib/modules")));
                prop_assert!(matches!(path.components().next_back(), Some(Component::Normal(_))));
            }
        }

        /// An order: antisymmetric, never a panic, a release equal to itself.
        #[test]
        fn releases_are_ordered(a in text(RELEASE_TOKENS), b in text(RELEASE_TOKENS)) {
            prop_assert_eq!(compare_releases(&a, &b), compare_releases(&b, &a).reverse());
            prop_assert_eq!(compare_releases(&a, &a), Ordering::Equal);
        }

        #[test]
        fn a_printed_release_is_accepted(release in "[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,3}(-[a-z0-9._+]{1,30})?") {
            prop_assert_eq!(checked_release(Path::new("osrelease"), &release).unwrap(), release);
        }
    }
}

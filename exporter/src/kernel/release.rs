//! The running kernel's release (`/proc/sys/kernel/osrelease`), which collectors put in paths
//! under `--path.rootfs` (`lib/modules/<release>/...`).

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
fn is_release(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text != "."
        && text != ".."
        && text.chars().all(|c| c.is_ascii_graphic() && c != '/')
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

        #[test]
        fn a_printed_release_is_accepted(release in "[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,3}(-[a-z0-9._+]{1,30})?") {
            prop_assert_eq!(checked_release(Path::new("osrelease"), &release).unwrap(), release);
        }
    }
}

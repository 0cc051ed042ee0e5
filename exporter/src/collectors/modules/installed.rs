//! The kernels installed beside the running one and their build trees.

use super::*;

impl Read<'_> {
    /// Whether `<rootfs>/lib/modules/<release>/build` leads to a directory. The link is
    /// followed inside the root filesystem (an absolute target starts at `--path.rootfs`), so
    /// it is judged right when the exporter runs in a container with the host's root there.
    pub(super) fn build_dir_present(&mut self, release: &str) -> Option<u64> {
        let rootfs = self.collector.rootfs.clone();
        let build = SysDir::open(&rootfs, format!("lib/modules/{release}"))
            .and_then(|modules_dir| modules_dir.subdir("build"));
        match build {
            Err(err) if err.is_absent() => Some(0),
            opened => self.out.reported(opened).map(|_| 1),
        }
    }

    /// The kernels installed beside the running one, their headers, and how many are newer.
    /// A release counts when it has both an image and a modules directory: RHEL's rescue
    /// image (`vmlinuz-0-rescue-<machine id>`) has no modules directory, and what DKMS leaves
    /// in `/lib/modules` of a removed kernel has no image.
    pub(super) fn installed(&mut self) {
        let rootfs = self.collector.rootfs.clone();
        let Some(modules_dir) = self.dir(&rootfs, "lib/modules") else {
            return;
        };
        let Some(entries) = self.out.reported(modules_dir.entries()) else {
            return;
        };
        let boot_images: HashSet<String> = match self.dir(&rootfs, "boot") {
            Some(boot) => (self.out.reported(boot.entries()).unwrap_or_default().iter())
                .filter_map(|entry| boot_image_release(entry.name().ok()?).map(str::to_string))
                .collect(),
            None => HashSet::new(),
        };
        let mut installed = Vec::new();
        for entry in entries {
            let Some(release) = self.out.reported(entry.into_name()) else {
                continue;
            };
            if !is_release(&release) {
                continue;
            }
            let has_image = boot_images.contains(&release)
                || (modules_dir.subdir(&release).and_then(|dir| dir.entries())).is_ok_and(
                    |files| files.iter().any(|f| f.name().is_ok_and(|n| n == "vmlinuz")),
                );
            if has_image {
                installed.push(release);
            }
        }
        installed.sort_by(|a, b| compare_releases(a, b));
        for release in &installed {
            self.push(
                &KERNEL_INSTALLED,
                vec![("release", release.clone().into())],
                1,
            );
            if let Some(present) = self.build_dir_present(release) {
                let labels = vec![("release", release.clone().into())];
                self.push(&INSTALLED_BUILD_DIR, labels, present);
            }
        }
        let Some(procfs) = self.procfs() else {
            return;
        };
        if let Some(running) = self.release(&procfs) {
            let newer = (installed.iter())
                .filter(|release| compare_releases(release, &running).is_gt())
                .count();
            self.push(&NEWER_INSTALLED, Vec::new(), newer as u64);
        }
    }
}

//! The files modprobe would load for the expected modules: signed or not, and by whom.

use std::sync::Arc;

use super::*;

/// `modules.dep` is read up to this size: Debian's 6.12 lists 4000 modules in 620 KiB.
const MAX_MODULES_DEP_BYTES: usize = 8 << 20;

impl Read<'_> {
    /// For every file modprobe would load for an expected module: whether it is signed and
    /// whether the kernel holds the signer's key. An expected module missing from
    /// `modules.dep` (built in, or not installed) has no files; `expected` reports it.
    pub(super) fn module_files(&mut self) {
        let Some(procfs) = self.procfs() else {
            return;
        };
        let Some(release) = self.release(&procfs) else {
            return;
        };
        let rootfs = self.collector.rootfs.clone();
        let Some(modules_dir) = self.dir(&rootfs, &format!("lib/modules/{release}")) else {
            return;
        };
        let Some(files) = self.files_to_load(&modules_dir, release) else {
            return;
        };
        let files = files.to_vec();
        if files.is_empty() {
            return;
        }
        // Without /proc/keys (CONFIG_KEYS off) no key is known: every signer is unknown.
        let keys = procfs.read_text_file("keys", MAX_LIST_BYTES);
        let keys = self
            .out
            .optional(keys)
            .map_or_else(Keys::unknown, |text| keys::parse_proc_keys(&text));
        let signatures = self.collector.signatures.read(&modules_dir, &files);
        let decoded = self.collector.signatures.decoded_bytes();
        self.push(&MODULE_FILE_DECODED_BYTES, Vec::new(), decoded);
        for (file, signature) in files.into_iter().zip(signatures) {
            let signature = match signature {
                Ok(signature) => signature,
                Err(err) => {
                    self.out.errors.push(err.into());
                    continue;
                }
            };
            let module = module_file::Compression::of(&file).map(|(_, name)| name);
            let path = modules_dir.path(&file);
            let mut labels = vec![
                ("module", module.unwrap_or_default().into()),
                ("file", file.into()),
            ];
            let (trust, signer) = match &signature {
                Signature::Unsigned => {
                    self.push(&MODULE_FILE_SIGNED, labels, 0);
                    continue;
                }
                Signature::Signed(signers) => {
                    let first = signers.first().map(ToString::to_string);
                    (keys.trust(signers), first.unwrap_or_default())
                }
                Signature::Malformed(reason) => {
                    self.error(SysfsError::invalid(&path, reason));
                    (Trust::Unknown, String::new())
                }
            };
            self.push(&MODULE_FILE_SIGNED, labels.clone(), 1);
            labels.extend([("signer", signer.into()), ("state", trust.label().into())]);
            self.push(&MODULE_FILE_SIGNER_TRUST, labels, 1);
        }
    }

    /// The files modprobe would load for the expected modules, from `modules.dep` (Debian's
    /// is 620 KiB): read again only when its stamp changed, as `depmod` rewrites it.
    fn files_to_load(&mut self, modules_dir: &SysDir, release: String) -> Option<Arc<Vec<String>>> {
        let stamp = modules_dir.stamp("modules.dep");
        let key = (release, self.out.optional(stamp)?);
        let kept = &self.collector.files_to_load;
        if let Some(files) = kept.get(&key) {
            return Some(files);
        }
        let modules_dep = modules_dir.read_text_file("modules.dep", MAX_MODULES_DEP_BYTES);
        let modules_dep = self.out.optional(modules_dep)?;
        let mut files: Vec<String> = Vec::new();
        for module in &self.collector.expected {
            for file in module_file::files_to_load(&modules_dep, module).unwrap_or_default() {
                if !files.contains(&file) {
                    files.push(file);
                }
            }
        }
        Some(kept.keep(key, files))
    }
}

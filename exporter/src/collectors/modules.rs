//! Kernel-state collector: kernel taint, loaded modules, expected modules and what keeps them
//! from loading, module signature enforcement, lockdown, Secure Boot, and the kernel build tree.
//!
//! No eBPF: plain files that every kernel since RHEL 7's 3.10 has (`/proc/modules`,
//! `/proc/sys/kernel/tainted`, `/sys/module`), read fresh at every scrape. A kernel built without
//! module support has no `/proc/modules`; that is reported as `hpcnode_kernel_modules_supported 0`,
//! not as an error.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Settings, StartError, Started,
};
use crate::flags::{flag, ConfigError, Flags};
use crate::kernel::cmdline;
use crate::kernel::keys::{self, Keys, Trust};
use crate::kernel::modprobe::{self, glob_match, Action};
use crate::kernel::module_file::{self, Signature, SignatureCache};
use crate::kernel::release::{boot_image_release, checked_release, compare_releases, is_release};
use crate::kernel::taint;
use crate::metrics::{Desc, Labels, Value};
use crate::sysfs::{AttributeReader, SysDir, SysfsError};

pub const REGISTRATION: Registration = Registration {
    name: "modules",
    enabled_by_default: true,
    help: "Kernel taint, loaded and expected modules, modprobe.d rules, module signature enforcement, lockdown and Secure Boot",
    metrics: &METRICS,
    flags: || {
        vec![
            flag(EXPECTED, "", "Comma-separated kernel modules that must be loaded or built in, e.g. mlx5_core,mlx5_ib,ib_uverbs ('-' and '_' are the same)."),
            flag(MAX_MODULES, "2048", "Loaded modules exported one series each; the rest are counted in one module=\"other\" series."),
        ]
    },
    configure: |flags| Ok(Box::new(ModulesSettings::from_flags(flags)?)),
    probe: None,
};

const EXPECTED: &str = "collector.modules.expected";
const MAX_MODULES: &str = "collector.modules.max-modules";

#[derive(Debug)]
struct ModulesSettings {
    /// Modules that must be loaded (or built in), in the kernel's spelling: `-` becomes `_`.
    expected: Vec<String>,
    /// `hpcnode_module_info` series per scrape; the rest fold into one `other` series.
    max_modules: usize,
}

impl ModulesSettings {
    fn from_flags(flags: &Flags) -> Result<ModulesSettings, ConfigError> {
        let expected = flags.value(EXPECTED).unwrap_or_default();
        Ok(ModulesSettings {
            expected: parse_module_list(&expected)
                .map_err(|reason| flags.invalid(EXPECTED, &expected, reason))?,
            max_modules: flags.number(MAX_MODULES, 1, 65536)?.unwrap_or(2048) as usize,
        })
    }
}

impl Settings for ModulesSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        Ok(Started::new(ModulesCollector {
            procfs: host.procfs.clone(),
            sysfs: host.sysfs.clone(),
            rootfs: host.rootfs.clone(),
            expected: self.expected,
            max_modules: self.max_modules,
            signatures: SignatureCache::default(),
        }))
    }
}

/// `mlx5_core,ib-uverbs` -> `["mlx5_core", "ib_uverbs"]`: the kernel treats `-` and `_` in
/// module names alike and reports `_`; duplicates after that are dropped.
pub(crate) fn parse_module_list(value: &str) -> Result<Vec<String>, String> {
    let mut modules: Vec<String> = Vec::new();
    if value.is_empty() {
        return Ok(modules);
    }
    for name in value.split(',').map(str::trim) {
        let invalid = |reason| format!("module {name:?}: {reason}");
        if name.is_empty() {
            return Err(invalid("empty name"));
        }
        // The kernel's MODULE_NAME_LEN is 64 bytes less a pointer: 55 characters and the NUL.
        if name.len() > 55 {
            return Err(invalid("longer than the kernel's 55 characters"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid("only letters, digits, '_' and '-' are allowed"));
        }
        let name = name.replace('-', "_");
        if !modules.contains(&name) {
            modules.push(name);
        }
    }
    Ok(modules)
}

struct ModulesCollector {
    procfs: PathBuf,
    sysfs: PathBuf,
    rootfs: PathBuf,
    expected: Vec<String>,
    max_modules: usize,
    signatures: SignatureCache,
}

const TAINTED: Desc = Desc::gauge(
    "hpcnode_kernel_tainted",
    "1 when the kernel taint flag is set (/proc/sys/kernel/tainted), one series per flag the exporter knows.",
    None,
);
const TAINT_MASK: Desc = Desc::gauge(
    "hpcnode_kernel_taint_mask",
    "The raw kernel taint value (/proc/sys/kernel/tainted), bits the exporter does not name included.",
    None,
);
const MODULE_INFO: Desc = Desc::gauge(
    "hpcnode_module_info",
    "A loaded module with its state and taint letters (/proc/modules); module=\"other\" counts the modules beyond --collector.modules.max-modules.",
    None,
);
const EXPECTED_LOADED: Desc = Desc::gauge(
    "hpcnode_module_expected_loaded",
    "1 when a module of --collector.modules.expected is loaded and Live, or built into the kernel.",
    None,
);
const EXPECTED_BUILTIN: Desc = Desc::gauge(
    "hpcnode_module_expected_builtin",
    "1 when a module of --collector.modules.expected is built into the kernel (modules.builtin, or /sys/module without initstate).",
    None,
);
const MODPROBE_RULE: Desc = Desc::gauge(
    "hpcnode_module_modprobe_rule",
    "A modprobe.d blacklist or install rule, or a kernel command line blacklist, that affects an expected module.",
    None,
);
const SIG_ENFORCE: Desc = Desc::gauge(
    "hpcnode_module_sig_enforce",
    "1 when the kernel refuses modules without a valid signature (module.sig_enforce).",
    None,
);
const LOCKDOWN_MODE: Desc = Desc::gauge(
    "hpcnode_kernel_lockdown_mode",
    "Kernel lockdown mode (/sys/kernel/security/lockdown): 1 for the active mode, 0 for the others.",
    None,
);
const SECURE_BOOT: Desc = Desc::gauge(
    "hpcnode_secure_boot_enabled",
    "1 when the firmware booted with UEFI Secure Boot on (the SecureBoot EFI variable).",
    None,
);
const BUILD_DIR: Desc = Desc::gauge(
    "hpcnode_kernel_build_dir_present",
    "1 when /lib/modules/<release>/build leads to a directory (kernel headers for building out-of-tree modules).",
    None,
);
const KERNEL_INSTALLED: Desc = Desc::gauge(
    "hpcnode_kernel_installed",
    "1 for each kernel installed on the root filesystem: an image (/boot/vmlinuz-<release>, vmlinux-, Image-, or /lib/modules/<release>/vmlinuz) and its /lib/modules/<release> directory.",
    None,
);
const INSTALLED_BUILD_DIR: Desc = Desc::gauge(
    "hpcnode_kernel_installed_build_dir_present",
    "1 when /lib/modules/<release>/build of an installed kernel leads to a directory (its headers, for DKMS and other out-of-tree builds).",
    None,
);
const NEWER_INSTALLED: Desc = Desc::gauge(
    "hpcnode_kernel_newer_installed",
    "Installed kernels newer than the running one (rpm's version order): above 0, a reboot is pending and out-of-tree modules built now may target another release.",
    None,
);
const MODULE_FILE_SIGNED: Desc = Desc::gauge(
    "hpcnode_module_file_signed",
    "1 when a module file modprobe would load for an expected module (modules.dep: the module and its dependencies) ends with an appended signature (~Module signature appended~), decompressed first for .ko.xz, .ko.zst and .ko.gz.",
    None,
);
const MODULE_FILE_SIGNER_TRUST: Desc = Desc::gauge(
    "hpcnode_module_file_signer_trust",
    "Whether the kernel holds the key that signed a module file, as far as /proc/keys shows: state trusted, issuer_name_match, unknown or untrusted (1 for the state that holds).",
    None,
);
const MODULES_SUPPORTED: Desc = Desc::gauge(
    "hpcnode_kernel_modules_supported",
    "1 when the kernel supports loadable modules (/proc/modules exists).",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 16] = [
    TAINTED,
    TAINT_MASK,
    MODULE_INFO,
    EXPECTED_LOADED,
    EXPECTED_BUILTIN,
    MODPROBE_RULE,
    SIG_ENFORCE,
    LOCKDOWN_MODE,
    SECURE_BOOT,
    BUILD_DIR,
    KERNEL_INSTALLED,
    INSTALLED_BUILD_DIR,
    NEWER_INSTALLED,
    MODULES_SUPPORTED,
    MODULE_FILE_SIGNED,
    MODULE_FILE_SIGNER_TRUST,
];

/// Files longer than a page read whole (`/proc/modules`, `modules.builtin`) stop here: 1 MiB holds several thousand modules.
const MAX_LIST_BYTES: usize = 1 << 20;

/// `modules.dep` is read up to this size: Debian's 6.12 lists 4000 modules in 620 KiB.
const MAX_MODULES_DEP_BYTES: usize = 8 << 20;

const SECURE_BOOT_VARIABLE: &str = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// The collector's units: each a separate read, so that a hung EFI variable read (it calls
/// into the firmware's runtime services) hides only the Secure Boot state.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Kernel,
    Installed,
    Expected,
    /// The files of the expected modules and their signatures: many MiB decoded, a unit of
    /// its own so it delays nothing else.
    ModuleFiles,
    Signing,
    SecureBoot,
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Kernel => "kernel",
            Unit::Installed => "installed",
            Unit::Expected => "expected",
            Unit::ModuleFiles => "module_files",
            Unit::Signing => "signing",
            Unit::SecureBoot => "secure_boot",
        })
    }
}

impl Collector for ModulesCollector {
    type Unit = Unit;

    fn units(&self) -> Result<Vec<Unit>, CollectError> {
        let mut units = vec![Unit::Kernel, Unit::Installed];
        if !self.expected.is_empty() {
            units.extend([Unit::Expected, Unit::ModuleFiles]);
        }
        units.extend([Unit::Signing, Unit::SecureBoot]);
        Ok(units)
    }

    fn collect_unit(&self, unit: &Unit, out: &mut Output) {
        let mut read = Read {
            collector: self,
            reader: AttributeReader::default(),
            out,
        };
        match unit {
            Unit::Kernel => read.kernel(),
            Unit::Installed => read.installed(),
            Unit::Expected => read.expected(),
            Unit::ModuleFiles => read.module_files(),
            Unit::Signing => read.signing(),
            Unit::SecureBoot => read.secure_boot(),
        }
    }
}

/// What `/proc/modules` says.
enum Modules {
    /// No `/proc/modules`: a kernel built without loadable module support.
    Unsupported,
    /// The loaded modules, newest first.
    Listed(Vec<LoadedModule>),
}

impl Modules {
    fn list(&self) -> &[LoadedModule] {
        match self {
            Modules::Unsupported => &[],
            Modules::Listed(modules) => modules,
        }
    }
}

/// A loaded module as `/proc/modules` lists it.
#[derive(Debug)]
pub(crate) struct LoadedModule {
    name: String,
    state: &'static str,
    /// The taint letters between the parentheses, without the `+`/`-` loading marks.
    taints: String,
}

/// One unit's read: the read buffer and where samples and errors go.
struct Read<'a> {
    collector: &'a ModulesCollector,
    reader: AttributeReader,
    out: &'a mut Output,
}

impl Read<'_> {
    fn push(&mut self, desc: &Desc, labels: Labels, value: u64) {
        self.out.samples.push(desc, labels, Value::Int(value));
    }

    fn error(&mut self, err: SysfsError) {
        self.out.errors.push(err.into());
    }

    /// A directory under a root; `None` when it does not exist, or is broken (then reported).
    fn dir(&mut self, root: &Path, name: &str) -> Option<SysDir> {
        self.out.optional(SysDir::open(root, name))
    }

    fn procfs(&mut self) -> Option<SysDir> {
        self.out.reported(SysDir::open(&self.collector.procfs, ""))
    }

    /// What `/proc/modules` says; `None` when it cannot be read (reported).
    fn loaded_modules(&mut self, procfs: &SysDir) -> Option<Modules> {
        let text = match procfs.read_text_file("modules", MAX_LIST_BYTES) {
            Err(err) if err.is_absent() => return Some(Modules::Unsupported),
            read => self.out.reported(read)?,
        };
        let (modules, errors) = parse_modules(&procfs.path("modules"), &text);
        for err in errors {
            self.error(err);
        }
        Some(Modules::Listed(modules))
    }

    /// The running kernel's release, checked to be usable as a path component.
    fn release(&mut self, procfs: &SysDir) -> Option<String> {
        let path = procfs.path("sys/kernel/osrelease");
        let release = procfs
            .read("sys/kernel/osrelease", &mut self.reader)
            .and_then(|text| checked_release(&path, text));
        self.out.reported(release)
    }

    fn kernel(&mut self) {
        let Some(procfs) = self.procfs() else {
            return;
        };
        let tainted = procfs.read_u64("sys/kernel/tainted", &mut self.reader);
        if let Some(mask) = self.out.reported(tainted) {
            for (bit, flag) in taint::FLAGS.iter().enumerate() {
                let labels = vec![("flag", flag.name.into()), ("letter", flag.letter.into())];
                self.push(&TAINTED, labels, (mask >> bit) & 1);
            }
            self.push(&TAINT_MASK, Vec::new(), mask);
        }

        if let Some(release) = self.release(&procfs) {
            if let Some(present) = self.build_dir_present(&release) {
                self.push(&BUILD_DIR, vec![("release", release.into())], present);
            }
        }

        let Some(modules) = self.loaded_modules(&procfs) else {
            return;
        };
        let supported = matches!(modules, Modules::Listed(_));
        self.push(&MODULES_SUPPORTED, Vec::new(), u64::from(supported));
        let modules = modules.list();
        let max = self.collector.max_modules;
        for module in modules.iter().take(max) {
            let labels = vec![
                ("module", module.name.clone().into()),
                ("state", module.state.into()),
                ("taints", module.taints.clone().into()),
            ];
            self.push(&MODULE_INFO, labels, 1);
        }
        // /proc/modules lists the newest first: the modules loaded last keep their own series.
        if modules.len() > max {
            let folded = &modules[max..];
            let taints: BTreeSet<char> = folded.iter().flat_map(|m| m.taints.chars()).collect();
            let labels = vec![
                ("module", "other".into()),
                ("state", "".into()),
                ("taints", taints.into_iter().collect::<String>().into()),
            ];
            self.push(&MODULE_INFO, labels, folded.len() as u64);
        }
    }

    /// Whether `<rootfs>/lib/modules/<release>/build` leads to a directory. The link is
    /// followed inside the root filesystem (an absolute target starts at `--path.rootfs`), so
    /// it is judged right when the exporter runs in a container with the host's root there.
    fn build_dir_present(&mut self, release: &str) -> Option<u64> {
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
    fn installed(&mut self) {
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

    fn expected(&mut self) {
        let Some(procfs) = self.procfs() else {
            return;
        };
        let Some(modules) = self.loaded_modules(&procfs) else {
            return;
        };
        let modules = modules.list();
        let live: HashSet<&str> = modules
            .iter()
            .filter(|m| m.state == "Live")
            .map(|m| m.name.as_str())
            .collect();
        let listed: HashSet<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        let builtin_index = self.builtin_index(&procfs);
        let sysfs = self.collector.sysfs.clone();
        let sys_module = self.dir(&sysfs, "module");
        let expected = self.collector.expected.clone();

        for module in &expected {
            let builtin = !listed.contains(module.as_str())
                && (builtin_index.contains(module)
                    || sys_module
                        .as_ref()
                        .is_some_and(|dir| self.is_builtin_in_sysfs(dir, module)));
            let loaded = builtin || live.contains(module.as_str());
            let labels = vec![("module", module.clone().into())];
            self.push(&EXPECTED_LOADED, labels.clone(), u64::from(loaded));
            self.push(&EXPECTED_BUILTIN, labels, u64::from(builtin));
        }

        let mut rules = self.modprobe_rules(&expected);
        rules.extend(self.cmdline_rules(&procfs, &expected));
        for rule in rules {
            let labels = vec![
                ("module", rule.module.into()),
                ("rule", rule.rule.into()),
                ("file", rule.file.into()),
            ];
            self.push(&MODPROBE_RULE, labels, 1);
        }
    }

    /// Module names in `<rootfs>/lib/modules/<release>/modules.builtin`; empty when absent.
    fn builtin_index(&mut self, procfs: &SysDir) -> HashSet<String> {
        let Some(release) = self.release(procfs) else {
            return HashSet::new();
        };
        let rootfs = self.collector.rootfs.clone();
        let Some(dir) = self.dir(&rootfs, &format!("lib/modules/{release}")) else {
            return HashSet::new();
        };
        let index = dir.read_text_file("modules.builtin", MAX_LIST_BYTES);
        self.out
            .optional(index)
            .map(|text| parse_builtin_index(&text))
            .unwrap_or_default()
    }

    /// A module in `/sys/module` without `initstate` is built in: only loadable modules have
    /// one, and built-in modules appear there when they have parameters or a version.
    fn is_builtin_in_sysfs(&mut self, sys_module: &SysDir, module: &str) -> bool {
        let Some(dir) = self.out.optional(sys_module.subdir(module)) else {
            return false;
        };
        match dir.read("initstate", &mut self.reader).map(|_| ()) {
            Err(err) if err.is_absent() => true,
            initstate => {
                self.out.reported(initstate);
                false
            }
        }
    }

    /// The rules of the effective modprobe.d files that name an expected module.
    fn modprobe_rules(&mut self, expected: &[String]) -> BTreeSet<ModprobeRule> {
        let mut errors = Vec::new();
        let files = modprobe::read_config(&self.collector.rootfs, &mut errors);
        for err in errors {
            self.error(err);
        }
        let mut rules = BTreeSet::new();
        for file in files {
            for rule in file.rules {
                let kind = match &rule.action {
                    Action::Blacklist => "blacklist",
                    install if install.disables() => "install_disabled",
                    Action::Install(_) => "install",
                };
                // kmod compares blacklist entries by name and install patterns by fnmatch.
                let names = |module: &&String| match rule.action {
                    Action::Blacklist => **module == rule.module,
                    Action::Install(_) => glob_match(rule.module.as_bytes(), module.as_bytes()),
                };
                for module in expected.iter().filter(names) {
                    rules.insert(ModprobeRule {
                        module: module.clone(),
                        rule: kind,
                        file: file.path.clone(),
                    });
                }
            }
        }
        rules
    }

    /// `modprobe.blacklist=` (kmod honours it) and `module_blacklist=` (the kernel refuses the
    /// load itself) on the kernel command line.
    fn cmdline_rules(&mut self, procfs: &SysDir, expected: &[String]) -> Vec<ModprobeRule> {
        let Some(text) = self.out.reported(procfs.read("cmdline", &mut self.reader)) else {
            return Vec::new();
        };
        parse_cmdline_blacklists(text)
            .into_iter()
            .filter(|(module, _)| expected.contains(module))
            .map(|(module, rule)| ModprobeRule {
                module,
                rule,
                file: "/proc/cmdline".to_string(),
            })
            .collect()
    }

    /// For every file modprobe would load for an expected module: whether it is signed and
    /// whether the kernel holds the signer's key. An expected module missing from
    /// `modules.dep` (built in, or not installed) has no files; `expected` reports it.
    fn module_files(&mut self) {
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
        let modules_dep = modules_dir.read_text_file("modules.dep", MAX_MODULES_DEP_BYTES);
        let Some(modules_dep) = self.out.optional(modules_dep) else {
            return;
        };
        let mut files: Vec<String> = Vec::new();
        for module in &self.collector.expected {
            for file in module_file::files_to_load(&modules_dep, module).unwrap_or_default() {
                if !files.contains(&file) {
                    files.push(file);
                }
            }
        }
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
        for (file, signature) in files.into_iter().zip(signatures) {
            let Some(signature) = self.out.reported(signature) else {
                continue;
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
                    self.error(SysfsError::parse(&path, reason, ""));
                    (Trust::Unknown, String::new())
                }
            };
            self.push(&MODULE_FILE_SIGNED, labels.clone(), 1);
            labels.extend([("signer", signer.into()), ("state", trust.label().into())]);
            self.push(&MODULE_FILE_SIGNER_TRUST, labels, 1);
        }
    }

    fn signing(&mut self) {
        let sysfs = self.collector.sysfs.clone();
        // Kernels without CONFIG_MODULE_SIG have no such parameter: no series, not an error.
        if let Some(params) = self.dir(&sysfs, "module/module/parameters") {
            let path = params.path("sig_enforce");
            let enforce =
                params
                    .read("sig_enforce", &mut self.reader)
                    .and_then(|text| match text {
                        "Y" => Ok(1),
                        "N" => Ok(0),
                        _ => Err(SysfsError::parse(&path, "expected Y or N", text)),
                    });
            if let Some(enforce) = self.out.optional(enforce) {
                self.push(&SIG_ENFORCE, Vec::new(), enforce);
            }
        }

        // Absent before Linux 5.4 or with securityfs unmounted: no series, not an error.
        if let Some(security) = self.dir(&sysfs, "kernel/security") {
            let path = security.path("lockdown");
            let modes = security
                .read("lockdown", &mut self.reader)
                .and_then(|text| {
                    let reason = "expected modes with one in [brackets]";
                    parse_lockdown(text).ok_or_else(|| SysfsError::parse(&path, reason, text))
                });
            for (mode, active) in self.out.optional(modes).unwrap_or_default() {
                let labels = vec![("mode", mode.into())];
                self.push(&LOCKDOWN_MODE, labels, u64::from(active));
            }
        }
    }

    fn secure_boot(&mut self) {
        let sysfs = self.collector.sysfs.clone();
        if let Some(enabled) = self.secure_boot_enabled(&sysfs) {
            self.push(&SECURE_BOOT, Vec::new(), enabled);
        }
    }

    /// Secure Boot from the EFI variable: 4 attribute bytes, then 1 data byte (1 = on). No EFI
    /// (BIOS boot), or efivarfs not mounted: unknown, no series. EFI without the variable:
    /// firmware without Secure Boot, so off.
    fn secure_boot_enabled(&mut self, sysfs: &Path) -> Option<u64> {
        let efi = self.dir(sysfs, "firmware/efi")?;
        let efivars = self.out.optional(efi.subdir("efivars"))?;
        let path = efivars.path(SECURE_BOOT_VARIABLE);
        let enabled = efivars
            .read_bytes(SECURE_BOOT_VARIABLE, &mut self.reader)
            .and_then(|bytes| match bytes {
                [_, _, _, _, data @ (0 | 1)] => Ok(u64::from(*data)),
                _ => Err(SysfsError::parse(
                    &path,
                    "expected 4 attribute bytes and a 0 or 1",
                    &format!("{bytes:02x?}"),
                )),
            });
        match enabled {
            // An empty efivars directory is an unmounted efivarfs, not a firmware fact.
            Err(err) if err.is_absent() => {
                let entries = self.out.reported(efivars.entries())?;
                for entry in &entries {
                    if let Err(err) = entry.name() {
                        self.error(err);
                    }
                }
                (!entries.is_empty()).then_some(0)
            }
            enabled => self.out.reported(enabled),
        }
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ModprobeRule {
    module: String,
    rule: &'static str,
    /// Where the rule is, as a path on the node (`/etc/modprobe.d/mlx5.conf`, `/proc/cmdline`).
    file: String,
}

/// Parses `/proc/modules`: `name size refcount deps state address [(taints)]`, one module a
/// line. A malformed or repeated line is an error of its own and the others are kept.
pub(crate) fn parse_modules(path: &Path, text: &str) -> (Vec<LoadedModule>, Vec<SysfsError>) {
    let mut modules = Vec::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        match parse_module_line(line) {
            Some(module) if seen.insert(module.name.clone()) => modules.push(module),
            Some(_) => errors.push(SysfsError::parse(path, "module listed twice", line)),
            None => errors.push(SysfsError::parse(
                path,
                "expected 'name size refcount deps state address [(taints)]'",
                line,
            )),
        }
    }
    (modules, errors)
}

fn parse_module_line(line: &str) -> Option<LoadedModule> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (name, size, state) = (fields.first()?, fields.get(1)?, fields.get(4)?);
    size.parse::<u64>().ok()?;
    let state = ["Live", "Loading", "Unloading"]
        .into_iter()
        .find(|known| known == state)?;
    let taints = match fields.get(6) {
        None => String::new(),
        Some(flags) => {
            let inner = flags.strip_prefix('(')?.strip_suffix(')')?;
            // `+` and `-` mark a module coming or going, not a taint.
            if !inner
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '+' || c == '-')
            {
                return None;
            }
            inner.chars().filter(char::is_ascii_uppercase).collect()
        }
    };
    if fields.len() > 7 {
        return None;
    }
    Some(LoadedModule {
        name: name.to_string(),
        state,
        taints,
    })
}

/// `kernel/drivers/vfio/pci/vfio-pci.ko` -> `vfio_pci`, the name the kernel uses.
pub(crate) fn parse_builtin_index(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|line| line.trim().rsplit('/').next())
        .filter_map(|file| file.strip_suffix(".ko"))
        .map(modprobe::module_key)
        .collect()
}

/// The modules in `modprobe.blacklist=a,b` and `module_blacklist=a,b` on the kernel command
/// line, with the rule that names them.
pub(crate) fn parse_cmdline_blacklists(text: &str) -> Vec<(String, &'static str)> {
    let mut rules = Vec::new();
    for parameter in cmdline::parameters(text) {
        let rule = if parameter.is("modprobe.blacklist") {
            "blacklist"
        } else if parameter.is("module_blacklist") {
            "module_blacklist"
        } else {
            continue;
        };
        let list = parameter.value.unwrap_or_default();
        for module in list.split(',').filter(|m| !m.is_empty()) {
            rules.push((modprobe::module_key(module), rule));
        }
    }
    rules
}

/// `none [integrity] confidentiality` -> each mode and whether it is the active one; `None`
/// unless exactly one mode is in brackets.
pub(crate) fn parse_lockdown(text: &str) -> Option<Vec<(String, bool)>> {
    let modes: Vec<(String, bool)> = text
        .split_whitespace()
        .map(
            |word| match word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                Some(active) => (active.to_string(), true),
                None => (word.to_string(), false),
            },
        )
        .collect();
    let valid = modes.iter().filter(|(_, active)| *active).count() == 1
        && modes
            .iter()
            .all(|(mode, _)| !mode.is_empty() && mode.chars().all(|c| c.is_ascii_lowercase()));
    valid.then_some(modes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Result<ModulesSettings, ConfigError> {
        ModulesSettings::from_flags(&Flags::parse((REGISTRATION.flags)(), args)?)
    }

    /// An install pattern names every expected module it matches, as kmod's fnmatch does; a
    /// blacklist entry only the module of that exact name.
    #[test]
    fn install_patterns_match_as_kmod_matches_them() {
        let root = tempfile::tempdir().unwrap();
        let conf = root.path().join("etc/modprobe.d/ofed.conf");
        std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
        std::fs::write(&conf, "install mlx[4-5]-ib /bin/false\nblacklist mlx5*\n").unwrap();
        let collector = ModulesCollector {
            procfs: root.path().join("proc"),
            sysfs: root.path().join("sys"),
            rootfs: root.path().to_path_buf(),
            expected: vec!["mlx5_ib".into(), "mlx5_core".into(), "mlx4_ib".into()],
            max_modules: 10,
            signatures: SignatureCache::default(),
        };
        let mut out = Output::default();
        let mut read = Read {
            collector: &collector,
            reader: AttributeReader::default(),
            out: &mut out,
        };
        let rules: Vec<(String, &str)> = (read.modprobe_rules(&collector.expected).into_iter())
            .map(|rule| (rule.module, rule.rule))
            .collect();
        assert_eq!(
            rules,
            [
                ("mlx4_ib".to_string(), "install_disabled"),
                ("mlx5_ib".to_string(), "install_disabled")
            ]
        );
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
        let collector = ModulesCollector {
            procfs: root.path().join("proc"),
            sysfs: root.path().join("sys"),
            rootfs: root.path().to_path_buf(),
            expected: Vec::new(),
            max_modules: 10,
            signatures: SignatureCache::default(),
        };
        let mut out = Output::default();
        collector.collect_unit(&Unit::Installed, &mut out);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let families = out.samples.families();
        let samples = |desc: &Desc| -> Vec<String> {
            let family = families.iter().find(|f| f.desc.name == desc.name).unwrap();
            (family.samples.iter())
                .map(|(labels, value)| format!("{labels:?} {value:?}"))
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
        assert_eq!(samples(&NEWER_INSTALLED), ["[] Int(1)"]);
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
        let cmdline = "BOOT_IMAGE=/vmlinuz ro modprobe.blacklist=nouveau,mlx5-ib module_blacklist=nvidia quiet";
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
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::{text, MODULE_NAME};
    use proptest::collection::{btree_set, vec};
    use proptest::prelude::*;

    const LIST_TOKENS: &[&str] = &[
        " ",
        "\n",
        "mlx5_ib",
        "393216",
        "0",
        "-",
        ",",
        "Live",
        "Loading",
        "Unloading",
        "0x0",
        "(OE)",
        "(",
        ")",
        "+",
        "[",
        "]",
        "none",
        "integrity",
        ".ko",
        "/",
        "kernel/",
        "module_blacklist=",
        "modprobe.blacklist=",
        "\"",
    ];

    /// A `/proc/modules` line (`m_show` in kernel/module) for module `name`: the line, its
    /// state and its taint letters.
    fn module_line(name: String) -> impl Strategy<Value = (String, &'static str, String)> {
        (
            any::<u64>(),
            prop::option::of(0u32..100),
            "-|([a-z_]{1,8},){1,3}",
            prop::sample::select(&["Live", "Loading", "Unloading"][..]),
            any::<u64>(),
            prop::option::of("[A-Z+-]{1,6}"),
        )
            .prop_map(move |(size, refcount, deps, state, address, taints)| {
                let refcount = refcount.map_or("-".to_string(), |n| n.to_string());
                let mut line = format!("{name} {size} {refcount} {deps} {state} 0x{address:016x}");
                if let Some(taints) = &taints {
                    line.push_str(&format!(" ({taints})"));
                }
                let letters = taints.unwrap_or_default().replace(['+', '-'], "");
                (line, state, letters)
            })
    }

    fn proc_modules() -> impl Strategy<Value = Vec<(String, (String, &'static str, String))>> {
        btree_set(MODULE_NAME, 0..20).prop_flat_map(|names| {
            names
                .into_iter()
                .map(|name| (Just(name.clone()), module_line(name)))
                .collect::<Vec<_>>()
        })
    }

    proptest! {
        #[test]
        fn any_proc_modules_gives_a_module_or_an_error_per_line(text in text(LIST_TOKENS)) {
            let (modules, errors) = parse_modules(Path::new("modules"), &text);
            let lines = text.lines().filter(|line| !line.trim().is_empty()).count();
            prop_assert_eq!(modules.len() + errors.len(), lines);
            let names: HashSet<&str> = modules.iter().map(|m| m.name.as_str()).collect();
            prop_assert_eq!(names.len(), modules.len());
            for module in &modules {
                prop_assert!(module.taints.chars().all(|c| c.is_ascii_uppercase()));
            }
        }

        #[test]
        fn a_builtin_index_names_its_modules(names in vec(MODULE_NAME, 0..10), dashes: bool) {
            let index = names
                .iter()
                .map(|name| {
                    let file = if dashes { name.replace('_', "-") } else { name.clone() };
                    format!("kernel/drivers/misc/{file}.ko\n")
                })
                .collect::<String>();
            let parsed = parse_builtin_index(&index);
            prop_assert_eq!(parsed, names.into_iter().collect::<HashSet<_>>());
        }

        #[test]
        fn lockdown_modes_read_back(modes in btree_set("[a-z]{1,16}", 1..5), active in any::<prop::sample::Index>()) {
            let modes: Vec<String> = modes.into_iter().collect();
            let active = active.index(modes.len());
            let text = modes
                .iter()
                .enumerate()
                .map(|(i, mode)| if i == active { format!("[{mode}]") } else { mode.clone() })
                .collect::<Vec<_>>()
                .join(" ");
            let expected: Vec<(String, bool)> = modes
                .into_iter()
                .enumerate()
                .map(|(i, mode)| (mode, i == active))
                .collect();
            prop_assert_eq!(parse_lockdown(&text), Some(expected));
        }

        #[test]
        fn an_expected_module_list_reads_back_in_the_kernels_spelling(names in vec("[a-z][a-z0-9_-]{0,54}", 1..8)) {
            let mut expected: Vec<String> = Vec::new();
            for name in &names {
                let name = name.replace('-', "_");
                if !expected.contains(&name) {
                    expected.push(name);
                }
            }
            prop_assert_eq!(parse_module_list(&names.join(", ")), Ok(expected));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn written_proc_modules_read_back(modules in proc_modules(), twice in any::<prop::sample::Index>()) {
            let mut text: String = modules.iter().map(|(_, (line, _, _))| format!("{line}\n")).collect();
            let (read, errors) = parse_modules(Path::new("modules"), &text);
            prop_assert!(errors.is_empty(), "{errors:?}");
            let read: Vec<_> = read.into_iter().map(|m| (m.name, m.state, m.taints)).collect();
            let expected: Vec<_> = modules
                .iter()
                .map(|(name, (_, state, taints))| (name.clone(), *state, taints.clone()))
                .collect();
            prop_assert_eq!(read, expected);
            // A module listed twice is an error; the first listing stays.
            if !modules.is_empty() {
                text.push_str(&modules[twice.index(modules.len())].1 .0);
                let (read, errors) = parse_modules(Path::new("modules"), &text);
                prop_assert_eq!((read.len(), errors.len()), (modules.len(), 1));
            }
        }

        #[test]
        fn other_kernel_lists_never_panic(text in text(LIST_TOKENS)) {
            for module in parse_builtin_index(&text) {
                prop_assert!(!module.contains('-'));
            }
            for (module, _) in parse_cmdline_blacklists(&text) {
                prop_assert!(!module.is_empty() && !module.contains('-'));
            }
            if let Some(modes) = parse_lockdown(&text) {
                prop_assert_eq!(modes.iter().filter(|(_, active)| *active).count(), 1);
            }
            if let Ok(modules) = parse_module_list(&text) {
                prop_assert!(modules.iter().all(|m| !m.is_empty() && !m.contains('-')));
            }
        }
    }
}

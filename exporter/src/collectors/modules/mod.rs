//! Kernel-state collector: kernel taint, loaded modules, expected modules and what keeps them
//! from loading, module signature enforcement, lockdown, Secure Boot, and the kernel build tree.
//!
//! No eBPF: plain files that every kernel since RHEL 7's 3.10 has (`/proc/modules`,
//! `/proc/sys/kernel/tainted`, `/sys/module`), read fresh at every scrape. A kernel built without
//! module support has no `/proc/modules`; that is reported as `hpcnode_kernel_modules_supported 0`,
//! not as an error.

mod expected;
mod installed;
mod module_files;
mod signing;

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use crate::flags::{flag, ConfigError, Flags};
use crate::kernel::cmdline;
use crate::kernel::keys::{self, Keys, Trust};
use crate::kernel::modprobe::{self, glob_match, Action};
use crate::kernel::module_file::{self, Signature, SignatureCache};
use crate::kernel::release::{boot_image_release, checked_release, compare_releases, is_release};
use crate::kernel::taint;
use crate::metrics::{Desc, Labels, Value};
use crate::sysfs::{AttributeReader, FileStamp, Stamped, SysDir, SysfsError};

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use expected::{parse_builtin_index, parse_cmdline_blacklists};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use signing::parse_lockdown;

pub const REGISTRATION: Registration = Registration {
    name: "modules",
    enabled_by_default: true,
    help: "Kernel taint, loaded and expected modules, modprobe.d rules, module signature enforcement, lockdown and Secure Boot",
    metrics: &METRICS,
    roots: &[Root::Sysfs, Root::Procfs, Root::Rootfs],
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
        Ok(Started::new(ModulesCollector::new(
            host,
            self.expected,
            self.max_modules,
        )))
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
    /// The files modprobe would load for the expected modules, by release and `modules.dep`'s
    /// stamp.
    files_to_load: Stamped<(String, FileStamp), Vec<String>>,
}

impl ModulesCollector {
    fn new(host: &Host, expected: Vec<String>, max_modules: usize) -> ModulesCollector {
        ModulesCollector {
            procfs: host.procfs.clone(),
            sysfs: host.sysfs.clone(),
            rootfs: host.rootfs.clone(),
            expected,
            max_modules,
            signatures: SignatureCache::default(),
            files_to_load: Stamped::default(),
        }
    }
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
const MODULE_FILE_DECODED_BYTES: Desc = Desc::counter(
    "hpcnode_module_file_decompressed",
    "Module images decompressed to read their signatures, since the exporter started: a file is decoded again only when it changes, whether it was read or refused.",
    Some("bytes"),
);
const MODULES_SUPPORTED: Desc = Desc::gauge(
    "hpcnode_kernel_modules_supported",
    "1 when the kernel supports loadable modules (/proc/modules exists).",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 17] = [
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
    MODULE_FILE_DECODED_BYTES,
];

/// Files longer than a page read whole (`/proc/modules`, `modules.builtin`) stop here: 1 MiB holds several thousand modules.
const MAX_LIST_BYTES: usize = 1 << 20;

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

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

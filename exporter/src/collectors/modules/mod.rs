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

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use expected::{parse_builtin_index, parse_cmdline_blacklists};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use signing::parse_lockdown;

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
mod tests {
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

//! Command line: raw flags parsed first, then validated into a `Config` before any I/O.
//!
//! Flag names follow node_exporter (`--web.listen-address`, `--path.sysfs`,
//! `--[no-]collector.<name>`), generated from the one registration list.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use regex::Regex;

use crate::collector::{Registration, COLLECTORS};
use crate::logging::{Level, LogFormat};
use crate::collectors::pci::DeviceSelector;
use crate::collectors::verbs;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unknown flag, missing value, ...: clap's message, first line only.
    #[error("{0}")]
    Flags(String),
    #[error("invalid --web.listen-address {value:?}: {reason}")]
    ListenAddress { value: String, reason: &'static str },
    #[error("invalid --web.telemetry-path {0:?}: must start with '/' and must not be '/' or start with '/-/'")]
    TelemetryPath(String),
    #[error("invalid --web.max-requests {0:?}: must be a non-negative integer (0 = no limit)")]
    MaxRequests(String),
    #[error("invalid --scrape.timeout {value:?}: {reason}")]
    Duration { value: String, reason: &'static str },
    #[error("invalid {flag} {value:?}: {reason}")]
    Regex {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("--collector.rdma.device-include and --collector.rdma.device-exclude are mutually exclusive")]
    IncludeAndExclude,
    #[error("invalid --log.level {0:?}: one of debug, info, warn, error")]
    LogLevel(String),
    #[error("invalid --log.format {0:?}: one of logfmt, json")]
    LogFormat(String),
    #[error("invalid {flag}: must not be empty")]
    EmptyPath { flag: &'static str },
    #[error("invalid --collector.mic.micras-path {value:?}: {reason}")]
    MicrasPath { value: String, reason: &'static str },
    #[error("invalid --collector.modules.expected module {value:?}: {reason}")]
    ModuleName { value: String, reason: &'static str },
    #[error("invalid --collector.modules.max-modules {0:?}: must be an integer from 1 to 65536")]
    MaxModules(String),
    #[error("invalid {flag} {value:?}: expected vendor:device in hexadecimal (10de:1eb8){also}")]
    PciDevice {
        flag: &'static str,
        value: String,
        also: &'static str,
    },
    #[error("invalid {flag} {value:?}: {reason}")]
    Verbs {
        flag: String,
        value: String,
        reason: String,
    },
}

/// What parsing the command line led to.
pub enum Invocation {
    Run(Box<Config>),
    /// `--help` or `--version`: print this and exit 0.
    Print(String),
    /// `probe verbs ...`: one probe now, a result table, pass or fail.
    ProbeVerbs(Box<VerbsProbeCommand>),
}

/// The validated `probe verbs` subcommand.
#[derive(Debug, Clone)]
pub struct VerbsProbeCommand {
    pub sysfs: PathBuf,
    /// `None`: the first RDMA device.
    pub device: Option<String>,
    pub port: u8,
    pub gid_index: Option<u8>,
    pub peer: Option<String>,
    pub token: Option<Vec<u8>>,
    pub params: verbs::engine::Params,
    pub library: String,
    /// Fail (exit 1) when the efficiency ratio is below this.
    pub min_ratio: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// `None` for `:port`, meaning every interface.
    pub host: Option<String>,
    pub port: u16,
}

/// Which devices a collector exports, by name.
#[derive(Debug, Clone)]
pub enum DeviceFilter {
    All,
    Include(Regex),
    Exclude(Regex),
}

impl DeviceFilter {
    pub fn allows(&self, device: &str) -> bool {
        match self {
            DeviceFilter::All => true,
            DeviceFilter::Include(re) => re.is_match(device),
            DeviceFilter::Exclude(re) => !re.is_match(device),
        }
    }
}

#[derive(Debug)]
pub struct Config {
    pub listen_address: ListenAddress,
    pub telemetry_path: String,
    /// Concurrent scrapes allowed; 0 means no limit.
    pub max_requests: usize,
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
    pub rootfs: PathBuf,
    pub collectors: Vec<&'static Registration>,
    pub rdma_devices: DeviceFilter,
    /// Per-card directories of copied-out micras files, below `rootfs`, sorted by card.
    pub mic_micras_paths: Vec<MicrasPath>,
    /// Whether the mic collector asks libmicmgmt (root only) for card telemetry.
    pub mic_libmicmgmt: bool,
    /// Modules that must be loaded (or built in), in the kernel's spelling: `-` becomes `_`.
    pub modules_expected: Vec<String>,
    /// `hpcnode_module_info` series per scrape; the rest fold into one `other` series.
    pub modules_max_modules: usize,
    /// PCI collector: extra devices of interest, devices meant for passthrough, Nova configs.
    pub pci_devices: Vec<DeviceSelector>,
    pub pci_passthrough_devices: Vec<DeviceSelector>,
    pub pci_nova_configs: Vec<PathBuf>,
    pub scrape_timeout: Duration,
    pub log_level: Level,
    pub log_format: LogFormat,
    pub verbs: verbs::Settings,
    /// `--ebpf.strict`: a probe that attaches to no hook is a startup error.
    pub ebpf_strict: bool,
}

/// Flag values as given, before validation.
struct RawFlags {
    listen_address: String,
    telemetry_path: String,
    max_requests: String,
    sysfs: String,
    procfs: String,
    rootfs: String,
    collectors: Vec<&'static Registration>,
    rdma_device_include: Option<String>,
    rdma_device_exclude: Option<String>,
    mic_micras_paths: Vec<String>,
    mic_libmicmgmt: bool,
    modules_expected: String,
    modules_max_modules: String,
    pci_devices: Vec<String>,
    pci_passthrough_devices: Vec<String>,
    pci_nova_configs: Vec<String>,
    scrape_timeout: String,
    log_level: String,
    log_format: String,
    verbs: Result<verbs::Settings, ConfigError>,
    ebpf_strict: bool,
}

pub fn parse<I, T>(args: I) -> Result<Invocation, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|arg| arg == "probe") {
        return parse_probe(&args);
    }
    let mut command = command();
    let matches = match command.try_get_matches_from_mut(args) {
        Ok(matches) => matches,
        Err(err) => return clap_outcome(err),
    };
    validate(raw_flags(&matches)).map(|config| Invocation::Run(Box::new(config)))
}

/// clap's verdict on a command line that is not a successful parse.
fn clap_outcome(err: clap::Error) -> Result<Invocation, ConfigError> {
    match err.kind() {
        clap::error::ErrorKind::DisplayHelp
        | clap::error::ErrorKind::DisplayVersion
        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            Ok(Invocation::Print(err.render().to_string()))
        }
        _ => {
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            Err(ConfigError::Flags(
                first.trim_start_matches("error: ").to_string(),
            ))
        }
    }
}

/// The probe's measurement and connection flags, shared by the exporter (`--probe.verbs.*`) and
/// the `probe verbs` subcommand (no prefix).
fn verbs_flags(prefix: &str) -> Vec<Arg> {
    let arg = |name: &str, value: &'static str, help: &'static str| {
        Arg::new(format!("{prefix}{name}"))
            .long(format!("{prefix}{name}"))
            .value_name(value)
            .help(help)
    };
    vec![
        arg("port", "N", "Port number to probe (default 1)."),
        arg(
            "gid-index",
            "N",
            "GID index on RoCE (default: the first RoCE v2 GID, IPv4-mapped preferred).",
        ),
        arg(
            "peer",
            "HOST:PORT",
            "Probe against the responder of another exporter there instead of in loopback.",
        ),
        arg(
            "token-file",
            "FILE",
            "File holding the shared token sent to (or required from) the peer.",
        ),
        arg(
            "message-size",
            "BYTES",
            "RDMA WRITE message size for the bandwidth run (default 65536).",
        ),
        arg(
            "queue-depth",
            "N",
            "Writes in flight during the bandwidth run (default 128).",
        ),
        arg(
            "duration",
            "DURATION",
            "Length of the bandwidth run (default 2s, at most 60s).",
        ),
        arg(
            "latency-iterations",
            "N",
            "Ping-pong round trips for the latency (default 1000).",
        ),
        arg(
            "timeout",
            "DURATION",
            "Longest wait for any single step: a completion, an echo, a peer message (default 5s).",
        ),
        arg(
            "library",
            "PATH",
            "The libibverbs to load (default libibverbs.so.1, wherever the dynamic linker finds it).",
        ),
    ]
}

/// The probe flags' values, validated (flag names without their prefix).
struct VerbsFlags {
    port: u8,
    gid_index: Option<u8>,
    peer: Option<String>,
    token: Option<Vec<u8>>,
    params: verbs::engine::Params,
    library: String,
}

/// Flags that share a prefix: their values, and their errors worded with the full flag name.
struct Prefixed<'a> {
    matches: &'a ArgMatches,
    prefix: &'a str,
}

impl Prefixed<'_> {
    fn get(&self, name: &str) -> Option<String> {
        self.matches
            .get_one::<String>(&format!("{}{name}", self.prefix))
            .cloned()
    }

    fn invalid(&self, name: &str, value: &str, reason: &str) -> ConfigError {
        ConfigError::Verbs {
            flag: format!("--{}{name}", self.prefix),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}

fn verbs_values(matches: &ArgMatches, prefix: &str) -> Result<VerbsFlags, ConfigError> {
    let flags = Prefixed { matches, prefix };
    let get = |name: &str| flags.get(name);
    let invalid = |name: &str, value: &str, reason: &str| flags.invalid(name, value, reason);
    let number = |name: &str, min: u64, max: u64| -> Result<Option<u64>, ConfigError> {
        get(name)
            .map(|value| match value.parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(invalid(
                    name,
                    &value,
                    &format!("must be an integer from {min} to {max}"),
                )),
            })
            .transpose()
    };
    let duration = |name: &str, max: Duration| -> Result<Option<Duration>, ConfigError> {
        get(name)
            .map(|value| match parse_duration(&value) {
                Ok(d) if d <= max => Ok(d),
                Ok(_) => Err(invalid(
                    name,
                    &value,
                    &format!("must be at most {}s", max.as_secs()),
                )),
                Err(err) => Err(invalid(name, &value, &err.to_string())),
            })
            .transpose()
    };
    let defaults = verbs::engine::Params::default();
    let params = verbs::engine::Params {
        message_size: number("message-size", 1, verbs::peer::MAX_MESSAGE_SIZE as u64)?
            .map_or(defaults.message_size, |n| n as usize),
        queue_depth: number("queue-depth", 1, 4096)?.map_or(defaults.queue_depth, |n| n as u32),
        duration: duration("duration", verbs::MAX_DURATION)?.unwrap_or(defaults.duration),
        latency_iterations: number("latency-iterations", 1, 100_000)?
            .map_or(defaults.latency_iterations, |n| n as u32),
        step_timeout: duration("timeout", Duration::from_secs(300))?
            .unwrap_or(defaults.step_timeout),
    };
    let peer = get("peer");
    if let Some(peer) = &peer {
        if !peer
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        {
            return Err(invalid("peer", peer, "expected HOST:PORT"));
        }
    }
    let token = match get("token-file") {
        None => None,
        Some(path) => {
            let text = std::fs::read(&path)
                .map_err(|err| invalid("token-file", &path, &err.to_string()))?;
            let token = text.trim_ascii().to_vec();
            if token.is_empty() || token.len() > verbs::oob::MAX_TOKEN {
                return Err(invalid(
                    "token-file",
                    &path,
                    &format!("the token must be 1 to {} bytes", verbs::oob::MAX_TOKEN),
                ));
            }
            Some(token)
        }
    };
    Ok(VerbsFlags {
        port: number("port", 1, 255)?.map_or(1, |n| n as u8),
        gid_index: number("gid-index", 0, 255)?.map(|n| n as u8),
        peer,
        token,
        params,
        library: get("library").unwrap_or_else(|| verbs::ffi::LIBRARY.to_string()),
    })
}

/// The exporter's `--probe.verbs.*` flags.
fn verbs_settings(matches: &ArgMatches) -> Result<verbs::Settings, ConfigError> {
    const PREFIX: &str = "probe.verbs.";
    let flags = verbs_values(matches, PREFIX)?;
    let prefixed = Prefixed {
        matches,
        prefix: PREFIX,
    };
    let get = |name: &str| prefixed.get(name);
    let invalid = |name: &str, value: &str, reason: &str| prefixed.invalid(name, value, reason);
    let off_or_duration = |name: &str| -> Result<Option<Duration>, ConfigError> {
        match get(name) {
            None => Ok(None),
            Some(value) if value == "0" || value == "0s" => Ok(None),
            Some(value) => parse_duration(&value)
                .map(Some)
                .map_err(|err| invalid(name, &value, &err.to_string())),
        }
    };
    let allow = match get("allow") {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|cidr| {
                verbs::peer::Cidr::parse(cidr.trim())
                    .ok_or_else(|| invalid("allow", cidr, "expected an address or ADDRESS/PREFIX"))
            })
            .collect::<Result<_, _>>()?,
    };
    let listen = get("listen");
    if let Some(listen) = &listen {
        parse_listen_address(listen).map_err(|err| invalid("listen", listen, &err.to_string()))?;
        if allow.is_empty() {
            return Err(invalid(
                "listen",
                listen,
                "requires --probe.verbs.allow (the peers it serves)",
            ));
        }
    }
    Ok(verbs::Settings {
        interval: off_or_duration("interval")?,
        jitter: off_or_duration("jitter")?.unwrap_or_default(),
        devices: get("device")
            .map(|list| {
                list.split(',')
                    .map(str::to_string)
                    .filter(|d| !d.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        port: flags.port,
        gid_index: flags.gid_index,
        peer: flags.peer,
        token: flags.token,
        params: flags.params,
        listen,
        allow,
        library: flags.library,
    })
}

/// `hpcnode_exporter probe verbs [flags]`.
fn parse_probe(args: &[OsString]) -> Result<Invocation, ConfigError> {
    let verbs = Command::new("verbs")
        .about("Run one RDMA WRITE bandwidth and latency probe now and print ib_write_bw's table; exit 1 below --min-ratio.")
        .arg(Arg::new("device").long("device").value_name("NAME").help("RDMA device (default: the first one)."))
        .arg(Arg::new("path.sysfs").long("path.sysfs").value_name("PATH").default_value("/sys").help("sysfs mountpoint."))
        .arg(Arg::new("min-ratio").long("min-ratio").value_name("RATIO").help("Fail when bandwidth / port data rate is below this (e.g. 0.9)."))
        .args(verbs_flags(""));
    let mut command = Command::new("hpcnode_exporter probe")
        .bin_name("hpcnode_exporter probe")
        .about("Run a probe once, now.")
        .subcommand_required(true)
        .subcommand(verbs);
    let matches = match command.try_get_matches_from_mut(&args[1..]) {
        Ok(matches) => matches,
        Err(err) => return clap_outcome(err),
    };
    let Some(("verbs", matches)) = matches.subcommand() else {
        return Err(ConfigError::Flags("unknown probe".into()));
    };
    let flags = verbs_values(matches, "")?;
    let min_ratio = match matches.get_one::<String>("min-ratio") {
        None => None,
        Some(value) => match value.parse::<f64>() {
            Ok(ratio) if ratio.is_finite() && ratio >= 0.0 => Some(ratio),
            _ => {
                return Err(ConfigError::Verbs {
                    flag: "--min-ratio".into(),
                    value: value.clone(),
                    reason: "must be a non-negative number".into(),
                })
            }
        },
    };
    let sysfs = matches
        .get_one::<String>("path.sysfs")
        .cloned()
        .unwrap_or_default();
    Ok(Invocation::ProbeVerbs(Box::new(VerbsProbeCommand {
        sysfs: path("--path.sysfs", sysfs)?,
        device: matches.get_one::<String>("device").cloned(),
        port: flags.port,
        gid_index: flags.gid_index,
        peer: flags.peer,
        token: flags.token,
        params: flags.params,
        library: flags.library,
        min_ratio,
    })))
}

fn command() -> Command {
    let mut command = Command::new("hpcnode_exporter")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Prometheus exporter for HPC node driver stacks: RDMA fabrics, Xeon Phi coprocessors, GPU passthrough.")
        .arg(flag("web.listen-address", ":10050", "Address on which to expose metrics and the web interface."))
        .arg(flag("web.telemetry-path", "/metrics", "Path under which to expose metrics."))
        .arg(flag("web.max-requests", "40", "Maximum number of parallel scrape requests; beyond it, 503. 0 disables the limit."))
        .arg(flag("path.sysfs", "/sys", "sysfs mountpoint."))
        .arg(flag("path.procfs", "/proc", "procfs mountpoint."))
        .arg(flag("path.rootfs", "/", "Root filesystem (for /lib/modules and /etc)."))
        .arg(flag("scrape.timeout", "5s", "Deadline for each collector within one scrape (e.g. 500ms, 5s, 1m)."))
        .arg(flag("log.level", "info", "Only log messages with the given severity or above: debug, info, warn, error."))
        .arg(flag("log.format", "logfmt", "Output format of log messages: logfmt or json."))
        .arg(
            Arg::new("collector.disable-defaults")
                .long("collector.disable-defaults")
                .action(ArgAction::SetTrue)
                .help("Set all collectors to disabled by default."),
        )
        .arg(optional("collector.rdma.device-include", "Regexp of RDMA devices to include (mutually exclusive with device-exclude)."))
        .arg(optional("collector.rdma.device-exclude", "Regexp of RDMA devices to exclude (mutually exclusive with device-include)."))
        .arg(repeated("collector.pci.device", "VENDOR:DEVICE", "A PCI device of interest beyond the GPU, accelerator and fabric classes, by ids (10de:1eb8). Repeatable."))
        .arg(repeated("collector.pci.passthrough-device", "ADDRESS|VENDOR:DEVICE", "A PCI device meant for passthrough, by address (0000:3b:00.0) or ids; its readiness is reported even when not bound to vfio-pci. Repeatable."))
        .arg(repeated("collector.pci.nova-config", "PATH", "An OpenStack Nova config file whose [pci] device_spec and alias are checked against the devices present (repeat for Kolla's split files)."))
        .arg(
            Arg::new("collector.mic.micras-path")
                .long("collector.mic.micras-path")
                .value_name("micN=DIR")
                .action(ArgAction::Append)
                .help("Directory holding a copy of card micN's /sys/class/micras files (absolute, read below --path.rootfs). Repeat once per card."),
        )
        .arg(
            Arg::new("collector.mic.libmicmgmt")
                .long("collector.mic.libmicmgmt")
                .action(ArgAction::SetTrue)
                .overrides_with("no-collector.mic.libmicmgmt")
                .help("Read card telemetry over SCIF with libmicmgmt.so.0, loaded at run time; needs root (default: enabled)."),
        )
        .arg(
            Arg::new("no-collector.mic.libmicmgmt")
                .long("no-collector.mic.libmicmgmt")
                .action(ArgAction::SetTrue)
                .overrides_with("collector.mic.libmicmgmt")
                .help("Do not load libmicmgmt."),
        )
        .arg(flag("collector.modules.expected", "", "Comma-separated kernel modules that must be loaded or built in, e.g. mlx5_core,mlx5_ib,ib_uverbs ('-' and '_' are the same)."))
        .arg(flag("collector.modules.max-modules", "2048", "Loaded modules exported one series each; the rest are counted in one module=\"other\" series."))
        .arg(verbs_flag("interval", "DURATION", "Run the verbs probe this often (e.g. 1h); unset or 0: never."))
        .arg(verbs_flag("jitter", "DURATION", "Add a random delay up to this to each probe interval (default 0)."))
        .arg(verbs_flag("device", "NAMES", "Comma-separated RDMA devices to probe (default: all)."))
        .arg(verbs_flag("listen", "ADDR:PORT", "Serve other exporters' peer probes here (off by default; requires --probe.verbs.allow)."))
        .arg(verbs_flag("allow", "CIDRS", "Comma-separated addresses or networks allowed to use the responder."))
        .args(verbs_flags("probe.verbs."))
        .arg(
            Arg::new("ebpf.strict")
                .long("ebpf.strict")
                .action(ArgAction::SetTrue)
                .help("Exit with an error at startup if any module or kernel-log eBPF probe attaches to no hook (for CI); the IOMMU and vfio probes are not required."),
        );
    for registration in COLLECTORS {
        let enable = format!("collector.{}", registration.name);
        let disable = format!("no-collector.{}", registration.name);
        let default = if registration.enabled_by_default {
            "enabled"
        } else {
            "disabled"
        };
        command = command
            .arg(
                Arg::new(enable.clone())
                    .long(enable.clone())
                    .action(ArgAction::SetTrue)
                    .overrides_with(disable.clone())
                    .help(format!(
                        "Enable the {} collector (default: {default}). {}",
                        registration.name, registration.help
                    )),
            )
            .arg(
                Arg::new(disable.clone())
                    .long(disable)
                    .action(ArgAction::SetTrue)
                    .overrides_with(enable)
                    .help(format!("Disable the {} collector.", registration.name)),
            );
    }
    command
}

fn flag(name: &'static str, default: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name("VALUE")
        .default_value(default)
        .help(help)
}

fn verbs_flag(name: &str, value: &'static str, help: &'static str) -> Arg {
    let name = format!("probe.verbs.{name}");
    Arg::new(name.clone())
        .long(name)
        .value_name(value)
        .help(help)
}

fn optional(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name).long(name).value_name("REGEX").help(help)
}

fn repeated(name: &'static str, value_name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value_name)
        .action(ArgAction::Append)
        .help(help)
}

fn raw_flags(matches: &ArgMatches) -> RawFlags {
    let values = |name: &str| -> Vec<String> {
        matches
            .get_many::<String>(name)
            .map(|v| v.cloned().collect())
            .unwrap_or_default()
    };
    let optional = |name: &str| matches.get_one::<String>(name).cloned();
    let value = |name: &str| optional(name).unwrap_or_default();
    let disable_defaults = matches.get_flag("collector.disable-defaults");
    let collectors = COLLECTORS
        .iter()
        .filter(|registration| {
            if matches.get_flag(&format!("collector.{}", registration.name)) {
                true
            } else if matches.get_flag(&format!("no-collector.{}", registration.name)) {
                false
            } else {
                registration.enabled_by_default && !disable_defaults
            }
        })
        .collect();
    RawFlags {
        listen_address: value("web.listen-address"),
        telemetry_path: value("web.telemetry-path"),
        max_requests: value("web.max-requests"),
        sysfs: value("path.sysfs"),
        procfs: value("path.procfs"),
        rootfs: value("path.rootfs"),
        collectors,
        rdma_device_include: optional("collector.rdma.device-include"),
        rdma_device_exclude: optional("collector.rdma.device-exclude"),
        mic_micras_paths: values("collector.mic.micras-path"),
        mic_libmicmgmt: !matches.get_flag("no-collector.mic.libmicmgmt"),
        modules_expected: value("collector.modules.expected"),
        modules_max_modules: value("collector.modules.max-modules"),
        pci_devices: values("collector.pci.device"),
        pci_passthrough_devices: values("collector.pci.passthrough-device"),
        pci_nova_configs: values("collector.pci.nova-config"),
        scrape_timeout: value("scrape.timeout"),
        log_level: value("log.level"),
        log_format: value("log.format"),
        verbs: verbs_settings(matches),
        ebpf_strict: matches.get_flag("ebpf.strict"),
    }
}

fn validate(raw: RawFlags) -> Result<Config, ConfigError> {
    let telemetry_path = raw.telemetry_path;
    if !telemetry_path.starts_with('/')
        || telemetry_path == "/"
        || telemetry_path.starts_with("/-/")
    {
        return Err(ConfigError::TelemetryPath(telemetry_path));
    }
    let max_requests = raw
        .max_requests
        .parse()
        .map_err(|_| ConfigError::MaxRequests(raw.max_requests.clone()))?;
    let rdma_devices = match (raw.rdma_device_include, raw.rdma_device_exclude) {
        (Some(_), Some(_)) => return Err(ConfigError::IncludeAndExclude),
        (Some(include), None) => {
            DeviceFilter::Include(regex("--collector.rdma.device-include", include)?)
        }
        (None, Some(exclude)) => {
            DeviceFilter::Exclude(regex("--collector.rdma.device-exclude", exclude)?)
        }
        (None, None) => DeviceFilter::All,
    };
    let pci_devices = raw
        .pci_devices
        .into_iter()
        .map(|value| match DeviceSelector::parse(&value) {
            Some(selector @ DeviceSelector::Ids { .. }) => Ok(selector),
            _ => Err(ConfigError::PciDevice {
                flag: "--collector.pci.device",
                value,
                also: "",
            }),
        })
        .collect::<Result<_, _>>()?;
    let pci_passthrough_devices = raw
        .pci_passthrough_devices
        .into_iter()
        .map(|value| {
            DeviceSelector::parse(&value).ok_or(ConfigError::PciDevice {
                flag: "--collector.pci.passthrough-device",
                value,
                also: " or a PCI address (0000:3b:00.0)",
            })
        })
        .collect::<Result<_, _>>()?;
    let pci_nova_configs = raw
        .pci_nova_configs
        .into_iter()
        .map(|value| path("--collector.pci.nova-config", value))
        .collect::<Result<_, _>>()?;
    Ok(Config {
        listen_address: parse_listen_address(&raw.listen_address)?,
        telemetry_path,
        max_requests,
        sysfs: path("--path.sysfs", raw.sysfs)?,
        procfs: path("--path.procfs", raw.procfs)?,
        rootfs: path("--path.rootfs", raw.rootfs)?,
        collectors: raw.collectors,
        rdma_devices,
        mic_micras_paths: parse_micras_paths(&raw.mic_micras_paths)?,
        mic_libmicmgmt: raw.mic_libmicmgmt,
        modules_expected: parse_module_list(&raw.modules_expected)?,
        modules_max_modules: match raw.modules_max_modules.parse() {
            Ok(n @ 1..=65536) => n,
            _ => return Err(ConfigError::MaxModules(raw.modules_max_modules)),
        },
        pci_devices,
        pci_passthrough_devices,
        pci_nova_configs,
        scrape_timeout: parse_duration(&raw.scrape_timeout)?,
        log_level: Level::parse(&raw.log_level).ok_or(ConfigError::LogLevel(raw.log_level))?,
        log_format: LogFormat::parse(&raw.log_format)
            .ok_or(ConfigError::LogFormat(raw.log_format))?,
        verbs: raw.verbs?,
        ebpf_strict: raw.ebpf_strict,
    })
}

/// `mlx5_core,ib-uverbs` -> `["mlx5_core", "ib_uverbs"]`: the kernel treats `-` and `_` in
/// module names alike and reports `_`; duplicates after that are dropped.
fn parse_module_list(value: &str) -> Result<Vec<String>, ConfigError> {
    let mut modules: Vec<String> = Vec::new();
    if value.is_empty() {
        return Ok(modules);
    }
    for name in value.split(',').map(str::trim) {
        let invalid = |reason| ConfigError::ModuleName {
            value: name.to_string(),
            reason,
        };
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

fn path(flag: &'static str, value: String) -> Result<PathBuf, ConfigError> {
    if value.is_empty() {
        return Err(ConfigError::EmptyPath { flag });
    }
    Ok(PathBuf::from(value))
}

/// Anchored like node_exporter's device filters: `mlx5` matches only a device named `mlx5`.
fn regex(flag: &'static str, value: String) -> Result<Regex, ConfigError> {
    Regex::new(&format!("^(?:{value})$")).map_err(|err| ConfigError::Regex {
        flag,
        value,
        // regex's message draws a caret diagram over several lines; keep the verdict line.
        reason: err
            .to_string()
            .lines()
            .last()
            .unwrap_or("invalid regex")
            .trim_start_matches("error: ")
            .to_string(),
    })
}

/// One `--collector.mic.micras-path=micN=DIR`: where card `micN`'s micras files were copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicrasPath {
    pub card: String,
    /// Absolute as given; the collector reads it below `--path.rootfs`.
    pub dir: PathBuf,
}

/// Card names as the host driver spells them (`mic0`), each card at most once.
fn parse_micras_paths(values: &[String]) -> Result<Vec<MicrasPath>, ConfigError> {
    let mut paths: Vec<MicrasPath> = Vec::new();
    for value in values {
        let invalid = |reason| ConfigError::MicrasPath {
            value: value.clone(),
            reason,
        };
        let (card, dir) = value
            .split_once('=')
            .ok_or_else(|| invalid("expected micN=DIR"))?;
        let number = card
            .strip_prefix("mic")
            .ok_or_else(|| invalid("the card must be named micN, as in /sys/class/mic"))?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("the card must be named micN, as in /sys/class/mic"));
        }
        if !dir.starts_with('/') {
            return Err(invalid("DIR must be an absolute path"));
        }
        if paths.iter().any(|path| path.card == card) {
            return Err(invalid("a card may be given only once"));
        }
        paths.push(MicrasPath {
            card: card.to_string(),
            dir: PathBuf::from(dir),
        });
    }
    paths.sort_by(|a, b| a.card.cmp(&b.card));
    Ok(paths)
}

fn parse_listen_address(value: &str) -> Result<ListenAddress, ConfigError> {
    let invalid = |reason| ConfigError::ListenAddress {
        value: value.to_string(),
        reason,
    };
    let (host, port) = value
        .rsplit_once(':')
        .ok_or_else(|| invalid("expected [host]:port"))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| invalid("port must be a number from 0 to 65535"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.contains(':') && !value.starts_with('[') {
        return Err(invalid(
            "an IPv6 host must be written in brackets, e.g. [::1]:10050",
        ));
    }
    Ok(ListenAddress {
        host: (!host.is_empty()).then(|| host.to_string()),
        port,
    })
}

/// Prometheus-style durations: `500ms`, `5s`, `1m30s`.
pub fn parse_duration(value: &str) -> Result<Duration, ConfigError> {
    let invalid = |reason| ConfigError::Duration {
        value: value.to_string(),
        reason,
    };
    let mut total = Duration::ZERO;
    let mut rest = value;
    if rest.is_empty() {
        return Err(invalid("empty"));
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid(
                "expected a number followed by a unit (ms, s, m, h)",
            ));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| invalid("number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per_unit = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(invalid("unit must be one of ms, s, m, h")),
        };
        rest = &rest[unit_len..];
        let millis = number
            .checked_mul(millis_per_unit)
            .ok_or_else(|| invalid("too large"))?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(|| invalid("too large"))?;
    }
    if total.is_zero() {
        return Err(invalid("must be greater than zero"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<Config, ConfigError> {
        let argv = std::iter::once("hpcnode_exporter").chain(args.iter().copied());
        match parse(argv)? {
            Invocation::Run(config) => Ok(*config),
            Invocation::Print(text) => panic!("unexpected print: {text}"),
            Invocation::ProbeVerbs(command) => panic!("unexpected probe: {command:?}"),
        }
    }

    fn probe(args: &[&str]) -> Result<VerbsProbeCommand, ConfigError> {
        let argv = ["hpcnode_exporter", "probe", "verbs"].into_iter();
        match parse(argv.chain(args.iter().copied()))? {
            Invocation::ProbeVerbs(command) => Ok(*command),
            _ => panic!("not a probe"),
        }
    }

    #[test]
    fn verbs_probe_is_off_unless_asked_for() {
        let settings = config(&[]).unwrap().verbs;
        assert_eq!(settings.interval, None);
        assert_eq!(settings.listen, None);
        assert_eq!(
            config(&["--probe.verbs.interval=0"])
                .unwrap()
                .verbs
                .interval,
            None
        );
        let on = config(&[
            "--probe.verbs.interval=1h",
            "--probe.verbs.jitter=5m",
            "--probe.verbs.device=mlx5_0,mlx5_1",
            "--probe.verbs.message-size=4096",
            "--probe.verbs.duration=10s",
        ])
        .unwrap()
        .verbs;
        assert_eq!(on.interval, Some(Duration::from_secs(3600)));
        assert_eq!(on.jitter, Duration::from_secs(300));
        assert_eq!(on.devices, ["mlx5_0", "mlx5_1"]);
        assert_eq!(on.port, 1);
        assert_eq!(on.params.message_size, 4096);
        assert_eq!(on.params.duration, Duration::from_secs(10));
        assert_eq!(on.params.queue_depth, 128);
    }

    #[test]
    fn verbs_responder_needs_an_allow_list() {
        let err = config(&["--probe.verbs.listen=:18515"]).unwrap_err();
        assert!(err.to_string().contains("--probe.verbs.allow"), "{err}");
        let ok = config(&[
            "--probe.verbs.listen=0.0.0.0:18515",
            "--probe.verbs.allow=10.0.0.0/8,127.0.0.1",
        ])
        .unwrap()
        .verbs;
        assert_eq!(ok.allow.len(), 2);
        for bad in [
            &["--probe.verbs.listen=:1", "--probe.verbs.allow=10.0.0.0/40"][..],
            &["--probe.verbs.duration=2m"],
            &["--probe.verbs.message-size=0"],
            &["--probe.verbs.peer=nohost"],
            &["--probe.verbs.token-file=/nonexistent/token"],
            &["--probe.verbs.interval=soon"],
        ] {
            let err = config(bad).unwrap_err().to_string();
            assert!(!err.contains('\n'), "{bad:?}: {err}");
        }
    }

    #[test]
    fn token_file_is_trimmed_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let flag = format!("--token-file={}", token.display());
        assert_eq!(
            probe(&[&flag]).unwrap().token.as_deref(),
            Some(&b"s3cret"[..])
        );
        std::fs::write(&token, "x".repeat(65)).unwrap();
        assert!(probe(&[&flag]).is_err());
        std::fs::write(&token, "\n").unwrap();
        assert!(probe(&[&flag]).is_err());
    }

    #[test]
    fn probe_subcommand() {
        let command = probe(&[
            "--device=rxe0",
            "--port=1",
            "--peer=10.0.0.2:18515",
            "--min-ratio=0.9",
            "--duration=500ms",
        ])
        .unwrap();
        assert_eq!(command.device.as_deref(), Some("rxe0"));
        assert_eq!(command.peer.as_deref(), Some("10.0.0.2:18515"));
        assert_eq!(command.min_ratio, Some(0.9));
        assert_eq!(command.params.duration, Duration::from_millis(500));
        assert_eq!(command.sysfs, PathBuf::from("/sys"));
        assert!(probe(&["--min-ratio=-1"]).is_err());
        assert!(probe(&["--port=0"]).is_err());
        assert!(probe(&["--no-such"]).is_err());
        let argv = ["hpcnode_exporter", "probe", "nothing"];
        assert!(parse(argv).is_err());
    }

    #[test]
    fn defaults_match_node_exporter_conventions() {
        let config = config(&[]).unwrap();
        assert_eq!(
            config.listen_address,
            ListenAddress {
                host: None,
                port: 10050
            }
        );
        assert_eq!(config.telemetry_path, "/metrics");
        assert_eq!(config.max_requests, 40);
        assert_eq!(config.sysfs, PathBuf::from("/sys"));
        assert_eq!(config.scrape_timeout, Duration::from_secs(5));
        assert_eq!(
            config.collectors.iter().map(|c| c.name).collect::<Vec<_>>(),
            ["rdma", "mic", "modules", "ebpf", "pci", "verbs"]
        );
    }

    #[test]
    fn collector_flags_last_one_wins() {
        // Robust to other collectors being on by default.
        let names = |args: &[&str]| -> Vec<&str> {
            let config = config(args).unwrap();
            config.collectors.iter().map(|c| c.name).collect()
        };
        assert!(!names(&["--no-collector.rdma"]).contains(&"rdma"));
        assert!(names(&["--no-collector.rdma", "--collector.rdma"]).contains(&"rdma"));
        assert!(names(&["--collector.disable-defaults"]).is_empty());
        assert_eq!(
            names(&["--collector.disable-defaults", "--collector.rdma"]),
            ["rdma"]
        );
    }

    #[test]
    fn listen_addresses() {
        let parsed = |v: &str| parse_listen_address(v).unwrap();
        assert_eq!(
            parsed("127.0.0.1:9"),
            ListenAddress {
                host: Some("127.0.0.1".into()),
                port: 9
            }
        );
        assert_eq!(parsed("[::1]:10050").host.as_deref(), Some("::1"));
        assert!(parse_listen_address("10050").is_err());
        assert!(parse_listen_address(":99999").is_err());
        assert!(parse_listen_address("::1:80").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        for bad in ["", "0s", "5", "s", "5x", "-1s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn device_filters_are_anchored_and_exclusive() {
        let include = config(&["--collector.rdma.device-include", "mlx5_.*"]).unwrap();
        assert!(include.rdma_devices.allows("mlx5_0"));
        assert!(!include.rdma_devices.allows("xmlx5_0"));
        let exclude = config(&["--collector.rdma.device-exclude=rxe0"]).unwrap();
        assert!(!exclude.rdma_devices.allows("rxe0"));
        assert!(exclude.rdma_devices.allows("rxe01"));
        assert!(matches!(
            config(&[
                "--collector.rdma.device-include=a",
                "--collector.rdma.device-exclude=b"
            ]),
            Err(ConfigError::IncludeAndExclude)
        ));
        assert!(matches!(
            config(&["--collector.rdma.device-include=("]),
            Err(ConfigError::Regex { .. })
        ));
    }

    #[test]
    fn micras_paths_name_each_card_once() {
        let parsed = config(&[
            "--collector.mic.micras-path=mic1=/srv/micras/mic1",
            "--collector.mic.micras-path",
            "mic0=/srv/micras/mic0",
        ])
        .unwrap();
        assert_eq!(
            parsed.mic_micras_paths,
            [
                MicrasPath {
                    card: "mic0".into(),
                    dir: "/srv/micras/mic0".into()
                },
                MicrasPath {
                    card: "mic1".into(),
                    dir: "/srv/micras/mic1".into()
                },
            ]
        );
        assert!(matches!(
            config(&[
                "--collector.mic.micras-path=mic0=/a",
                "--collector.mic.micras-path=mic0=/b"
            ]),
            Err(ConfigError::MicrasPath { .. })
        ));
        assert!(config(&[]).unwrap().mic_libmicmgmt);
        assert!(
            !config(&["--no-collector.mic.libmicmgmt"])
                .unwrap()
                .mic_libmicmgmt
        );
    }

    #[test]
    fn expected_modules_are_normalised_like_the_kernel_does() {
        let parsed = config(&["--collector.modules.expected=mlx5_core, ib-uverbs,ib_uverbs"]);
        assert_eq!(parsed.unwrap().modules_expected, ["mlx5_core", "ib_uverbs"]);
        assert!(config(&[]).unwrap().modules_expected.is_empty());
        let too_long = "m".repeat(56);
        for bad in [
            "mlx5_core,",
            "a b",
            "../x",
            "nvidia;reboot",
            too_long.as_str(),
        ] {
            let flag = format!("--collector.modules.expected={bad}");
            assert!(
                matches!(config(&[&flag]), Err(ConfigError::ModuleName { .. })),
                "{bad:?} accepted"
            );
        }
        assert_eq!(config(&[]).unwrap().modules_max_modules, 2048);
        for bad in ["0", "-1", "65537", "many"] {
            let flag = format!("--collector.modules.max-modules={bad}");
            assert!(matches!(config(&[&flag]), Err(ConfigError::MaxModules(_))));
        }
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        for args in [
            &["--web.max-requests=-1"][..],
            &["--log.level=loud"],
            &["--log.format=xml"],
            &["--web.telemetry-path=metrics"],
            &["--no-such-flag"],
            &["--path.sysfs="],
            &["--collector.mic.micras-path=mic0"],
            &["--collector.mic.micras-path=card0=/var/lib/micras"],
            &["--collector.mic.micras-path=mic=/var/lib/micras"],
            &["--collector.mic.micras-path=mic0=relative/dir"],
            &["--collector.pci.device=0000:3b:00.0"],
            &["--collector.pci.passthrough-device=nvidia"],
        ] {
            let err = config(args).unwrap_err().to_string();
            assert!(!err.contains('\n'), "{args:?}: {err}");
        }
    }
}

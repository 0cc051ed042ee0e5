//! Command line: the common flags (`--web.*`, `--path.*`, `--scrape.*`, `--log.*`,
//! `--collector.disable-defaults`) and, from the registry handed in, `--[no-]collector.<name>`
//! and each collector's own flags. Two stages, as ripgrep does it: clap reads the raw strings,
//! then each is validated into a typed value, naming the flag the user gave; no file is read
//! here. Flags renamed under `--collector.<name>.` keep their old spellings as hidden aliases,
//! and the command line says which of those it used, for `main` to log.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, Command};

use crate::collector::{Host, Registration, RunOnce, Settings};
use crate::flags::{
    first_line, flag, parse_duration_at_most, parse_listen_address, parse_number, switch, toggle,
    Flags,
};
pub use crate::flags::{ConfigError, ListenAddress};
use crate::logging::{Level, LogFormat};

/// What parsing the command line led to.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<Config>),
    /// `--help` or `--version`: print this and exit 0.
    Print(String),
    /// `probe <name> ...`: one run now, a report, pass or fail.
    Probe {
        name: &'static str,
        probe: Box<dyn RunOnce>,
    },
}

#[derive(Debug)]
pub struct Config {
    pub listen: Listen,
    pub telemetry_path: String,
    /// Concurrent scrapes allowed; 0: only `max_connections` limits them.
    pub max_requests: usize,
    /// Concurrent connections allowed.
    pub max_connections: usize,
    /// `--web.config.file` (TLS, basic auth, headers), read by main at startup.
    pub web_config_file: Option<PathBuf>,
    /// The roots, the scrape, the log and the collectors.
    pub collection: Collection,
}

/// Where the exporter serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// `--web.listen-address`, once or more: a listener each, all serving the same routes.
    Addresses(Vec<ListenAddress>),
    /// `--web.systemd-socket`: the listening sockets systemd passes (socket activation).
    Systemd,
}

/// An old spelling of a flag on the command line, and the flag's name now (both without `--`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deprecated {
    pub old: String,
    pub new: String,
}

/// Flag prefixes renamed so that every collector's flags sit under `--collector.<name>.`:
/// (new, old). The old spellings stay accepted, hidden from help, for existing units and scripts.
const RENAMED_PREFIXES: [(&str, &str); 2] = [
    ("collector.ebpf.", "ebpf."),
    ("collector.verbs.", "probe.verbs."),
];

/// `arg` with its old spelling as a hidden alias, when its prefix was renamed.
fn with_old_spelling(arg: Arg) -> Arg {
    let old = arg.get_long().and_then(|long| {
        RENAMED_PREFIXES
            .iter()
            .find_map(|(new, old)| Some(format!("{old}{}", long.strip_prefix(new)?)))
    });
    match old {
        Some(old) => arg.alias(old),
        None => arg,
    }
}

/// The old spellings in `args` (up to a `--`), each once, in the order first given.
fn deprecated_spellings(command: &Command, args: &[OsString]) -> Vec<Deprecated> {
    let mut used: Vec<Deprecated> = Vec::new();
    let given = args.iter().skip(1).map_while(|arg| arg.to_str());
    for name in given
        .take_while(|arg| *arg != "--")
        .filter_map(|arg| arg.strip_prefix("--"))
    {
        let name = name.split_once('=').map_or(name, |(name, _)| name);
        let renamed = command.get_arguments().find(|arg| {
            arg.get_all_aliases()
                .is_some_and(|aliases| aliases.contains(&name))
        });
        if let Some(new) = renamed.and_then(Arg::get_long) {
            if !used.iter().any(|known| known.old == name) {
                used.push(Deprecated {
                    old: name.to_string(),
                    new: new.to_string(),
                });
            }
        }
    }
    used
}

/// An enabled collector, ready to start.
#[derive(Debug)]
pub struct Enabled {
    pub registration: &'static Registration,
    pub settings: Box<dyn Settings>,
}

/// Parses the command line against the common flags and the collectors of `registry`.
pub fn parse<I, T>(args: I, registry: &'static [Registration]) -> Result<Invocation, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|arg| arg == "probe") {
        return parse_probe(&args[1..], registry);
    }
    let mut command = command(registry);
    let flags = match command.try_get_matches_from_mut(&args) {
        Ok(matches) => Flags(matches),
        Err(err) => return clap_verdict(err).map(Invocation::Print),
    };
    let collection = collection(&command, &args, &flags, registry)?;
    let web = validate_web(RawWeb::read(&flags))?;
    Ok(Invocation::Run(Box::new(Config {
        listen: web.listen,
        telemetry_path: web.telemetry_path,
        max_requests: web.max_requests,
        max_connections: web.max_connections,
        web_config_file: web.web_config_file,
        collection,
    })))
}

/// What the exporter and `check` both take from the command line: the roots, the scrape, the
/// log and the collectors.
#[derive(Debug)]
pub struct Collection {
    /// The roots every path is read under, and the scrape deadline.
    pub host: Host,
    /// Threads reading the node in one scrape while none is stuck.
    pub scrape_workers: usize,
    pub log_level: Level,
    pub log_format: LogFormat,
    /// The enabled collectors with their validated settings, in registry order.
    pub collectors: Vec<Enabled>,
    /// Old spellings of renamed flags that the command line used, each once.
    pub deprecated: Vec<Deprecated>,
}

/// The flags [`with_collection_args`] adds, as `command` parsed them from `args` into `flags`:
/// validated, each collector's by its own `configure`.
pub fn collection(
    command: &Command,
    args: &[OsString],
    flags: &Flags,
    registry: &'static [Registration],
) -> Result<Collection, ConfigError> {
    let deprecated = deprecated_spellings(command, args);
    let common = validate_collection(RawCollection::read(flags, registry))?;
    let mut collectors = Vec::new();
    for registration in registry {
        let settings = (registration.configure)(flags)?;
        if common.enabled.contains(&registration.name) {
            collectors.push(Enabled {
                registration,
                settings,
            });
        }
    }
    Ok(Collection {
        host: common.host,
        scrape_workers: common.scrape_workers,
        log_level: common.log_level,
        log_format: common.log_format,
        collectors,
        deprecated,
    })
}

/// clap's verdict on a command line that is not a successful parse: the text to print and exit
/// 0 with (`--help`, `--version`), or the error.
pub fn clap_verdict(err: clap::Error) -> Result<String, ConfigError> {
    match err.kind() {
        clap::error::ErrorKind::DisplayHelp
        | clap::error::ErrorKind::DisplayVersion
        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            Ok(err.render().to_string())
        }
        _ => Err(ConfigError::Flags(first_line(&err))),
    }
}

/// `hpcnode_exporter probe <name> [flags]`, for the collectors that have a probe command.
fn parse_probe(
    args: &[OsString],
    registry: &'static [Registration],
) -> Result<Invocation, ConfigError> {
    let mut command = probe_command(registry);
    let matches = match command.try_get_matches_from_mut(args) {
        Ok(matches) => matches,
        Err(err) => return clap_verdict(err).map(Invocation::Print),
    };
    let unknown = || ConfigError::Flags("unknown probe".into());
    let (name, matches) = matches.subcommand().ok_or_else(unknown)?;
    let (name, command) = registry
        .iter()
        .find(|registration| registration.name == name)
        .and_then(|registration| Some((registration.name, registration.probe.as_ref()?)))
        .ok_or_else(unknown)?;
    let probe = (command.configure)(&Flags(matches.clone()))?;
    Ok(Invocation::Probe { name, probe })
}

/// The `probe` command line: one subcommand per collector of `registry` that has a probe; also
/// what the man page's SUBCOMMANDS are generated from.
pub fn probe_command(registry: &[Registration]) -> Command {
    let mut command = Command::new("hpcnode_exporter probe")
        .bin_name("hpcnode_exporter probe")
        .about("Run a probe once, now.")
        .subcommand_required(true);
    for registration in registry {
        if let Some(probe) = &registration.probe {
            command = command.subcommand(
                Command::new(registration.name)
                    .about(probe.about)
                    .args((probe.flags)()),
            );
        }
    }
    command
}

/// What `--version` prints after the program name: where a binary on a node came from, and the
/// oldest glibc it runs on (build.rs records them). `-V` and the man page get the version alone.
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nrevision: ",
    env!("HPCNODE_REVISION"),
    "\nbuild date: ",
    env!("HPCNODE_BUILD_DATE"),
    "\ntarget: ",
    env!("HPCNODE_TARGET"),
    "\nglibc floor: ",
    env!("HPCNODE_GLIBC_FLOOR"),
);

/// The whole command line, from the common flags and the collectors of `registry`; also what
/// the man page is generated from (`cargo run --example man`).
pub fn command(registry: &[Registration]) -> Command {
    let command = Command::new("hpcnode_exporter")
        .version(env!("CARGO_PKG_VERSION"))
        .long_version(LONG_VERSION)
        .about("Prometheus exporter for HPC node driver stacks: RDMA fabrics, Xeon Phi coprocessors, GPU passthrough.")
        .arg(flag("web.listen-address", ":10133", "Address on which to expose metrics and the web interface; repeat it to listen on several.").action(ArgAction::Append))
        .arg(switch("web.systemd-socket", "Use the listening sockets systemd passes (socket activation) instead of --web.listen-address.").conflicts_with("web.listen-address"))
        .arg(flag("web.telemetry-path", "/metrics", "Path under which to expose metrics."))
        .arg(flag("web.max-requests", "40", "Maximum number of parallel scrape requests, at most one below --web.max-connections (the default gives way to a lower one); beyond it, 503. 0: one below --web.max-connections."))
        .arg(flag("web.max-connections", "512", "Maximum number of open connections; at the limit a new connection replaces the one idle the longest."))
        .arg(flag("web.config.file", "", "Path to a configuration file that can enable TLS or basic authentication, in the format of Prometheus' exporter-toolkit (web-config.yml)."));
    with_collection_args(command, registry)
}

/// `command` with the flags of a collection ([`Collection`]): the roots, the scrape deadline
/// and workers, the log, and the collectors of `registry` with their own flags.
pub fn with_collection_args(command: Command, registry: &[Registration]) -> Command {
    let mut command = command
        .arg(flag("path.sysfs", "/sys", "sysfs mountpoint."))
        .arg(flag("path.procfs", "/proc", "procfs mountpoint."))
        .arg(flag("path.rootfs", "/", "Root filesystem (for /lib/modules and /etc)."))
        .arg(flag("scrape.timeout", "5s", "Deadline for each collector within one scrape (e.g. 500ms, 5s, 1m; at most 1h)."))
        .arg(flag("scrape.workers", "1", "Threads reading the node in one scrape while none is stuck (1 to 16): 1 keeps a scrape on one CPU at a time, which a node running jobs wants; more shorten a scrape of many devices."))
        .arg(flag("log.level", "info", "Only log messages with the given severity or above: debug, info, warn, error."))
        .arg(flag("log.format", "logfmt", "Output format of log messages: logfmt or json."))
        .arg(switch("collector.disable-defaults", "Set all collectors to disabled by default."));
    for registration in registry {
        let default = if registration.enabled_by_default {
            "enabled"
        } else {
            "disabled"
        };
        command = command
            .args(toggle(
                &format!("collector.{}", registration.name),
                format!(
                    "Enable the {} collector (default: {default}). {}",
                    registration.name, registration.help
                ),
                format!("Disable the {} collector.", registration.name),
            ))
            .args((registration.flags)().into_iter().map(with_old_spelling));
    }
    command
}

/// The web flags as given, before validation.
struct RawWeb {
    listen_addresses: Vec<String>,
    systemd_socket: bool,
    telemetry_path: String,
    max_requests: String,
    /// Whether `max_requests` was given, not its default.
    max_requests_given: bool,
    max_connections: String,
    web_config_file: String,
}

impl RawWeb {
    fn read(flags: &Flags) -> RawWeb {
        let value = |name: &str| flags.value(name).unwrap_or_default();
        RawWeb {
            listen_addresses: flags.values("web.listen-address"),
            systemd_socket: flags.is_set("web.systemd-socket"),
            telemetry_path: value("web.telemetry-path"),
            max_requests: value("web.max-requests"),
            max_requests_given: flags.given("web.max-requests"),
            max_connections: value("web.max-connections"),
            web_config_file: value("web.config.file"),
        }
    }
}

/// The collection's common flags as given, before validation.
struct RawCollection {
    sysfs: String,
    procfs: String,
    rootfs: String,
    scrape_timeout: String,
    scrape_workers: String,
    log_level: String,
    log_format: String,
    enabled: Vec<&'static str>,
}

impl RawCollection {
    fn read(flags: &Flags, registry: &[Registration]) -> RawCollection {
        let value = |name: &str| flags.value(name).unwrap_or_default();
        let disable_defaults = flags.is_set("collector.disable-defaults");
        let enabled = registry
            .iter()
            .filter(|registration| {
                flags
                    .toggled(&format!("collector.{}", registration.name))
                    .unwrap_or(registration.enabled_by_default && !disable_defaults)
            })
            .map(|registration| registration.name)
            .collect();
        RawCollection {
            sysfs: value("path.sysfs"),
            procfs: value("path.procfs"),
            rootfs: value("path.rootfs"),
            scrape_timeout: value("scrape.timeout"),
            scrape_workers: value("scrape.workers"),
            log_level: value("log.level"),
            log_format: value("log.format"),
            enabled,
        }
    }
}

/// The web flags, validated.
struct Web {
    listen: Listen,
    telemetry_path: String,
    max_requests: usize,
    max_connections: usize,
    web_config_file: Option<PathBuf>,
}

/// The collection's common flags, validated.
struct Common {
    host: Host,
    scrape_workers: usize,
    log_level: Level,
    log_format: LogFormat,
    enabled: Vec<&'static str>,
}

/// The most connections (and so scrapes) allowed: Linux's default ceiling on open files
/// (`fs.nr_open`).
const MAX_CONNECTIONS: u64 = 1 << 20;
/// The longest scrape deadline: Prometheus' own scrape timeouts are seconds to minutes.
const MAX_SCRAPE_TIMEOUT: Duration = Duration::from_secs(3600);
/// The most workers a scrape may have: its reads are system calls, a few CPUs' worth at most.
const MAX_SCRAPE_WORKERS: u64 = 16;

fn validate_web(raw: RawWeb) -> Result<Web, ConfigError> {
    let telemetry_path = raw.telemetry_path.clone();
    if !telemetry_path.starts_with('/')
        || telemetry_path == "/"
        || telemetry_path.starts_with("/-/")
    {
        return Err(invalid(
            "web.telemetry-path",
            &telemetry_path,
            "must start with '/' and must not be '/' or start with '/-/'",
        ));
    }
    let (max_requests, max_connections) = connection_limits(&raw)?;
    let listen = listen(&raw)?;
    Ok(Web {
        listen,
        telemetry_path,
        max_requests,
        max_connections,
        web_config_file: (!raw.web_config_file.is_empty()).then(|| raw.web_config_file.into()),
    })
}

fn validate_collection(raw: RawCollection) -> Result<Common, ConfigError> {
    let path = |flag: &str, value: String| {
        if value.is_empty() {
            Err(ConfigError::EmptyPath {
                flag: format!("--{flag}"),
            })
        } else {
            Ok(PathBuf::from(value))
        }
    };
    let scrape_timeout = parse_duration_at_most(&raw.scrape_timeout, MAX_SCRAPE_TIMEOUT)
        .map_err(|reason| invalid("scrape.timeout", &raw.scrape_timeout, &reason.to_string()))?;
    let scrape_workers = parse_number(&raw.scrape_workers, 1, MAX_SCRAPE_WORKERS)
        .map(|n| n as usize)
        .map_err(|reason| invalid("scrape.workers", &raw.scrape_workers, &reason.to_string()))?;
    Ok(Common {
        host: Host {
            sysfs: path("path.sysfs", raw.sysfs)?,
            procfs: path("path.procfs", raw.procfs)?,
            rootfs: path("path.rootfs", raw.rootfs)?,
            scrape_timeout,
            vfio_holder_events: Default::default(),
        },
        scrape_workers,
        log_level: Level::parse(&raw.log_level).ok_or_else(|| {
            invalid(
                "log.level",
                &raw.log_level,
                "one of debug, info, warn, error",
            )
        })?,
        log_format: LogFormat::parse(&raw.log_format)
            .ok_or_else(|| invalid("log.format", &raw.log_format, "one of logfmt, json"))?,
        enabled: raw.enabled,
    })
}

/// The error for a common flag's value.
fn invalid(flag: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        flag: format!("--{flag}"),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// `--web.max-requests` and `--web.max-connections`. One connection stays free for the health
/// checks: a max-requests given beyond that is refused; the default gives way to a lower
/// max-connections.
fn connection_limits(raw: &RawWeb) -> Result<(usize, usize), ConfigError> {
    let count = |flag: &str, value: &str, min: u64| {
        parse_number(value, min, MAX_CONNECTIONS)
            .map(|n| n as usize)
            .map_err(|reason| invalid(flag, value, &reason.to_string()))
    };
    let max_requests = count("web.max-requests", &raw.max_requests, 0)?;
    let max_connections = count("web.max-connections", &raw.max_connections, 2)?;
    let max_requests = match max_requests {
        n if n < max_connections => n,
        _ if raw.max_requests_given => {
            return Err(invalid(
                "web.max-requests",
                &raw.max_requests,
                &format!(
                    "must be at most one below --web.max-connections ({max_connections}), or 0"
                ),
            ))
        }
        _ => max_connections - 1,
    };
    Ok((max_requests, max_connections))
}

/// Where to listen: systemd's sockets, or every `--web.listen-address` given.
fn listen(raw: &RawWeb) -> Result<Listen, ConfigError> {
    if raw.systemd_socket {
        return Ok(Listen::Systemd);
    }
    let address = |value: &String| {
        parse_listen_address(value).map_err(|reason| invalid("web.listen-address", value, reason))
    };
    let addresses = raw.listen_addresses.iter().map(address);
    Ok(Listen::Addresses(addresses.collect::<Result<_, _>>()?))
}

#[cfg(test)]
mod tests;

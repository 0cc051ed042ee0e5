//! `hpcnode_exporter check`: one run of the node-readiness checks, for Slurm's
//! `HealthCheckProgram` and LBNL NHC. It collects itself, once, with the exporter's own flags
//! and scraper (`--path.*`, `--collector.*`), or reads a running exporter's page (`--from URL`,
//! no privileges needed); either way it judges Prometheus text, as [`checks`] says, and prints
//! one line per failure on stdout, `ERROR: hpcnode: <check> <device>: <reason>`, nothing when
//! the node is fine. `--checks FILE` says which checks count ([`config`]).
//!
//! It cannot say a node is fine when it could not look: a page it cannot have or read, or one
//! where a collector a check reads failed (`hpcnode_scrape_collector_success 0`), is "cannot
//! tell", told on stderr; real failures on the same page still count. `main` turns the verdict
//! into the exit code: 0 fine, 1 failures, 2 a bad command line or file, 3 cannot tell.

pub mod checks;
pub mod config;
pub mod from;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Arg, Command};

use crate::collector::{Registration, StartError};
use crate::config::{clap_verdict, collection, with_collection_args, Collection};
use crate::exposition::{self, ExpositionError, Sample};
use crate::flags::{flag, optional, ConfigError, Flags};
use crate::http::client::ClientError;
use crate::logging::{Level, LogFormat};
use crate::metrics::{encode, Format};
use crate::scrape::{Scraper, Selection};
use checks::Page;
use config::{ChecksFileError, Chosen};
use from::{Client, FromConfigError, Source};

const FROM: &str = "from";
const FROM_CONFIG: &str = "from.config";
const FROM_TIMEOUT: &str = "from.timeout";
const CHECKS: &str = "checks";
/// Slurm kills a `HealthCheckProgram` after 60 s: a check must have answered well before.
const MAX_FROM_TIMEOUT: Duration = Duration::from_secs(50);
/// How often a self-collecting check looks again while a check's page is still being read.
const PENDING_LOOK: Duration = Duration::from_millis(100);

/// What parsing `check`'s command line led to.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<CheckRun>),
    /// `--help` or `--version`: print this and exit 0.
    Print(String),
}

/// One run of the checks, its flags validated.
#[derive(Debug)]
pub struct CheckRun {
    page: PageSource,
    checks_file: PathBuf,
    /// `--checks` was given: an absent file is an error, not the built-in checks.
    checks_file_given: bool,
    pub log_level: Level,
    pub log_format: LogFormat,
}

#[derive(Debug)]
enum PageSource {
    /// Collect once, in this process.
    Collect(Collection),
    Remote {
        source: Source,
        config: Option<PathBuf>,
        timeout: Duration,
    },
}

/// A command line or a file that is not right: exit 2.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    Flags(#[from] ConfigError),
    #[error("--checks: {0}")]
    ChecksFile(#[from] ChecksFileError),
    #[error("--from.config: {0}")]
    FromConfig(#[from] FromConfigError),
}

/// No page to judge: exit 3.
#[derive(Debug, thiserror::Error)]
pub enum CannotTell {
    #[error("--from {url}: {err}")]
    Fetch { url: String, err: ClientError },
    #[error("the page of {from}: {err}")]
    Page { from: String, err: ExpositionError },
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("encoding the scrape: {0}")]
    Encode(fmt::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    CannotTell(#[from] CannotTell),
}

/// What one run found.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub failures: Vec<Failure>,
    /// Why some check could not tell, one line each.
    pub cannot_tell: Vec<String>,
    /// Some check's page was still being read (see [`checks::Check::pending`]).
    pending: bool,
}

/// One failure, printed as its own line.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub check: &'static str,
    pub device: String,
    pub reason: String,
}

impl fmt::Display for Failure {
    /// `ERROR: hpcnode: <check> <device>: <reason>`, one line whatever the page held: a control
    /// character in a label value is shown as `?`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one_line = |text: &str| -> String {
            text.chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect()
        };
        write!(
            f,
            "ERROR: hpcnode: {} {}: {}",
            self.check,
            one_line(&self.device),
            one_line(&self.reason)
        )
    }
}

/// The `check` command line: its own flags, then the exporter's collection flags (the roots,
/// the scrape, the log, every collector's); also what the man page's `check` section is made of.
pub fn command(registry: &[Registration]) -> Command {
    let command = Command::new("hpcnode_exporter check")
        .bin_name("hpcnode_exporter check")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Run the node-readiness checks once (Slurm HealthCheckProgram, NHC): one line per failure on stdout; exit 0 fine, 1 failures, 2 usage, 3 cannot tell.")
        .args(check_args());
    // A health check's log is for its warnings: info lines would only fill slurmd's.
    with_collection_args(command, registry).mut_arg("log.level", |arg| arg.default_value("warn"))
}

fn check_args() -> [Arg; 4] {
    [
        optional(FROM, "URL", "Read a running exporter's page (http:// or https://; /metrics when the URL names no path) instead of collecting in this process; the collection flags are then refused."),
        optional(FROM_CONFIG, "FILE", "With --from: a Prometheus scrape config's tls_config (ca_file, cert_file, key_file, server_name, insecure_skip_verify) and basic_auth (username, password_file) in YAML; needed for https."),
        flag(FROM_TIMEOUT, "10s", "With --from: the longest the whole request may take, at most 50s (Slurm kills a health check at 60 s).").value_name("DURATION"),
        flag(CHECKS, config::DEFAULT_PATH, "Which checks count, their thresholds and the devices they ignore (YAML). The default path may be absent (every check as built in); a file given must exist.").value_name("FILE"),
    ]
}

/// Parses `hpcnode_exporter check ...` (`args[1]` is `check`).
pub fn parse(
    args: &[OsString],
    registry: &'static [Registration],
) -> Result<Invocation, UsageError> {
    let args = args.get(1..).unwrap_or_default();
    let mut command = command(registry);
    let flags = match command.try_get_matches_from_mut(args) {
        Ok(matches) => Flags(matches),
        Err(err) => return Ok(Invocation::Print(clap_verdict(err)?)),
    };
    let collection = collection(&command, args, &flags, registry)?;
    let (log_level, log_format) = (collection.log_level, collection.log_format);
    let page = match flags.value(FROM) {
        None => {
            if let Some(id) = [FROM_CONFIG, FROM_TIMEOUT]
                .into_iter()
                .find(|id| flags.given(id))
            {
                return Err(ConfigError::Flags(format!("--{id} needs --from")).into());
            }
            PageSource::Collect(collection)
        }
        Some(url) => {
            refuse_collection_flags(&command, &flags)?;
            let source = Source::parse(&url).map_err(|reason| flags.invalid(FROM, &url, reason))?;
            PageSource::Remote {
                source,
                config: flags.path(FROM_CONFIG)?,
                timeout: flags
                    .duration(FROM_TIMEOUT, MAX_FROM_TIMEOUT)?
                    .unwrap_or_default(),
            }
        }
    };
    Ok(Invocation::Run(Box::new(CheckRun {
        page,
        checks_file: flags
            .path(CHECKS)?
            .unwrap_or_else(|| config::DEFAULT_PATH.into()),
        checks_file_given: flags.given(CHECKS),
        log_level,
        log_format,
    })))
}

/// With `--from` nothing is collected here: a collection flag given as well is a mistake
/// (a check of another tree than the user meant), refused rather than ignored.
fn refuse_collection_flags(command: &Command, flags: &Flags) -> Result<(), ConfigError> {
    let own = [
        FROM,
        FROM_CONFIG,
        FROM_TIMEOUT,
        CHECKS,
        "log.level",
        "log.format",
    ];
    let given = command
        .get_arguments()
        .map(|arg| arg.get_id().as_str())
        .find(|id| !own.contains(id) && flags.given(id));
    match given {
        Some(id) => Err(ConfigError::Flags(format!(
            "--{id} cannot be used with --from: the page is collected by the exporter --from names"
        ))),
        None => Ok(()),
    }
}

impl CheckRun {
    /// Reads the checks file, has the page and judges it.
    pub fn run(self) -> Result<Verdict, CheckError> {
        let chosen =
            config::load(&self.checks_file, self.checks_file_given).map_err(UsageError::from)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .thread_name("hpcnode-check")
            .enable_all()
            .build()
            .map_err(CannotTell::Runtime)?;
        let verdict = self.page.judge(&runtime, &chosen);
        // Not waiting for what is still on the blocking pool: a name look-up past the timeout,
        // a read hung in a driver past the scrape's deadline.
        runtime.shutdown_background();
        verdict
    }
}

impl PageSource {
    fn judge(
        self,
        runtime: &tokio::runtime::Runtime,
        chosen: &[Chosen],
    ) -> Result<Verdict, CheckError> {
        match self {
            PageSource::Remote {
                source,
                config,
                timeout,
            } => {
                let client = Client::load(&source, config.as_deref()).map_err(UsageError::from)?;
                let text = runtime
                    .block_on(from::fetch(&source, &client, timeout))
                    .map_err(|err| CannotTell::Fetch {
                        url: source.url.clone(),
                        err,
                    })?;
                let samples = read_page(&text, &source.url)?;
                Ok(judge(&samples, chosen))
            }
            PageSource::Collect(collection) => {
                let enabled = (collection.collectors.into_iter())
                    .map(|enabled| (enabled.registration, enabled.settings));
                let host = &collection.host;
                let scraper = Scraper::start(enabled, host, collection.scrape_workers)
                    .map_err(CannotTell::from)?;
                let verdict = collect_and_judge(runtime, &scraper, chosen, host.scrape_timeout);
                scraper.stop();
                verdict
            }
        }
    }
}

/// Scrapes, as the exporter would serve the page, and judges it; again, within `patience`,
/// while a check's page is still being read.
fn collect_and_judge(
    runtime: &tokio::runtime::Runtime,
    scraper: &Scraper,
    chosen: &[Chosen],
    patience: Duration,
) -> Result<Verdict, CheckError> {
    let until = Instant::now() + patience;
    loop {
        let samples = runtime.block_on(scraper.scrape(&Selection::All));
        let text = encode(samples, Format::PrometheusText).map_err(CannotTell::Encode)?;
        let verdict = judge(&read_page(&text, "this process's scrape")?, chosen);
        if !verdict.pending || Instant::now() + PENDING_LOOK > until {
            return Ok(verdict);
        }
        std::thread::sleep(PENDING_LOOK);
    }
}

fn read_page(text: &str, from: &str) -> Result<Vec<Sample>, CannotTell> {
    exposition::parse(text).map_err(|err| CannotTell::Page {
        from: from.to_string(),
        err,
    })
}

/// The checks `chosen` on a page's samples.
pub fn judge(samples: &[Sample], chosen: &[Chosen]) -> Verdict {
    let page = Page::new(samples);
    let failed_collectors: Vec<&str> = samples
        .iter()
        .filter(|s| s.name == "hpcnode_scrape_collector_success" && s.value == 0.0)
        .map(|s| s.label("collector"))
        .collect();
    let mut verdict = Verdict::default();
    let mut unsettled: Vec<(&str, Vec<&str>)> = Vec::new();
    for choice in chosen.iter().filter(|choice| choice.enabled) {
        let check = choice.check;
        if failed_collectors.contains(&check.collector) {
            match unsettled.iter_mut().find(|(c, _)| *c == check.collector) {
                Some((_, names)) => names.push(check.name),
                None => unsettled.push((check.collector, vec![check.name])),
            }
        }
        if let Some(reason) = (check.pending)(&page) {
            verdict.pending = true;
            verdict
                .cannot_tell
                .push(format!("{}: {reason}", check.name));
        }
        let mut findings = (check.judge)(&page, choice.threshold);
        findings.retain(|finding| !choice.ignores(&finding.device));
        findings.sort_by(|a, b| (&a.device, &a.reason).cmp(&(&b.device, &b.reason)));
        findings.dedup();
        verdict
            .failures
            .extend(findings.into_iter().map(|finding| Failure {
                check: check.name,
                device: finding.device,
                reason: finding.reason,
            }));
    }
    for (collector, names) in unsettled {
        verdict.cannot_tell.push(format!(
            "the {collector} collector failed on this page (hpcnode_scrape_collector_success 0), so {} cannot say the node is fine",
            names.join(", ")
        ));
    }
    verdict
}

#[cfg(test)]
mod tests;

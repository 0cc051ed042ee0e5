//! Entry point: flags -> validated config -> listeners -> start the collectors -> serve -> stop
//! them. The one place that maps errors to exit codes: 2 for a bad command line, 3 for a
//! listener it cannot have (the port is taken, no socket from systemd), 1 for a failure to start
//! (`--collector.ebpf.strict` with a probe missing) or a second SIGTERM or SIGINT that cut
//! shutdown short; for `probe <name>`, 1 when the probe fails or does not pass; for `check`,
//! 0 healthy, 1 unhealthy, 2 usage, 3 cannot tell (`check_main`).
//! Also the one place that handles signals and the process's own limits.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hpcnode_exporter::check::{self, CheckError};
use hpcnode_exporter::collector::Host;
use hpcnode_exporter::collectors;
use hpcnode_exporter::config::{self, Config, Invocation, Listen};
use hpcnode_exporter::http::{self, Limits, ListenError, Server};
use hpcnode_exporter::logging::{self, Level};
use hpcnode_exporter::privileges::{self, StillNeeded};
use hpcnode_exporter::scrape::Scraper;
use hpcnode_exporter::sysfs::HeldBudget;
use hpcnode_exporter::web_config::WebConfigFile;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == "check") {
        return check_main(&args);
    }
    let config = match config::parse(args, &collectors::ALL) {
        Ok(Invocation::Run(config)) => config,
        Ok(Invocation::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::Probe { name, probe }) => {
            return match probe.run() {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(err) => {
                    eprintln!("hpcnode_exporter: probe {name}: {err}");
                    ExitCode::from(1)
                }
            };
        }
        Err(err) => {
            eprintln!("hpcnode_exporter: error: {err}");
            return ExitCode::from(2);
        }
    };
    // Read and validated before anything starts: a broken file is a bad command line.
    let web_config = match config.web_config_file.as_deref().map(WebConfigFile::open) {
        None => None,
        Some(Ok(web)) => Some(web),
        Some(Err(err)) => {
            eprintln!("hpcnode_exporter: error: --web.config.file: {err}");
            return ExitCode::from(2);
        }
    };
    tune_malloc();
    let _flush_log_at_exit =
        logging::init(config.collection.log_level, config.collection.log_format);
    for renamed in &config.collection.deprecated {
        logging::log(
            Level::Warn,
            "deprecated flag spelling; it will be removed, use the new one",
            &[
                ("flag", &format!("--{}", renamed.old)),
                ("use", &format!("--{}", renamed.new)),
            ],
        );
    }
    match run(*config, web_config) {
        Ok(Stopped::Gracefully) => ExitCode::SUCCESS,
        Ok(Stopped::Forced) => ExitCode::from(1),
        Err(err) => {
            logging::log(Level::Error, "exiting", &[("err", &format!("{err:#}"))]);
            // Its own code, for the unit's RestartPreventExitStatus=: a restart frees no port.
            match err.downcast_ref::<ListenError>() {
                Some(_) => ExitCode::from(3),
                None => ExitCode::from(1),
            }
        }
    }
}

/// `hpcnode_exporter check`: the failures on stdout, one line each; why it cannot tell on stderr.
/// 0: healthy; 1: failures (whatever else it could not tell); 2: a bad command line, checks
/// file or --from.config; 3: it cannot tell (no page, a page it cannot read, a collector a
/// check reads failed), which Slurm's glue must not take for a failure.
fn check_main(args: &[OsString]) -> ExitCode {
    let run = match check::parse(args, &collectors::ALL) {
        Ok(check::Invocation::Run(run)) => run,
        Ok(check::Invocation::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("hpcnode_exporter check: error: {err}");
            return ExitCode::from(2);
        }
    };
    let _flush_log_at_exit = logging::init(run.log_level, run.log_format);
    let verdict = match run.run() {
        Ok(verdict) => verdict,
        Err(CheckError::Usage(err)) => {
            eprintln!("hpcnode_exporter check: error: {err}");
            return ExitCode::from(2);
        }
        Err(CheckError::CannotTell(err)) => {
            eprintln!("hpcnode_exporter check: cannot tell: {err}");
            return ExitCode::from(3);
        }
    };
    for failure in &verdict.failures {
        println!("{failure}");
    }
    for reason in &verdict.cannot_tell {
        eprintln!("hpcnode_exporter check: cannot tell: {reason}");
    }
    match (verdict.failures.is_empty(), verdict.cannot_tell.is_empty()) {
        (false, _) => ExitCode::from(1),
        (true, false) => ExitCode::from(3),
        (true, true) => ExitCode::SUCCESS,
    }
}

/// Keeps glibc's malloc to one arena unless `MALLOC_ARENA_MAX` says otherwise. glibc gives a
/// thread that allocates while the others hold their arenas an arena of its own (up to eight
/// per core) and keeps what each one freed: in the 30-minute soak (tests/bench/soak.py) RSS
/// stepped up about 2 MiB with every new blocking-pool thread, 19.9 to 27.9 MiB. Two arenas
/// still left a scrape's freed memory in the second: one arena took peak RSS to 0.92x (N = 16)
/// and 0.84x (N = 64) of two in tests/bench/scrape_bench.py, at the same CPU per scrape
/// (0.99x): scrapes allocate little, and one at a time.
///
/// And keeps its mmap and trim thresholds at their defaults (128 KiB) unless
/// `MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_` say otherwise: glibc raises them to the
/// size of the largest mmapped block freed (twice that for trimming), and the start frees the
/// kernel's BTF, read whole (5.5 MiB for a 6.18 kernel): from then on nothing under 5.5 MiB was
/// mmapped and the heap's top not trimmed under 11 MiB, so a scrape's freed buffers stayed
/// resident (glibc's malloc_stats on the node bench: 11.2 MB of heap, 2.9 MB in use).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (variable, parameter, value) in [
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 1),
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 128 * 1024),
        ("MALLOC_TRIM_THRESHOLD_", libc::M_TRIM_THRESHOLD, 128 * 1024),
    ] {
        if std::env::var_os(variable).is_none() {
            // SAFETY: mallopt only sets an allocator parameter, under glibc's own lock; it is
            // called before any thread of ours allocates.
            unsafe { libc::mallopt(parameter, value) };
        }
    }
}

/// How serving ended.
enum Stopped {
    /// SIGTERM or SIGINT, and in-flight requests finished (or the grace period ran out).
    Gracefully,
    /// A second SIGTERM or SIGINT while in-flight requests were finishing.
    Forced,
}

fn run(config: Config, web_config: Option<Arc<WebConfigFile>>) -> anyhow::Result<Stopped> {
    // One thread for connections and encoding: reads run on the blocking pool, and a second
    // async thread only cost each scrape hand-offs between the two (scrape_bench: 0.93x the
    // CPU per scrape at N = 16).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name("hpcnode-worker")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // From here on SIGHUP (a reload, to node_exporter's Debian unit) no longer kills the process.
    let hangup = {
        let _runtime = runtime.enter();
        signal(SignalKind::hangup()).context("installing SIGHUP handler")?
    };
    // Before anything slow or privileged starts: a port in use fails the start at once.
    let listeners = runtime.block_on(listen(&config.listen))?;
    let open_files = raise_open_file_limit();
    if open_files
        .is_some_and(|limit| limit < config.max_connections as u64 + FDS_BESIDE_CONNECTIONS)
    {
        logging::log(
            Level::Warn,
            "the open file limit leaves less than --web.max-connections for connections; accepts fail beyond it",
            &[
                ("open_files", &open_files.unwrap_or_default().to_string()),
                ("max_connections", &config.max_connections.to_string()),
            ],
        );
    }
    // Held sysfs descriptors get what connections and the exporter's own files leave.
    let connections = config.max_connections as u64 + FDS_BESIDE_CONNECTIONS;
    HeldBudget::set_process(open_files.map(|limit| limit.saturating_sub(connections)));
    // Collectors start (probes attach, sockets bind, threads start) before serving, so a
    // failure to start fails the process, not a later scrape.
    let collection = config.collection;
    let calls_bpf =
        (collection.collectors.iter()).any(|enabled| enabled.settings.calls_bpf_after_start());
    let enabled =
        (collection.collectors.into_iter()).map(|enabled| (enabled.registration, enabled.settings));
    let scraper = Scraper::start(enabled, &collection.host, collection.scrape_workers)?;
    let scraper = Arc::new(scraper);
    let server = Arc::new(Server::new(
        scraper.clone(),
        config.telemetry_path,
        Limits {
            max_requests: config.max_requests,
            max_connections: config.max_connections,
        },
        web_config,
    ));
    let names: Vec<_> = scraper.collector_names().collect();
    let result = runtime.block_on(serve(
        server,
        listeners,
        &collection.host,
        &names,
        calls_bpf,
        hangup,
    ));
    scraper.stop();
    match result {
        // A collector thread stuck in a hung driver read must not keep the process alive.
        Ok(Stopped::Gracefully) => runtime.shutdown_timeout(Duration::from_secs(1)),
        _ => runtime.shutdown_background(),
    }
    result
}

/// Once the collectors have started and the listener is bound, gives up the capabilities that
/// only the start needed (see `privileges`), and says which it kept: `calls_bpf` when a
/// started collector still calls `bpf()`.
fn drop_start_only_capabilities(host: &Host, calls_bpf: bool) {
    let still_needed = StillNeeded::read(&host.procfs, calls_bpf);
    match privileges::drop_after_start(still_needed) {
        Ok(outcome) if outcome.dropped.is_empty() => {}
        Ok(outcome) => logging::log(
            Level::Info,
            "dropped the capabilities only the start needed",
            &[
                ("dropped", &outcome.dropped.to_string()),
                ("kept", &outcome.kept.to_string()),
                ("threads", &outcome.threads.to_string()),
            ],
        ),
        Err(err) => logging::log(
            Level::Warn,
            "the capabilities only the start needed are not dropped on every thread",
            &[("err", &err.to_string())],
        ),
    }
}

/// File descriptors the exporter needs besides its connections: collectors' reads, probes,
/// libraries, the listener, stdio.
const FDS_BESIDE_CONNECTIONS: u64 = 64;

/// Raises the soft limit on open files to the hard one, as Go programs do at startup: the soft
/// default (1024 under systemd) is for programs that use `select(2)`, which this one does not.
/// Returns the soft limit now in force (`None`: unlimited).
fn raise_open_file_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        logging::log(
            Level::Debug,
            "open file limit already at its hard limit",
            &[("limit", &describe_limit(limit.current))],
        );
        return limit.current;
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            logging::log(
                Level::Info,
                "raised the open file limit to its hard limit",
                &[
                    ("from", &describe_limit(limit.current)),
                    ("to", &describe_limit(limit.maximum)),
                ],
            );
            limit.maximum
        }
        Err(err) => {
            logging::log(
                Level::Warn,
                "cannot raise the open file limit",
                &[
                    ("limit", &describe_limit(limit.current)),
                    ("err", &err.to_string()),
                ],
            );
            limit.current
        }
    }
}

fn describe_limit(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_string(), |n| n.to_string())
}

/// The listeners `--web.listen-address` or `--web.systemd-socket` asks for.
async fn listen(listen: &Listen) -> Result<Vec<TcpListener>, ListenError> {
    match listen {
        Listen::Systemd => http::systemd_sockets(),
        Listen::Addresses(addresses) => {
            let mut listeners = Vec::with_capacity(addresses.len());
            for address in addresses {
                listeners.push(http::bind(address.host.as_deref(), address.port).await?);
            }
            Ok(listeners)
        }
    }
}

async fn serve(
    server: Arc<Server>,
    listeners: Vec<TcpListener>,
    host: &Host,
    collectors: &[&str],
    calls_bpf: bool,
    mut hangup: Signal,
) -> anyhow::Result<Stopped> {
    let mut terminate = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    for listener in &listeners {
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        logging::log(
            Level::Info,
            "listening",
            &[
                ("address", &local),
                ("version", env!("CARGO_PKG_VERSION")),
                ("collectors", &collectors.join(",")),
                ("sysfs", &host.sysfs.display().to_string()),
                ("procfs", &host.procfs.display().to_string()),
                ("rootfs", &host.rootfs.display().to_string()),
            ],
        );
    }
    drop_start_only_capabilities(host, calls_bpf);
    privileges::mark_settled();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = server.serve(listeners, async {
        let _ = stopped.await;
    });
    tokio::pin!(serving);
    let mut stop = Some(stop);
    loop {
        let name = tokio::select! {
            () = &mut serving => return Ok(Stopped::Gracefully),
            _ = hangup.recv() => {
                logging::log(
                    Level::Info,
                    "SIGHUP received; nothing to reload",
                    &[(
                        "note",
                        "flags and the verbs token file take effect at a restart; the trees under --path.* and the Nova configs are read at every scrape, the --web.config.file whenever it changes",
                    )],
                );
                continue;
            }
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        match stop.take() {
            Some(stop) => {
                logging::log(
                    Level::Info,
                    "shutting down; finishing in-flight requests (signal again to exit at once)",
                    &[("signal", name)],
                );
                let _ = stop.send(());
            }
            None => {
                logging::log(
                    Level::Warn,
                    "exiting at once; in-flight requests abandoned",
                    &[("signal", name)],
                );
                return Ok(Stopped::Forced);
            }
        }
    }
}

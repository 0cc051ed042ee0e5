//! Entry point: flags -> validated config -> serve. The one place that maps errors to exit codes:
//! 2 for a bad command line, 1 for a failure to start (e.g. the port is taken); for
//! `probe verbs`, 1 when the probe fails or falls below `--min-ratio`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hpcnode_exporter::collector::Scraper;
use hpcnode_exporter::config::{self, Config, Invocation, VerbsProbeCommand};
use hpcnode_exporter::collectors::ebpf;
use hpcnode_exporter::http::{self, Server};
use hpcnode_exporter::logging::{self, Level};
use hpcnode_exporter::collectors::verbs;
use tokio::signal::unix::{signal, SignalKind};

fn main() -> ExitCode {
    let config = match config::parse(std::env::args_os()) {
        Ok(Invocation::Run(config)) => config,
        Ok(Invocation::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::ProbeVerbs(command)) => return probe_verbs(&command),
        Err(err) => {
            eprintln!("hpcnode_exporter: error: {err}");
            return ExitCode::from(2);
        }
    };
    logging::init(config.log_level, config.log_format);
    match run(*config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            logging::log(Level::Error, "exiting", &[("err", &format!("{err:#}"))]);
            ExitCode::from(1)
        }
    }
}

fn run(config: Config) -> anyhow::Result<()> {
    // Probes attach before serving, so --ebpf.strict fails the start, not a later scrape.
    if config.collectors.iter().any(|c| c.name == "ebpf") {
        let probes = ebpf::start(&config);
        if config.ebpf_strict {
            probes.require_all_attached()?;
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hpcnode-worker")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(serve(config));
    // A collector thread stuck in a hung driver read must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let mut terminate = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let address = &config.listen_address;
    let listener = http::bind(address.host.as_deref(), address.port)
        .await
        .with_context(|| {
            format!(
                "listening on {}:{}",
                address.host.as_deref().unwrap_or(""),
                address.port
            )
        })?;
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let collectors: Vec<_> = config.collectors.iter().map(|c| c.name).collect();
    logging::log(
        Level::Info,
        "listening",
        &[
            ("address", &local),
            ("version", env!("CARGO_PKG_VERSION")),
            ("collectors", &collectors.join(",")),
            ("sysfs", &config.sysfs.display().to_string()),
            ("procfs", &config.procfs.display().to_string()),
            ("rootfs", &config.rootfs.display().to_string()),
        ],
    );
    let server = Arc::new(Server::new(
        Scraper::from_config(&config),
        config.telemetry_path.clone(),
        config.max_requests,
    ));
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        logging::log(
            Level::Info,
            "shutting down; finishing in-flight requests",
            &[],
        );
    };
    server.serve(listener, shutdown).await;
    Ok(())
}

/// `probe verbs`: one probe now, progress on stderr, ib_write_bw's table on stdout.
fn probe_verbs(command: &VerbsProbeCommand) -> ExitCode {
    match run_probe_verbs(command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("hpcnode_exporter: probe verbs: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// Whether the probe passed `--min-ratio` (always, without one).
fn run_probe_verbs(command: &VerbsProbeCommand) -> anyhow::Result<bool> {
    let library = Arc::new(verbs::ffi::Verbs::load(&command.library)?);
    let device = match &command.device {
        Some(device) => device.clone(),
        None => verbs::first_device(&command.sysfs)
            .context("no RDMA device under the sysfs class/infiniband directory")?,
    };
    let target = verbs::Target {
        sysfs: command.sysfs.clone(),
        device,
        port: command.port,
        gid_index: command.gid_index,
    };
    let mode = command.peer.as_deref().unwrap_or("loopback");
    eprintln!(
        "probing {}/{} ({mode}): {} bytes x {} in flight for {:?}",
        target.device,
        target.port,
        command.params.message_size,
        command.params.queue_depth,
        command.params.duration
    );
    let report = verbs::probe(
        &library,
        &target,
        command.peer.as_deref(),
        command.token.as_deref().unwrap_or_default(),
        &command.params,
        &mut |progress| eprint!("\r{}", verbs::progress_line(&progress)),
    )
    .with_context(|| format!("{}/{}", target.device, target.port));
    eprintln!();
    let report = report?;
    print!("{}", verbs::result_table(&report));
    let Some(min_ratio) = command.min_ratio else {
        return Ok(true);
    };
    let ratio = report
        .efficiency()
        .context("--min-ratio given but the port's data rate is unknown")?;
    let passed = ratio >= min_ratio;
    println!(
        "{}: efficiency {ratio:.3} {} --min-ratio {min_ratio}",
        if passed { "PASS" } else { "FAIL" },
        if passed { ">=" } else { "<" }
    );
    Ok(passed)
}

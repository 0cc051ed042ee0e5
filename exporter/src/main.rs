//! Entry point: flags -> validated config -> serve. The one place that maps errors to exit codes:
//! 2 for a bad command line, 1 for a failure to start (e.g. the port is taken).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hpcnode_exporter::collector::Scraper;
use hpcnode_exporter::config::{self, Config, Invocation};
use hpcnode_exporter::ebpf;
use hpcnode_exporter::http::{self, Server};
use hpcnode_exporter::logging::{self, Level};
use tokio::signal::unix::{signal, SignalKind};

fn main() -> ExitCode {
    let config = match config::parse(std::env::args_os()) {
        Ok(Invocation::Run(config)) => config,
        Ok(Invocation::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
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

//! Adding a collector, as ARCHITECTURE.md says to: one module (here, the `greeter` below, with
//! one flag, its settings, a start and a stop) and one row in a registry list. The list goes
//! through the same path `main` uses: the command line is parsed against it, the enabled
//! collectors start, the scraper runs them, and they stop.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hpcnode_exporter::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use hpcnode_exporter::collectors;
use hpcnode_exporter::config::{self, Invocation};
use hpcnode_exporter::flags::{flag, ConfigError, Flags};
use hpcnode_exporter::metrics::{encode, Desc, Format, Value};
use hpcnode_exporter::scrape::{Scraper, Selection};

/// The whole collector: what a new module under `exporter/src/collectors/` would hold.
mod greeter {
    use super::*;

    pub const REGISTRATION: Registration = Registration {
        name: "greeter",
        enabled_by_default: false,
        help: "Says a word per listener.",
        metrics: &[GREETINGS],
        roots: &[Root::Rootfs],
        flags: || vec![flag(WORD, "hello", "The word to say.")],
        configure: |flags| Ok(Box::new(GreeterSettings::from_flags(flags)?)),
        probe: None,
    };

    const WORD: &str = "collector.greeter.word";

    const GREETINGS: Desc = Desc::gauge("hpcnode_greeter_greeting", "A greeting.", None);

    #[derive(Debug)]
    struct GreeterSettings {
        word: String,
    }

    impl GreeterSettings {
        fn from_flags(flags: &Flags) -> Result<GreeterSettings, ConfigError> {
            let word = flags.value(WORD).unwrap_or_default();
            if !word.chars().all(|c| c.is_ascii_alphabetic()) {
                return Err(flags.invalid(WORD, &word, "letters only"));
            }
            Ok(GreeterSettings { word })
        }
    }

    /// Set by a greeter's stop: what a real collector's threads and sockets would watch.
    pub static STOPPED: AtomicBool = AtomicBool::new(false);

    impl Settings for GreeterSettings {
        fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
            if !host.rootfs.is_dir() {
                return Err(StartError {
                    collector: REGISTRATION.name,
                    reason: format!("{} is not a directory", host.rootfs.display()),
                });
            }
            Ok(Started::new(Greeter { word: self.word }))
        }
    }

    struct Greeter {
        word: String,
    }

    /// Two listeners, each a unit.
    #[derive(Debug)]
    pub enum Listener {
        Left,
        Right,
    }

    impl fmt::Display for Listener {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl Collector for Greeter {
        type Unit = Listener;

        fn units(&self) -> Result<Vec<Listener>, CollectError> {
            Ok(vec![Listener::Left, Listener::Right])
        }

        fn collect_unit(&self, unit: &Listener, out: &mut Output) {
            out.samples.push(
                &GREETINGS,
                vec![
                    ("word", self.word.clone().into()),
                    ("listener", unit.to_string().into()),
                ],
                Value::Int(1),
            );
        }

        fn stop(&self) {
            STOPPED.store(true, Ordering::SeqCst);
        }
    }
}

/// The registry with one more row.
static REGISTRY: [Registration; 2] = [collectors::rdma::REGISTRATION, greeter::REGISTRATION];

fn parse(args: &[&str]) -> Result<config::Config, ConfigError> {
    let argv = std::iter::once("hpcnode_exporter").chain(args.iter().copied());
    match config::parse(argv, &REGISTRY)? {
        Invocation::Run(config) => Ok(*config),
        _ => panic!("not a run"),
    }
}

#[test]
fn a_collector_added_by_one_row_gets_its_flags_settings_start_scrape_and_stop() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/procfs/sys");
    let sysfs = format!("--path.sysfs={fixtures}");
    let config = parse(&[
        "--collector.greeter",
        "--collector.greeter.word=moin",
        &sysfs,
    ])
    .unwrap();
    let names: Vec<_> = config
        .collection
        .collectors
        .iter()
        .map(|c| c.registration.name)
        .collect();
    assert_eq!(names, ["rdma", "greeter"]);

    let started = config
        .collection
        .collectors
        .into_iter()
        .map(|enabled| {
            let name = enabled.registration.name;
            (
                name,
                enabled.settings.start(&config.collection.host).unwrap(),
            )
        })
        .collect();
    let scraper = Arc::new(Scraper::new(
        started,
        config.collection.host.scrape_timeout,
        config.collection.scrape_workers,
    ));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = encode(
        runtime.block_on(scraper.scrape(&Selection::All)),
        Format::PrometheusText,
    )
    .unwrap();
    for line in [
        "hpcnode_greeter_greeting{word=\"moin\",listener=\"Left\"} 1",
        "hpcnode_greeter_greeting{word=\"moin\",listener=\"Right\"} 1",
        "hpcnode_scrape_collector_success{collector=\"greeter\"} 1",
        "hpcnode_scrape_collector_success{collector=\"rdma\"} 1",
        "hpcnode_rdma_port_state_id{device=\"mlx4_0\",port=\"1\"} 4",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(!greeter::STOPPED.load(Ordering::SeqCst));
    scraper.stop();
    assert!(greeter::STOPPED.load(Ordering::SeqCst));
}

#[test]
fn the_added_collector_is_off_by_default_and_its_flag_is_validated() {
    let names = |args: &[&str]| -> Vec<&str> {
        let config = parse(args).unwrap();
        config
            .collection
            .collectors
            .iter()
            .map(|c| c.registration.name)
            .collect()
    };
    assert_eq!(names(&[]), ["rdma"]);
    let err = parse(&["--collector.greeter.word=h1"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid --collector.greeter.word \"h1\": letters only"
    );
    let config = parse(&["--collector.greeter", "--path.rootfs=/nonexistent"]).unwrap();
    let greeter = config.collection.collectors.into_iter().nth(1).unwrap();
    let err = greeter.settings.start(&config.collection.host).unwrap_err();
    assert_eq!(
        err.to_string(),
        "starting the greeter collector: /nonexistent is not a directory"
    );
}

use super::*;
use crate::collector::{StartError, Started};
use clap::Arg;
use std::time::Duration;

/// A collector with one flag, registered the way every collector is.
#[derive(Debug)]
struct Greeting(String);

impl Settings for Greeting {
    fn start(self: Box<Self>, _host: &Host) -> Result<Started, StartError> {
        Err(StartError {
            collector: "greeter",
            reason: self.0,
        })
    }
}

fn greeter_flags() -> Vec<Arg> {
    vec![flag("collector.greeter.word", "hello", "The word.")]
}

fn greeter_settings(flags: &Flags) -> Result<Box<dyn Settings>, ConfigError> {
    let word = flags.value("collector.greeter.word").unwrap_or_default();
    if word.is_empty() {
        return Err(flags.invalid("collector.greeter.word", &word, "must not be empty"));
    }
    Ok(Box::new(Greeting(word)))
}

fn no_flags() -> Vec<Arg> {
    Vec::new()
}

fn no_settings(_flags: &Flags) -> Result<Box<dyn Settings>, ConfigError> {
    Ok(Box::new(Greeting(String::new())))
}

static REGISTRY: [Registration; 2] = [
    Registration {
        name: "greeter",
        enabled_by_default: true,
        help: "Says a word.",
        metrics: &[],
        roots: &[],
        flags: greeter_flags,
        configure: greeter_settings,
        probe: None,
    },
    Registration {
        name: "quiet",
        enabled_by_default: false,
        help: "Says nothing.",
        metrics: &[],
        roots: &[],
        flags: no_flags,
        configure: no_settings,
        probe: None,
    },
];

fn config(args: &[&str]) -> Result<Config, ConfigError> {
    let argv = std::iter::once("hpcnode_exporter").chain(args.iter().copied());
    match parse(argv, &REGISTRY)? {
        Invocation::Run(config) => Ok(*config),
        other => panic!("unexpected: {other:?}"),
    }
}

fn names(args: &[&str]) -> Vec<&'static str> {
    let config = config(args).unwrap();
    config
        .collection
        .collectors
        .iter()
        .map(|c| c.registration.name)
        .collect()
}

/// The default port is nobody else's: not in the Prometheus exporters' range (9100-9999, all
/// allocated on the wiki's list) and not in the system's `/etc/services` (10050, the old
/// default, is `zabbix-agent` there).
#[test]
fn the_default_port_is_in_no_allocation_list() {
    let Listen::Addresses(addresses) = config(&[]).unwrap().listen else {
        panic!("the default is an address");
    };
    let port = addresses[0].port;
    assert!(
        !(9100..=9999).contains(&port),
        "{port} is in the exporters' range"
    );
    let services = std::fs::read_to_string("/etc/services").expect("/etc/services (netbase)");
    let taken = services
        .lines()
        .filter_map(|line| line.split('#').next()?.split_whitespace().nth(1))
        .any(|port_and_protocol| port_and_protocol == format!("{port}/tcp"));
    assert!(!taken, "/etc/services assigns {port}/tcp");
}

#[test]
fn defaults_match_node_exporter_conventions() {
    let config = config(&[]).unwrap();
    assert_eq!(
        config.listen,
        Listen::Addresses(vec![ListenAddress {
            host: None,
            port: 10133
        }])
    );
    assert_eq!(config.telemetry_path, "/metrics");
    assert_eq!(config.max_requests, 40);
    assert_eq!(config.collection.scrape_workers, 1);
    assert_eq!(config.max_connections, 512);
    assert_eq!(config.collection.host.sysfs, PathBuf::from("/sys"));
    assert_eq!(
        config.collection.host.scrape_timeout,
        Duration::from_secs(5)
    );
    assert_eq!(names(&[]), ["greeter"]);
}

#[test]
fn collector_flags_last_one_wins() {
    assert!(names(&["--no-collector.greeter"]).is_empty());
    assert_eq!(
        names(&["--no-collector.greeter", "--collector.greeter"]),
        ["greeter"]
    );
    assert!(names(&["--collector.disable-defaults"]).is_empty());
    assert_eq!(
        names(&["--collector.disable-defaults", "--collector.quiet"]),
        ["quiet"]
    );
}

#[test]
fn a_collectors_own_flag_reaches_its_settings_and_its_start() {
    let parsed = config(&["--collector.greeter.word=hi"]).unwrap();
    let enabled = parsed.collection.collectors.into_iter().next().unwrap();
    let err = enabled.settings.start(&parsed.collection.host).unwrap_err();
    assert_eq!(err.to_string(), "starting the greeter collector: hi");
    // Validated even when the collector is disabled: a bad flag is never silently ignored.
    let err = config(&["--no-collector.greeter", "--collector.greeter.word="]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid --collector.greeter.word \"\": must not be empty"
    );
}

#[test]
fn errors_name_the_flag_given() {
    let err = config(&["--scrape.timeout=soon"]).unwrap_err().to_string();
    assert!(
        err.starts_with("invalid --scrape.timeout \"soon\""),
        "{err}"
    );
    let err = config(&["--path.procfs="]).unwrap_err().to_string();
    assert_eq!(err, "invalid --path.procfs: must not be empty");
    let err = config(&["--scrape.workers=0"]).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid --scrape.workers \"0\": must be an integer from 1 to 16"
    );
}

#[test]
fn listen_addresses_repeat_or_give_way_to_systemds_sockets() {
    let repeated = config(&[
        "--web.listen-address=127.0.0.1:9000",
        "--web.listen-address=[::1]:9001",
    ])
    .unwrap();
    assert_eq!(
        repeated.listen,
        Listen::Addresses(vec![
            ListenAddress {
                host: Some("127.0.0.1".into()),
                port: 9000
            },
            ListenAddress {
                host: Some("::1".into()),
                port: 9001
            },
        ])
    );
    let systemd = config(&["--web.systemd-socket"]).unwrap();
    assert_eq!(systemd.listen, Listen::Systemd);
    // Both would leave one of them unused: refused, not ignored.
    assert!(config(&["--web.systemd-socket", "--web.listen-address=:9000"]).is_err());
}

#[test]
fn max_requests_is_refused_not_clamped_at_the_connection_cap() {
    let err = config(&["--web.max-connections=2", "--web.max-requests=40"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid --web.max-requests \"40\": must be at most one below --web.max-connections (2), or 0"
    );
    assert!(config(&["--web.max-connections=41", "--web.max-requests=41"]).is_err());
    let config_at_cap = config(&["--web.max-connections=41", "--web.max-requests=40"]);
    assert_eq!(config_at_cap.unwrap().max_requests, 40);
    assert_eq!(
        config(&["--web.max-connections=2", "--web.max-requests=0"])
            .unwrap()
            .max_requests,
        0
    );
    // Not given, the default makes room for a lower connection cap.
    assert_eq!(
        config(&["--web.max-connections=2"]).unwrap().max_requests,
        1
    );
}

#[test]
fn bad_values_are_one_line_errors() {
    for args in [
        &["--web.max-requests=-1"][..],
        &["--web.max-requests=2305843009213693952"],
        &["--web.max-connections=1"],
        &["--scrape.timeout=999999999h"],
        &["--log.level=loud"],
        &["--log.format=xml"],
        &["--web.telemetry-path=metrics"],
        &["--no-such-flag"],
        &["--path.sysfs="],
    ] {
        let err = config(args).unwrap_err().to_string();
        assert!(!err.contains('\n'), "{args:?}: {err}");
    }
}

use std::collections::HashMap;
use std::sync::Mutex;

use super::*;
use crate::collector::Collector;
use crate::collectors::rdma::{NameFilter, RdmaCollector, CLASS_DIR};
use crate::netlink::datagram::ReceiveError;
use crate::netlink::generic::socket::ExchangeError;
use crate::sync::lock;
use crate::sysfs::Entry;
use crate::transceiver::tests::{qsfp28, sfp};

/// What a netdev answers: its module's memory (as the decoders' tests build it) or an errno.
#[derive(Clone)]
enum Answer {
    Memory(Memory),
    Errno(i32),
}

/// Module memories by netdev, and the netdevs asked, in order.
#[derive(Default)]
struct Modules {
    answers: Mutex<HashMap<String, Answer>>,
    asked: Mutex<Vec<String>>,
}

impl Modules {
    fn answer(&self, netdev: &str, answer: Answer) {
        lock(&self.answers).insert(netdev.to_string(), answer);
    }

    fn asked(&self) -> Vec<String> {
        lock(&self.asked).clone()
    }
}

impl ModuleSource for Modules {
    fn read_module(&self, netdev: &str, _: Instant) -> Result<Memory, ReadError> {
        lock(&self.asked).push(netdev.to_string());
        match lock(&self.answers).get(netdev).cloned() {
            Some(Answer::Memory(memory)) => Ok(memory),
            Some(Answer::Errno(errno)) => Err(ReplyError::Kernel(errno).into()),
            None => Err(ExchangeError::Receive(ReceiveError::Timeout).into()),
        }
    }
}

/// Every module sample of one read of a port, as `name{labels} value`, and the errors.
fn read_at(
    port: &mut PortModule,
    modules: &Modules,
    netdev: &str,
    now: Instant,
) -> (Vec<String>, Vec<CollectError>) {
    let read = ModuleRead {
        source: modules,
        interval: Duration::from_secs(60),
        now,
        deadline: now,
    };
    let mut out = Output::default();
    let labels = ["mlx5_0".into(), "1".into()];
    port.read(&read, netdev, [&labels[0], &labels[1]], &mut out);
    (samples(&out), out.errors)
}

pub(in crate::collectors::rdma) fn samples(out: &Output) -> Vec<String> {
    let families = out.samples.families();
    let samples = families.iter().flat_map(|family| {
        let name = family.desc.sample_name();
        (family.samples()).map(move |(labels, value)| format!("{name}{{{labels}}} {value:?}"))
    });
    samples.collect()
}

fn with<'s>(samples: &'s [String], prefix: &str) -> Vec<&'s str> {
    (samples.iter())
        .filter(|s| s.starts_with(prefix))
        .map(String::as_str)
        .collect()
}

/// An SFP's identity, monitors in base units, thresholds and flags, under the port's labels.
#[test]
fn a_modules_readings_thresholds_and_flags_in_base_units() {
    let modules = Modules::default();
    modules.answer("ens1f0np0", Answer::Memory(sfp().0));
    let (samples, errors) = read_at(
        &mut PortModule::default(),
        &modules,
        "ens1f0np0",
        Instant::now(),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let port = r#"device="mlx5_0",port="1""#;
    assert_eq!(
        with(&samples, "hpcnode_rdma_port_module_info"),
        [format!(
            r#"hpcnode_rdma_port_module_info{{{port},vendor="FINISAR CORP.",part_number="FTLX8574D3BCL",serial="ALB1234",type="sfp"}} Int(1)"#
        )]
    );
    for (name, labels, value) in [
        ("temperature_celsius", "", 25.5),
        ("supply_voltage_volts", "", 3.3024),
        ("tx_bias_amperes", r#",lane="1""#, 0.012),
        ("tx_power_watts", r#",lane="1""#, 0.0008),
        ("rx_power_watts", r#",lane="1""#, 0.0004),
        (
            "temperature_threshold_celsius",
            r#",level="high_alarm""#,
            80.0,
        ),
        (
            "temperature_threshold_celsius",
            r#",level="low_alarm""#,
            -10.0,
        ),
        (
            "supply_voltage_threshold_volts",
            r#",level="high_alarm""#,
            3.6,
        ),
    ] {
        let prefix = format!("hpcnode_rdma_port_module_{name}{{{port}{labels}}} Float(");
        let found = with(&samples, &prefix);
        assert_eq!(found.len(), 1, "{prefix} in {samples:#?}");
        let exported: f64 = found[0][prefix.len()..found[0].len() - 1].parse().unwrap();
        assert!((exported - value).abs() <= value.abs() * 1e-9, "{prefix}");
    }
    assert_eq!(with(&samples, "hpcnode_rdma_port_module_alarm{").len(), 20);
    assert_eq!(
        with(&samples, "hpcnode_rdma_port_module_alarm{")
            .into_iter()
            .filter(|s| s.ends_with("Int(1)"))
            .collect::<Vec<_>>(),
        [
            format!(
                r#"hpcnode_rdma_port_module_alarm{{{port},reading="temperature",level="high_alarm",lane=""}} Int(1)"#
            ),
            format!(
                r#"hpcnode_rdma_port_module_alarm{{{port},reading="tx_bias",level="low_warning",lane="1"}} Int(1)"#
            ),
            format!(
                r#"hpcnode_rdma_port_module_alarm{{{port},reading="rx_power",level="low_alarm",lane="1"}} Int(1)"#
            ),
        ]
    );
}

/// A module is read once per interval; the scrapes between export the last decoded values.
#[test]
fn a_module_is_read_at_most_once_per_interval() {
    let modules = Modules::default();
    modules.answer("eth0", Answer::Memory(sfp().0));
    let mut port = PortModule::default();
    let start = Instant::now();
    let (first, _) = read_at(&mut port, &modules, "eth0", start);
    // The module changes (a QSFP28 plugged in its place): unseen until the interval ends.
    modules.answer("eth0", Answer::Memory(qsfp28().0));
    let (cached, _) = read_at(&mut port, &modules, "eth0", start + Duration::from_secs(59));
    assert_eq!(cached, first);
    assert_eq!(modules.asked(), ["eth0"]);
    let (read, _) = read_at(&mut port, &modules, "eth0", start + Duration::from_secs(60));
    assert_eq!(modules.asked(), ["eth0", "eth0"]);
    assert_eq!(
        with(&read, "hpcnode_rdma_port_module_rx_power_watts").len(),
        4
    );
}

/// EOPNOTSUPP (no module-EEPROM operation: IPoIB, rxe's dummy netdev), ENODEV, ENOENT (no
/// ethtool family) and EPERM (no CAP_NET_ADMIN) are no error and are not asked again until the port's netdev changes.
#[test]
fn a_netdev_without_module_eeprom_is_not_asked_again_until_it_changes() {
    for errno in [libc::EOPNOTSUPP, libc::ENODEV, libc::ENOENT, libc::EPERM] {
        let modules = Modules::default();
        modules.answer("dummy0", Answer::Errno(errno));
        let mut port = PortModule::default();
        let start = Instant::now();
        for hours in 0..3 {
            let now = start + Duration::from_secs(hours * 3600);
            assert_eq!(
                read_at(&mut port, &modules, "dummy0", now),
                (vec![], vec![])
            );
        }
        assert_eq!(modules.asked(), ["dummy0"]);
        modules.answer("eth1", Answer::Memory(sfp().0));
        let (samples, errors) = read_at(&mut port, &modules, "eth1", start);
        assert!(errors.is_empty() && !samples.is_empty());
        assert_eq!(modules.asked(), ["dummy0", "eth1"]);
    }
}

/// A bad, short or garbage memory, or another refusal, is a counted error naming no byte of
/// it, asked again only after the interval; the last decoded values are not exported for it.
#[test]
fn a_bad_module_is_an_error_without_its_content() {
    let mut garbage = sfp().0;
    garbage.lower[20..36].copy_from_slice(&[0xA7; 16]);
    let mut unknown = sfp().0;
    unknown.lower[0] = 0xA7;
    let mut short = qsfp28().0;
    short.upper.remove(&3);
    for (answer, kind) in [
        (Answer::Memory(garbage), ErrorKind::Parse),
        (Answer::Memory(unknown), ErrorKind::Parse),
        (Answer::Memory(short), ErrorKind::Parse),
        (Answer::Memory(Memory::default()), ErrorKind::Parse),
        (Answer::Errno(libc::EIO), ErrorKind::Io),
    ] {
        let modules = Modules::default();
        modules.answer("eth0", Answer::Memory(sfp().0));
        let mut port = PortModule::default();
        let start = Instant::now();
        read_at(&mut port, &modules, "eth0", start);
        modules.answer("eth0", answer);
        let later = start + Duration::from_secs(60);
        let (samples, errors) = read_at(&mut port, &modules, "eth0", later);
        assert_eq!(samples, Vec::<String>::new());
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].kind, kind, "{:?}", errors[0]);
        let cause = &errors[0].cause;
        assert!(cause.starts_with("module EEPROM of eth0: "), "{cause}");
        assert!(!cause.to_lowercase().contains("a7"), "{cause}");
        let (samples, errors) = read_at(&mut port, &modules, "eth0", later);
        assert_eq!((samples, errors), (vec![], vec![]));
        assert_eq!(modules.asked(), ["eth0", "eth0"]);
    }
}

/// Through the collector: a RoCE port's netdev is asked, an InfiniBand port (no netdev) is not.
#[test]
fn the_collector_reads_roce_ports_modules_only() {
    let tmp = tempfile::tempdir().unwrap();
    roce_and_ib_ports(tmp.path(), "");
    let modules = std::sync::Arc::new(Modules::default());
    modules.answer("ens1f0np0", Answer::Memory(qsfp28().0));
    let mut collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    collector.module_source = Some((Box::new(Shared(modules.clone())), Duration::from_secs(60)));
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name("mlx5_0".to_string()), &mut out);
    assert_eq!(modules.asked(), ["ens1f0np0"]);
    let samples = samples(&out);
    let info = with(&samples, "hpcnode_rdma_port_module_info");
    assert_eq!(info.len(), 1);
    assert!(info[0].contains(r#"device="mlx5_0",port="1",vendor="Mellanox""#));
    let rx = with(
        &samples,
        r#"hpcnode_rdma_port_module_rx_power_watts{device="mlx5_0",port="1""#,
    );
    assert_eq!(rx.len(), 4);
    // The next scrape, within the interval: the kept values, no read.
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name("mlx5_0".to_string()), &mut out);
    assert_eq!(modules.asked(), ["ens1f0np0"]);
    assert_eq!(
        with(
            &super::tests::samples(&out),
            "hpcnode_rdma_port_module_info"
        )
        .len(),
        1
    );
}

/// Device `mlx5_0` under `sysfs`: port 1 RoCE over `ens1f0np0`, port 2 InfiniBand whose default
/// GID names `ib_netdev`.
pub(in crate::collectors::rdma) fn roce_and_ib_ports(sysfs: &std::path::Path, ib_netdev: &str) {
    let ports = sysfs.join(CLASS_DIR).join("mlx5_0/ports");
    let layouts = [
        ("1", "Ethernet", "ens1f0np0"),
        ("2", "InfiniBand", ib_netdev),
    ];
    for (port, link_layer, netdev) in layouts {
        let port = ports.join(port);
        std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
        std::fs::write(port.join("link_layer"), format!("{link_layer}\n")).unwrap();
        std::fs::write(port.join("gid_attrs/ndevs/0"), format!("{netdev}\n")).unwrap();
    }
}

/// A source the test keeps a handle on while the collector owns it.
struct Shared(std::sync::Arc<Modules>);

impl ModuleSource for Shared {
    fn read_module(&self, netdev: &str, deadline: Instant) -> Result<Memory, ReadError> {
        self.0.read_module(netdev, deadline)
    }
}

#[test]
fn the_module_interval_flag_is_validated_and_zero_disables() {
    let interval = |args: &[&str]| {
        let flags = crate::flags::Flags::parse((super::super::REGISTRATION.flags)(), args)?;
        super::super::RdmaSettings::from_flags(&flags).map(|s| s.module_interval)
    };
    let flag = "--collector.rdma.module-interval";
    assert_eq!(interval(&[]).unwrap(), Some(Duration::from_secs(60)));
    assert_eq!(
        interval(&[flag, "5m"]).unwrap(),
        Some(Duration::from_secs(300))
    );
    assert_eq!(interval(&[flag, "0"]).unwrap(), None);
    for bad in ["25h", "often", "1x"] {
        let err = interval(&[flag, bad]).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("invalid {flag} \"{bad}\"")),
            "{err}"
        );
    }
}

//! A port's FEC counters under its labels; a refusal remembered per netdev; a driver that
//! counts nothing asked again; through the collector, only RoCE ports' netdevs asked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::collector::Collector;
use crate::collectors::rdma::module_eeprom::tests::{roce_and_ib_ports, samples};
use crate::collectors::rdma::{NameFilter, RdmaCollector};
use crate::netlink::datagram::ReceiveError;
use crate::sync::lock;
use crate::sysfs::Entry;

/// FEC counters or an errno, by netdev, and the netdevs asked, in order.
#[derive(Default)]
struct Counters {
    answers: Mutex<HashMap<String, Result<FecStats, i32>>>,
    asked: Mutex<Vec<String>>,
}

impl FecSource for Arc<Counters> {
    fn read_fec(&self, netdev: &str, _: Instant) -> Result<FecStats, ReadError> {
        lock(&self.asked).push(netdev.to_string());
        match lock(&self.answers).get(netdev).copied() {
            Some(Ok(stats)) => Ok(stats),
            Some(Err(errno)) => Err(ReplyError::Kernel(errno).into()),
            None => Err(ExchangeError::Receive(ReceiveError::Timeout).into()),
        }
    }
}

/// mlx5e with RS-FEC (`fec_set_rs_stats()`, `fec_set_corrected_bits_total()`, en_stats.c).
const MLX5_RS: FecStats = FecStats {
    corrected_blocks: Some(1200),
    uncorrectable_blocks: Some(3),
    corrected_bits: Some(4800),
};

fn read(fec: &mut PortFec, counters: &Arc<Counters>, netdev: &str) -> Output {
    let mut out = Output::default();
    let port = LabelSet::new(&[("device", "mlx5_0".into()), ("port", "1".into())]);
    fec.read(counters, Instant::now(), netdev, &port, &mut out);
    out
}

#[test]
fn a_ports_fec_totals_under_its_labels() {
    let counters = Arc::new(Counters::default());
    lock(&counters.answers).insert("ens1f0np0".into(), Ok(MLX5_RS));
    let out = read(&mut PortFec::default(), &counters, "ens1f0np0");
    assert!(out.errors.is_empty());
    let port = r#"device="mlx5_0",port="1""#;
    assert_eq!(
        samples(&out),
        [
            format!("hpcnode_rdma_port_fec_corrected_blocks_total{{{port}}} Int(1200)"),
            format!("hpcnode_rdma_port_fec_uncorrectable_blocks_total{{{port}}} Int(3)"),
            format!("hpcnode_rdma_port_fec_corrected_bits_total{{{port}}} Int(4800)"),
        ]
    );
    // BASE-R FEC counts no bits: no series for them.
    let base_r = FecStats {
        corrected_bits: None,
        ..MLX5_RS
    };
    lock(&counters.answers).insert("ens1f0np0".into(), Ok(base_r));
    let out = read(&mut PortFec::default(), &counters, "ens1f0np0");
    assert_eq!(samples(&out).len(), 2);
}

#[test]
fn a_refusal_is_not_asked_again_until_the_netdev_changes() {
    let counters = Arc::new(Counters::default());
    lock(&counters.answers).insert("ib0".into(), Err(libc::EOPNOTSUPP));
    lock(&counters.answers).insert("eth1".into(), Ok(MLX5_RS));
    let mut fec = PortFec::default();
    for _ in 0..2 {
        let out = read(&mut fec, &counters, "ib0");
        assert_eq!((samples(&out).len(), out.errors.len()), (0, 0));
    }
    assert_eq!(samples(&read(&mut fec, &counters, "eth1")).len(), 3);
    assert_eq!(*lock(&counters.asked), ["ib0", "eth1"]);
}

#[test]
fn a_driver_counting_nothing_is_asked_again_and_a_failure_reported() {
    let counters = Arc::new(Counters::default());
    lock(&counters.answers).insert("eth0".into(), Ok(FecStats::default()));
    lock(&counters.answers).insert("eth1".into(), Err(libc::EIO));
    let mut fec = PortFec::default();
    for _ in 0..2 {
        let out = read(&mut fec, &counters, "eth0");
        assert_eq!((samples(&out).len(), out.errors.len()), (0, 0));
    }
    let out = read(&mut fec, &counters, "eth1");
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].kind, ErrorKind::Io);
    assert!(out.errors[0].cause.starts_with("FEC counters of eth1: "));
    let out = read(&mut fec, &counters, "eth2");
    assert_eq!(out.errors[0].kind, ErrorKind::Timeout);
    assert_eq!(*lock(&counters.asked), ["eth0", "eth0", "eth1", "eth2"]);
}

#[test]
fn the_collector_reads_roce_ports_fec_only() {
    let tmp = tempfile::tempdir().unwrap();
    roce_and_ib_ports(tmp.path(), "");
    let counters = Arc::new(Counters::default());
    lock(&counters.answers).insert("ens1f0np0".into(), Ok(MLX5_RS));
    let mut collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    collector.fec_source = Some(Box::new(counters.clone()));
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name("mlx5_0".to_string()), &mut out);
    assert_eq!(*lock(&counters.asked), ["ens1f0np0"]);
    let fec: Vec<_> = (samples(&out).into_iter())
        .filter(|s| s.starts_with("hpcnode_rdma_port_fec_"))
        .collect();
    assert_eq!(fec.len(), 3);
    assert!(fec
        .iter()
        .all(|s| s.contains(r#"{device="mlx5_0",port="1"}"#)));
}

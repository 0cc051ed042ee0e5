use std::collections::HashMap;

use super::*;
use crate::collector::Collector;
use crate::collectors::rdma::module_eeprom::tests::{roce_and_ib_ports, samples};
use crate::collectors::rdma::{NameFilter, RdmaCollector};
use crate::ethtool_ioctl::{stats_answer, strings_answer, ETH_GSTRING_LEN};
use crate::sysfs::Entry;

/// A netdev's statistics as its driver has them now, or the errno every ask gets.
#[derive(Clone)]
enum Driver {
    Stats(Vec<(&'static str, u64)>),
    NoStats,
    Errno(i32),
}

/// Netdevs by name, answering as the kernel fills the ioctl's buffers (a kernel with the
/// overflow fix: a count other than the driver's is answered 0), and the ioctls asked.
#[derive(Default)]
struct Kernel {
    drivers: Mutex<HashMap<String, Driver>>,
    asked: Mutex<Vec<String>>,
}

impl Kernel {
    fn set(&self, netdev: &str, driver: Driver) {
        lock(&self.drivers).insert(netdev.to_string(), driver);
    }

    fn asked(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.asked))
    }

    fn driver(&self, netdev: &str, ioctl: &str) -> Result<Vec<(&'static str, u64)>, IoctlError> {
        lock(&self.asked).push(format!("{ioctl} {netdev}"));
        match lock(&self.drivers).get(netdev).cloned() {
            Some(Driver::Stats(stats)) => Ok(stats),
            Some(Driver::NoStats) => Ok(Vec::new()),
            Some(Driver::Errno(errno)) => Err(IoctlError::Io(
                "SIOCETHTOOL",
                std::io::Error::from_raw_os_error(errno),
            )),
            None => Err(IoctlError::Io(
                "SIOCETHTOOL",
                std::io::Error::from_raw_os_error(libc::ENODEV),
            )),
        }
    }
}

/// The count the kernel writes back: the driver's, or 0 where the caller asked another
/// (`ethtool_get_strings`, `ethtool_get_stats` since the overflow fix).
fn answered(asked: u32, driver: usize) -> u32 {
    match asked as usize == driver {
        true => asked,
        false => 0,
    }
}

impl StatsSource for Kernel {
    fn count(&self, netdev: &str) -> Result<Option<u32>, IoctlError> {
        let driver = lock(&self.drivers).get(netdev).cloned();
        let stats = self.driver(netdev, "GSSET_INFO")?;
        Ok(match driver {
            Some(Driver::NoStats) => None,
            _ => Some(stats.len() as u32),
        })
    }

    fn names(&self, netdev: &str, count: u32) -> Result<Vec<String>, IoctlError> {
        let stats = self.driver(netdev, "GSTRINGS")?;
        let answered = answered(count, stats.len());
        // struct ethtool_gstrings: cmd, string_set, len, then the table in the room asked.
        let mut buffer = Vec::new();
        for word in [0x1bu32, 1, answered] {
            buffer.extend(word.to_ne_bytes());
        }
        let mut table = vec![0u8; count as usize * ETH_GSTRING_LEN];
        if answered == count {
            for ((name, _), slot) in stats.iter().zip(table.chunks_exact_mut(ETH_GSTRING_LEN)) {
                slot[..name.len()].copy_from_slice(name.as_bytes());
            }
        }
        buffer.extend(table);
        Ok(strings_answer(&buffer, count)?)
    }

    fn values(&self, netdev: &str, count: u32) -> Result<Vec<u64>, IoctlError> {
        let stats = self.driver(netdev, "GSTATS")?;
        let answered = answered(count, stats.len());
        // struct ethtool_stats: cmd, n_stats, then the values in the room asked.
        let mut buffer = Vec::new();
        for word in [0x1du32, answered] {
            buffer.extend(word.to_ne_bytes());
        }
        for index in 0..count as usize {
            let value = stats.get(index).filter(|_| answered == count);
            buffer.extend(value.map_or(0, |(_, value)| *value).to_ne_bytes());
        }
        Ok(stats_answer(&buffer, count)?)
    }
}

/// A ConnectX port's table, shortened: a vport counter, the pport module group
/// (`mlx5e_pme_status_desc`, then `mlx5e_pme_error_desc`), then per-channel counters, one
/// channel per `channels`.
fn mlx5e(channels: usize, unplugs: u64, stuck: u64) -> Driver {
    let mut stats = vec![
        ("rx_packets", 1000),
        ("module_unplug", unplugs),
        ("module_bus_stuck", stuck),
        ("module_high_temp", 0),
        ("module_bad_shorted", 2),
    ];
    let names = ["ch0_events", "ch1_events", "ch2_events", "ch3_events"];
    stats.extend(names.iter().take(channels).map(|name| (*name, 9)));
    Driver::Stats(stats)
}

/// `drivers/net/veth.c`'s `ethtool_stats_keys` and a queue counter: no module events.
fn veth() -> Driver {
    Driver::Stats(vec![("peer_ifindex", 12), ("rx_queue_0_xdp_packets", 0)])
}

fn read(port: &mut PortEvents, kernel: &Kernel, netdev: &str) -> (Vec<String>, Vec<CollectError>) {
    let mut out = Output::default();
    let labels: [LabelValue; 2] = ["mlx5_0".into(), "1".into()];
    port.read(kernel, netdev, [&labels[0], &labels[1]], &mut out);
    (samples(&out), out.errors)
}

fn events(unplug: u64, stuck: u64) -> Vec<String> {
    [
        ("unplug", unplug),
        ("bus_stuck", stuck),
        ("high_temp", 0),
        ("bad_shorted", 2),
    ]
    .iter()
    .map(|(event, value)| {
        format!(
            r#"hpcnode_rdma_port_module_events_total{{device="mlx5_0",port="1",event="{event}"}} Int({value})"#
        )
    })
    .collect()
}

/// The four events by their names without `module_`; the table is read once, so a scrape
/// after the first costs one GSTATS.
#[test]
fn mlx5e_module_statistics_are_the_events() {
    let kernel = Kernel::default();
    kernel.set("ens1f0np0", mlx5e(2, 1, 0));
    let mut port = PortEvents::default();
    assert_eq!(
        read(&mut port, &kernel, "ens1f0np0"),
        (events(1, 0), vec![])
    );
    assert_eq!(
        kernel.asked(),
        [
            "GSSET_INFO ens1f0np0",
            "GSTRINGS ens1f0np0",
            "GSTATS ens1f0np0"
        ]
    );
    kernel.set("ens1f0np0", mlx5e(2, 3, 1));
    assert_eq!(
        read(&mut port, &kernel, "ens1f0np0"),
        (events(3, 1), vec![])
    );
    assert_eq!(kernel.asked(), ["GSTATS ens1f0np0"]);
}

/// Channels added since the table was read (`ethtool -L`): the count the kernel answers is
/// not the table's, so the table is read again and the same scrape exports the events.
#[test]
fn a_changed_count_reads_the_table_again() {
    let kernel = Kernel::default();
    kernel.set("eth0", mlx5e(1, 0, 0));
    let mut port = PortEvents::default();
    read(&mut port, &kernel, "eth0");
    kernel.asked();
    kernel.set("eth0", mlx5e(4, 5, 0));
    assert_eq!(read(&mut port, &kernel, "eth0"), (events(5, 0), vec![]));
    assert_eq!(
        kernel.asked(),
        [
            "GSTATS eth0",
            "GSSET_INFO eth0",
            "GSTRINGS eth0",
            "GSTATS eth0"
        ]
    );
}

/// veth's table has no module events, loopback's netdev no statistics, a netdev without the
/// operation answers EOPNOTSUPP: nothing exported, nothing reported, and none asked again
/// until the port's netdev is another.
#[test]
fn netdevs_without_module_events_are_not_asked_again() {
    for driver in [veth(), Driver::NoStats, Driver::Errno(libc::EOPNOTSUPP)] {
        let kernel = Kernel::default();
        kernel.set("veth0", driver);
        kernel.set("eth1", mlx5e(1, 0, 0));
        let mut port = PortEvents::default();
        assert_eq!(read(&mut port, &kernel, "veth0"), (vec![], vec![]));
        assert!(!kernel.asked().is_empty());
        assert_eq!(read(&mut port, &kernel, "veth0"), (vec![], vec![]));
        assert_eq!(kernel.asked(), Vec::<String>::new());
        assert_eq!(read(&mut port, &kernel, "eth1"), (events(0, 0), vec![]));
        assert_eq!(kernel.asked()[0], "GSSET_INFO eth1");
    }
}

/// Another failure is reported (kind and cause name the netdev, never a value) and asked
/// again at the next scrape.
#[test]
fn a_failed_read_is_reported_and_asked_again() {
    let kernel = Kernel::default();
    kernel.set("eth0", Driver::Errno(libc::EIO));
    let mut port = PortEvents::default();
    let (samples, errors) = read(&mut port, &kernel, "eth0");
    assert_eq!(samples, Vec::<String>::new());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, ErrorKind::Io);
    let cause = &errors[0].cause;
    assert!(cause.starts_with("ethtool statistics of eth0: "), "{cause}");
    kernel.asked();
    kernel.set("eth0", mlx5e(1, 0, 0));
    assert_eq!(read(&mut port, &kernel, "eth0"), (events(0, 0), vec![]));
}

/// A source the test keeps a handle on while the collector owns it.
struct Shared(Arc<Kernel>);

impl StatsSource for Shared {
    fn count(&self, netdev: &str) -> Result<Option<u32>, IoctlError> {
        self.0.count(netdev)
    }

    fn names(&self, netdev: &str, count: u32) -> Result<Vec<String>, IoctlError> {
        self.0.names(netdev, count)
    }

    fn values(&self, netdev: &str, count: u32) -> Result<Vec<u64>, IoctlError> {
        self.0.values(netdev, count)
    }
}

/// Through the collector: a RoCE port's netdev is asked, an InfiniBand port's is not.
#[test]
fn the_collector_asks_roce_ports_netdevs_only() {
    let tmp = tempfile::tempdir().unwrap();
    roce_and_ib_ports(tmp.path(), "ib0");
    let kernel = Arc::new(Kernel::default());
    kernel.set("ens1f0np0", mlx5e(1, 4, 0));
    kernel.set("ib0", mlx5e(1, 4, 0));
    let mut collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    collector.stats_source = Some(Box::new(Shared(kernel.clone())));
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name("mlx5_0".to_string()), &mut out);
    let events: Vec<String> = (samples(&out).into_iter())
        .filter(|sample| sample.starts_with("hpcnode_rdma_port_module_events"))
        .collect();
    assert_eq!(events, super::tests::events(4, 0));
    assert!(kernel
        .asked()
        .iter()
        .all(|ioctl| ioctl.ends_with(" ens1f0np0")));
}

//! Which VM moves the bytes through an SR-IOV VF: the traffic and drop counters of each VF of
//! a device's PCI function, as the PF netdev reports them over rtnetlink (`IFLA_VF_STATS`,
//! `netlink/route/`), labelled with the VF's PCI address (the PF's `virtfn<n>` link), which
//! is the `device` of the pci collector's `hpcnode_pci_vfio_holder_info`: the VM that holds
//! the VF is one PromQL join away (docs/rdma.md).
//!
//! Ethernet PFs (mlx5e: `mlx5e_get_vf_stats()`) and InfiniBand ones alike: upstream IPoIB's
//! PF netdev has `ndo_get_vf_stats` (`ipoib_get_vf_stats()` -> `ib_get_vf_stats()`, filled by
//! `mlx5_ib_get_vf_stats()` with the vport's unicast packets and bytes and its multicast
//! packets; broadcast and drops stay 0). Only the running kernel answers: the collector asks
//! when `--path.sysfs` is `/sys`, and a device whose function has no VFs costs one read of
//! `sriov_numvfs`, no request.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::collector::Output;
use crate::error::{CollectError, ErrorKind};
use crate::metrics::{Desc, Value};
use crate::netlink::rdma::reply::ReplyError;
use crate::netlink::route::link::{VfCounter, VfStats};
use crate::netlink::route::socket::{RequestError, Socket};
use crate::sync::lock;
use crate::sysfs::{AttributeReader, SysDir};

pub(super) const VF_STAT: Desc = Desc::counter(
    "hpcnode_rdma_vf_stat",
    "Traffic of an SR-IOV VF of the device's PCI function as its PF netdev counts it (IFLA_VF_STATS), by counter.",
    None,
);

/// The VFs' counters of one PF netdev, by its interface index.
pub(super) trait VfSource: Send + Sync {
    fn vf_stats(&self, ifindex: u32, deadline: Instant) -> Result<Vec<VfStats>, RequestError>;
}

/// The running kernel's answer, over a `NETLINK_ROUTE` socket kept between scrapes (taken by
/// one unit read at a time; another opens its own).
#[derive(Default)]
pub(super) struct Rtnetlink {
    socket: Mutex<Option<Socket>>,
}

impl VfSource for Rtnetlink {
    fn vf_stats(&self, ifindex: u32, deadline: Instant) -> Result<Vec<VfStats>, RequestError> {
        let taken = lock(&self.socket).take();
        let mut socket = match taken {
            Some(socket) => socket,
            None => Socket::open()?,
        };
        let stats = socket.vf_stats(ifindex, deadline)?;
        // A socket whose request failed may hold a late reply: only a clean one is kept.
        *lock(&self.socket) = Some(socket);
        Ok(stats)
    }
}

/// `ifla_vf_stats`'s field names, as `ip -s link` shows them.
fn counter_label(counter: VfCounter) -> &'static str {
    match counter {
        VfCounter::RxPackets => "rx_packets",
        VfCounter::TxPackets => "tx_packets",
        VfCounter::RxBytes => "rx_bytes",
        VfCounter::TxBytes => "tx_bytes",
        VfCounter::Broadcast => "broadcast",
        VfCounter::Multicast => "multicast",
        VfCounter::RxDropped => "rx_dropped",
        VfCounter::TxDropped => "tx_dropped",
    }
}

/// Exports the VFs of `device`'s PCI function (`dir` is the device's directory), asking each
/// of the function's netdevs (`device/net/`) that has VFs.
pub(super) fn read(
    dir: &SysDir,
    device: &str,
    source: &dyn VfSource,
    timeout: Duration,
    out: &mut Output,
) {
    let mut reader = AttributeReader::default();
    let vfs = out
        .optional(dir.read_u64("device/sriov_numvfs", &mut reader))
        .unwrap_or(0);
    if vfs == 0 {
        return;
    }
    let addresses: BTreeMap<u32, String> = (0..vfs.min(u64::from(u16::MAX)) as u32)
        .filter_map(|vf| {
            let address = out.optional(dir.link_target_name(&format!("device/virtfn{vf}")))?;
            Some((vf, address))
        })
        .collect();
    let Some(net) = out.optional(dir.subdir("device/net")) else {
        return;
    };
    let Some(netdevs) = out.optional(net.entries()) else {
        return;
    };
    let deadline = Instant::now() + timeout;
    for netdev in netdevs {
        let Some(netdev) = out.reported(netdev.name()).map(str::to_string) else {
            continue;
        };
        let Some(ifindex) = out.optional(net.read_u64(&format!("{netdev}/ifindex"), &mut reader))
        else {
            continue;
        };
        let Ok(ifindex) = u32::try_from(ifindex) else {
            continue;
        };
        match source.vf_stats(ifindex, deadline) {
            Ok(stats) => push(out, device, &netdev, &addresses, stats),
            Err(err) => out.errors.push(request_error(&netdev, &err)),
        }
    }
}

fn push(
    out: &mut Output,
    device: &str,
    netdev: &str,
    addresses: &BTreeMap<u32, String>,
    stats: Vec<VfStats>,
) {
    for VfStats { vf, counters } in stats {
        let address = addresses.get(&vf).cloned().unwrap_or_default();
        for (counter, value) in counters {
            let labels = [
                ("device", device.to_string().into()),
                ("netdev", netdev.to_string().into()),
                ("vf", vf.to_string().into()),
                ("vf_address", address.clone().into()),
                ("counter", counter_label(counter).into()),
            ];
            out.samples.push(&VF_STAT, labels, Value::Int(value));
        }
    }
}

fn request_error(netdev: &str, err: &RequestError) -> CollectError {
    let kind = match err {
        RequestError::Reply(ReplyError::Kernel(_))
        | RequestError::Io(..)
        | RequestError::Unavailable(_) => ErrorKind::Io,
        RequestError::Reply(_) => ErrorKind::Parse,
        RequestError::Timeout => ErrorKind::Timeout,
    };
    CollectError::new(kind, format!("rtnetlink VF statistics of {netdev}: {err}"))
        .keyed_by(format!("rtnetlink vf stats {netdev} {kind:?}"))
}

#[cfg(test)]
mod tests;

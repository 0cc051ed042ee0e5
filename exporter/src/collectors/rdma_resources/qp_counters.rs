//! Traffic per holder from per-QP counters (`--collector.rdma_netlink.qp-counters`, off by
//! default since it changes the kernel's counter binding): each port put in auto mode with the
//! QP type and pid criteria, so every new QP of a process is bound to a counter of that process,
//! unless someone else set a mode first (theirs is kept); then at each scrape the device's
//! bound counters dumped and their values summed per holder, under the driver's names.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::netlink::rdma::counters::{QpCounter, QpCounterMode, MASK_PID, MASK_QP_TYPE};
use crate::netlink::rdma::message::{Command, Entry, Resource};
use crate::netlink::rdma::reply::{attr, Holder, ReplyError};
use crate::netlink::rdma::socket::DumpError;

use super::Requests;

/// `rdma statistic qp set link DEV/PORT auto type,pid on`: a counter per process and QP type,
/// so that each counter has one holder.
pub const AUTO_MASK: u32 = MASK_QP_TYPE | MASK_PID;

/// What the exporter found on a port, and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// No mode set: the exporter turned auto mode on.
    Enabled,
    /// Auto mode set by someone else (with whatever criteria): kept.
    KeptAuto,
    /// Manual binding (or a later kernel's mode) set by an admin: left alone.
    KeptManual,
    /// The kernel refused with this errno: EOPNOTSUPP for a driver without per-port counter
    /// support, EPERM without CAP_NET_ADMIN.
    Refused(i32),
}

impl Binding {
    pub fn label(self) -> &'static str {
        match self {
            Binding::Enabled => "exporter_auto",
            Binding::KeptAuto => "admin_auto",
            Binding::KeptManual => "admin_manual",
            Binding::Refused(_) => "refused",
        }
    }

    /// The log line, once per port.
    pub fn notice(self, device: &str, port: u32) -> String {
        let what = match self {
            Binding::Enabled => {
                "turned on auto mode (type,pid): new QPs are bound to per-process counters"
                    .to_string()
            }
            Binding::KeptAuto => {
                "already in auto mode, set by someone else: kept as it is".to_string()
            }
            Binding::KeptManual => "in manual mode (an admin's binding): left alone".to_string(),
            Binding::Refused(errno) => format!(
                "the kernel refused auto mode: {}; no per-QP counters on this port",
                std::io::Error::from_raw_os_error(errno)
            ),
        };
        format!("RDMA QP counters on {device} port {port}: {what}")
    }
}

/// Reads a port's mode and turns auto mode on only when none is set. A kernel refusal is a
/// `Binding`, not an error: it is the port's answer, kept and not asked again.
pub fn bind_port(
    socket: &mut impl Requests,
    device: u32,
    port: u32,
    deadline: Instant,
) -> Result<Binding, DumpError> {
    let mode = match socket.request(Command::QpCounterMode { port }, Some(device), deadline) {
        Ok(dump) => dump.qp_counter_mode,
        Err(DumpError::Reply(ReplyError::Kernel(errno))) => return Ok(Binding::Refused(errno)),
        Err(err) => return Err(err),
    };
    match mode.ok_or(ReplyError::Missing(attr::STAT_MODE))? {
        QpCounterMode::None => {
            let set = Command::SetQpCounterAuto {
                port,
                mask: AUTO_MASK,
            };
            match socket.request(set, Some(device), deadline) {
                Ok(_) => Ok(Binding::Enabled),
                Err(DumpError::Reply(ReplyError::Kernel(errno))) => Ok(Binding::Refused(errno)),
                Err(err) => Err(err),
            }
        }
        QpCounterMode::Auto { .. } => Ok(Binding::KeptAuto),
        QpCounterMode::Manual | QpCounterMode::Other(_) => Ok(Binding::KeptManual),
    }
}

/// Counter values by the driver's name, summed.
pub type Sums = BTreeMap<String, u64>;

pub fn add(sums: &mut Sums, other: &Sums) {
    for (name, value) in other {
        let sum = sums.entry(name.clone()).or_default();
        *sum = sum.saturating_add(*value);
    }
}

/// Every counter's values summed per holder: the holder the kernel names for the counter (auto
/// mode with the pid criterion), else the one holder of all its QPs in the QP dump; a counter
/// whose QPs have several holders (a binding without the pid criterion) or none known is
/// `Holder::Unknown`'s.
pub fn by_holder(counters: &[QpCounter], entries: &[(Resource, Entry)]) -> BTreeMap<Holder, Sums> {
    let qp_holders: BTreeMap<u32, &Holder> = entries
        .iter()
        .filter(|(resource, _)| *resource == Resource::QueuePair)
        .filter_map(|(_, entry)| Some((entry.qp_number?, &entry.holder)))
        .collect();
    let mut sums: BTreeMap<Holder, Sums> = BTreeMap::new();
    for counter in counters {
        let holder = counter.holder.clone().unwrap_or_else(|| {
            let mut holders = counter
                .qp_numbers
                .iter()
                .map(|number| qp_holders.get(number).copied());
            match holders.next() {
                Some(Some(first)) if holders.all(|other| other == Some(first)) => first.clone(),
                _ => Holder::Unknown,
            }
        });
        let values = counter
            .counters
            .iter()
            .map(|counter| (counter.name.clone(), counter.value))
            .collect();
        add(sums.entry(holder).or_default(), &values);
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::rdma::counters::encode::counter;

    fn qp(holder: Holder, number: u32) -> (Resource, Entry) {
        let entry = Entry {
            holder,
            port: Some(1),
            qp_number: Some(number),
            qp_type: Some(2),
            qp_state: Some(3),
            mr_length: None,
        };
        (Resource::QueuePair, entry)
    }

    fn sums(values: &[(&str, u64)]) -> Sums {
        values
            .iter()
            .map(|(name, value)| (name.to_string(), *value))
            .collect()
    }

    /// Two counters of one process (an RC and a UD QP type) summed; a counter without a pid
    /// named by its QPs' one holder; one shared by two holders, or with a QP gone from the QP
    /// dump, is unknown's.
    #[test]
    fn counters_are_summed_per_holder() {
        let entries = [
            qp(Holder::Process(7), 10),
            qp(Holder::Process(7), 11),
            qp(Holder::Process(8), 20),
            qp(Holder::Kernel("ib_core".into()), 1),
        ];
        let counters = [
            counter(
                1,
                Some(Holder::Process(7)),
                &[10],
                &[("rx_write_requests", 5)],
            ),
            counter(
                1,
                Some(Holder::Process(7)),
                &[11],
                &[("rx_write_requests", u64::MAX), ("out_of_sequence", 1)],
            ),
            counter(1, None, &[20], &[("rx_write_requests", 3)]),
            counter(1, None, &[10, 20], &[("rx_write_requests", 100)]),
            counter(1, None, &[99], &[("rx_write_requests", 1000)]),
        ];
        let summed = by_holder(&counters, &entries);
        assert_eq!(
            summed,
            BTreeMap::from([
                (
                    Holder::Process(7),
                    sums(&[("rx_write_requests", u64::MAX), ("out_of_sequence", 1)])
                ),
                (Holder::Process(8), sums(&[("rx_write_requests", 3)])),
                (Holder::Unknown, sums(&[("rx_write_requests", 1100)])),
            ])
        );
    }
}

//! QP counters (Linux 5.3+): a port's counter mode (`stat_get_doit_qp` in
//! drivers/infiniband/core/nldev.c) and a device's bound counters
//! (`nldev_res_get_counter_dumpit`, each entry filled by `fill_res_counter_entry`): the QPs each
//! counter counts and its values. Requests are built in `message.rs` with the others; every
//! attribute read here is checked as there.

use super::reply::{
    attr, holder, hw_counters, Attributes, Counter, Holder, ReplyError, MAX_ENTRIES,
};

/// `enum rdma_nl_counter_mode`.
const MODE_NONE: u32 = 0;
pub(super) const MODE_AUTO: u32 = 1;
pub(super) const MODE_MANUAL: u32 = 2;
/// `enum rdma_nl_counter_mask`: one counter per QP type, and per process.
pub const MASK_QP_TYPE: u32 = 1;
pub const MASK_PID: u32 = 2;

/// A port's QP counter mode, as `stat_get_doit_qp` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpCounterMode {
    /// No QP has a counter of its own: all count in the port's default counters only.
    None,
    /// Each new QP bound to a counter by the criteria of `mask` (`MASK_*`).
    Auto { mask: u32 },
    /// Counters allocated and QPs bound by hand (`rdma statistic qp bind`).
    Manual,
    /// A mode of a later kernel.
    Other(u32),
}

/// One bound counter, as the counter dump gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpCounter {
    pub port: u32,
    pub id: u32,
    /// The process (or kernel module) the counter was made for: given in auto mode with the
    /// pid criterion (`fill_stat_counter_mode`), else `None`.
    pub holder: Option<Holder>,
    /// The numbers of the QPs bound to it (`fill_stat_counter_qps`).
    pub qp_numbers: Vec<u32>,
    /// Its values, named as the driver names them (`fill_stat_counter_hwcounters`).
    pub counters: Vec<Counter>,
}

/// The mode of a `stat_get_doit_qp` reply: `STAT_MODE`, and in auto mode its mask.
pub(super) fn mode(attributes: &Attributes) -> Result<QpCounterMode, ReplyError> {
    Ok(match attributes.u32(attr::STAT_MODE)? {
        MODE_NONE => QpCounterMode::None,
        MODE_AUTO => QpCounterMode::Auto {
            mask: attributes.u32(attr::STAT_AUTO_MODE_MASK)?,
        },
        MODE_MANUAL => QpCounterMode::Manual,
        other => QpCounterMode::Other(other),
    })
}

/// The counters of one dump message: its `STAT_COUNTER` table (absent when the device has
/// none: the kernel cancels a message it filled nothing into).
pub(super) fn qp_counters(
    attributes: &Attributes,
    into: &mut Vec<QpCounter>,
) -> Result<(), ReplyError> {
    let Some(table) = attributes.nested(attr::STAT_COUNTER)? else {
        return Ok(());
    };
    for (kind, entry) in table.all() {
        if kind != attr::STAT_COUNTER_ENTRY {
            continue;
        }
        if into.len() >= MAX_ENTRIES {
            return Err(ReplyError::TooLarge(MAX_ENTRIES));
        }
        let entry = Attributes::parse(entry)?;
        let mut qp_numbers = Vec::new();
        if let Some(qps) = entry.nested(attr::RES_QP)? {
            for (kind, qp) in qps.all() {
                if kind == attr::RES_QP_ENTRY {
                    qp_numbers.push(Attributes::parse(qp)?.u32(attr::RES_LQPN)?);
                }
            }
        }
        let named = entry.get(attr::RES_PID).is_some() || entry.get(attr::RES_KERN_NAME).is_some();
        into.push(QpCounter {
            port: entry.u32(attr::PORT_INDEX)?,
            id: entry.u32(attr::STAT_COUNTER_ID)?,
            holder: named.then(|| holder(&entry)).transpose()?,
            qp_numbers,
            counters: hw_counters(&entry)?,
        });
    }
    Ok(())
}

/// Replies built as nldev.c (Linux 6.1 to 6.12) builds them, for the tests here and the
/// collector's.
#[cfg(test)]
pub(crate) mod encode;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;

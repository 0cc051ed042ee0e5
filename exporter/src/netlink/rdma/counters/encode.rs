//! Test only: `RDMA_NLDEV_CMD_STAT_GET` replies built as the kernel writes them, from the
//! message encoders, for the counter decoder's tests and property tests.

use super::*;
use crate::netlink::rdma::message::encode::{
    attribute, hw_counters, message, nested, string, u32, u8,
};
use crate::netlink::rdma::message::{Command, Device};

fn handle(device: &Device, port: Option<u32>) -> Vec<Vec<u8>> {
    let mut attributes = vec![
        u32(attr::DEV_INDEX, device.index),
        string(attr::DEV_NAME, &device.name),
    ];
    attributes.extend(port.map(|port| u32(attr::PORT_INDEX, port)));
    attributes
}

/// A counter on port 1 with the QPs and values given.
pub fn counter(id: u32, holder: Option<Holder>, qps: &[u32], values: &[(&str, u64)]) -> QpCounter {
    QpCounter {
        port: 1,
        id,
        holder,
        qp_numbers: qps.to_vec(),
        counters: values
            .iter()
            .map(|(name, value)| Counter {
                name: name.to_string(),
                value: *value,
            })
            .collect(),
    }
}

/// `stat_get_doit_qp`: `fill_nldev_handle`, the port, the mode, and in auto mode the mask.
pub fn mode(device: &Device, port: u32, sequence: u32, mode: QpCounterMode) -> Vec<u8> {
    let mut attributes = handle(device, Some(port));
    let (code, mask) = match mode {
        QpCounterMode::None => (MODE_NONE, None),
        QpCounterMode::Auto { mask } => (MODE_AUTO, Some(mask)),
        QpCounterMode::Manual => (MODE_MANUAL, None),
        QpCounterMode::Other(code) => (code, None),
    };
    attributes.push(u32(attr::STAT_MODE, code));
    attributes.extend(mask.map(|mask| u32(attr::STAT_AUTO_MODE_MASK, mask)));
    let command = Command::QpCounterMode { port };
    message(command.message_type(), 0, sequence, &attributes.concat())
}

/// `nldev_stat_set_doit`'s answer to a mode set: `fill_nldev_handle` and the port.
pub fn set(device: &Device, port: u32, sequence: u32) -> Vec<u8> {
    let command = Command::SetQpCounterAuto { port, mask: 0 };
    let payload = handle(device, Some(port)).concat();
    message(command.message_type(), 0, sequence, &payload)
}

/// The same on older kernels (Debian's 5.10, seen in the lab): for auto mode
/// `nldev_stat_set_doit` ends the message it started without filling anything into it.
pub fn set_5_10(port: u32, sequence: u32) -> Vec<u8> {
    let command = Command::SetQpCounterAuto { port, mask: 0 };
    message(command.message_type(), 0, sequence, &[])
}

/// One message of the counter dump: `res_get_common_dumpit` puts `fill_nldev_handle` and
/// the table (`nla_nest_start_noflag`, as each entry), each entry `fill_res_counter_entry`:
/// port, counter id, `fill_stat_counter_mode` (mode; in auto mode the QP type and, with the
/// pid criterion, `fill_res_name_pid`), `fill_stat_counter_qps` (a flagged nest of QP
/// entries, each its number), `fill_stat_counter_hwcounters`.
pub fn dump(device: &Device, sequence: u32, counters: &[QpCounter]) -> Vec<u8> {
    let entries: Vec<Vec<u8>> = counters
        .iter()
        .map(|counter| {
            let mut fields = vec![
                u32(attr::PORT_INDEX, counter.port),
                u32(attr::STAT_COUNTER_ID, counter.id),
                u32(attr::STAT_MODE, MODE_AUTO),
                u8(attr::RES_TYPE, 2), // IB_QPT_RC
            ];
            fields.extend(counter.holder.as_ref().map(|holder| match holder {
                Holder::Process(pid) => u32(attr::RES_PID, *pid),
                Holder::Kernel(name) => string(attr::RES_KERN_NAME, name),
                Holder::Unknown => Vec::new(),
            }));
            let qps: Vec<Vec<u8>> = (counter.qp_numbers.iter())
                .map(|number| nested(attr::RES_QP_ENTRY, &[u32(attr::RES_LQPN, *number)]))
                .collect();
            fields.push(nested(attr::RES_QP, &qps));
            fields.push(hw_counters(&counter.counters));
            attribute(attr::STAT_COUNTER_ENTRY, &fields.concat())
        })
        .collect();
    let mut payload = handle(device, None);
    payload.push(attribute(attr::STAT_COUNTER, &entries.concat()));
    let command = Command::QpCounters;
    message(command.message_type(), 0x2, sequence, &payload.concat())
}

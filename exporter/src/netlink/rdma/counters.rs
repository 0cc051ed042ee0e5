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
pub(crate) mod encode {
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
    pub fn counter(
        id: u32,
        holder: Option<Holder>,
        qps: &[u32],
        values: &[(&str, u64)],
    ) -> QpCounter {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::rdma::message::encode as messages;
    use crate::netlink::rdma::message::{request, Command, Device, Dump};

    fn rxe0() -> Device {
        Device {
            index: 3,
            name: "rxe0".into(),
        }
    }

    /// The request's attributes, after the 16-byte header, as (type, u32 value).
    fn words(request: &[u8]) -> Vec<(u16, u32)> {
        request[16..]
            .chunks(8)
            .map(|word| {
                assert_eq!(u16::from_ne_bytes([word[0], word[1]]), 8);
                let kind = u16::from_ne_bytes([word[2], word[3]]);
                (kind, u32::from_ne_bytes(word[4..8].try_into().unwrap()))
            })
            .collect()
    }

    fn header(request: &[u8]) -> (u16, u16) {
        let kind = u16::from_ne_bytes([request[4], request[5]]);
        (kind, u16::from_ne_bytes([request[6], request[7]]))
    }

    /// As iproute2's rdma/stat.c encodes `rdma statistic qp mode`, `qp set ... auto type,pid
    /// on` and `qp show`.
    #[test]
    fn counter_requests_are_encoded_as_rdma_statistic() {
        let mode = request(Command::QpCounterMode { port: 1 }, Some(3), 1);
        assert_eq!(header(&mode), ((5 << 10) + 17, 0x1));
        assert_eq!(
            words(&mode),
            [(1, 3), (3, 1), (attr::STAT_MODE, 2), (attr::STAT_RES, 19)]
        );
        let set = Command::SetQpCounterAuto {
            port: 2,
            mask: MASK_QP_TYPE | MASK_PID,
        };
        let set = request(set, Some(3), 1);
        assert_eq!(header(&set), ((5 << 10) + 16, 0x1));
        assert_eq!(
            words(&set),
            [
                (1, 3),
                (3, 2),
                (attr::STAT_RES, 19),
                (attr::STAT_MODE, 1),
                (attr::STAT_AUTO_MODE_MASK, 3)
            ]
        );
        let dump = request(Command::QpCounters, Some(3), 1);
        assert_eq!(header(&dump), ((5 << 10) + 17, 0x301));
        assert_eq!(words(&dump), [(1, 3), (attr::STAT_RES, 19)]);
    }

    fn read(command: Command, bytes: &[u8]) -> Result<Dump, ReplyError> {
        let mut dump = Dump::new(command, Some(3), 1);
        dump.feed(bytes).map(|()| dump)
    }

    #[test]
    fn port_modes_read_back() {
        let command = Command::QpCounterMode { port: 1 };
        for mode in [
            QpCounterMode::None,
            QpCounterMode::Auto {
                mask: MASK_QP_TYPE | MASK_PID,
            },
            QpCounterMode::Manual,
            QpCounterMode::Other(7),
        ] {
            let dump = read(command, &encode::mode(&rxe0(), 1, 1, mode)).unwrap();
            assert!(dump.is_done());
            assert_eq!(dump.qp_counter_mode, Some(mode));
        }
        assert_eq!(
            read(command, &encode::mode(&rxe0(), 2, 1, QpCounterMode::Manual)).unwrap_err(),
            ReplyError::OtherPort { got: 2, asked: 1 }
        );
        // Auto mode without its mask is not a reply of stat_get_doit_qp.
        let maskless = messages::message(
            command.message_type(),
            0,
            1,
            &[
                messages::u32(attr::DEV_INDEX, 3),
                messages::u32(attr::PORT_INDEX, 1),
                messages::u32(attr::STAT_MODE, MODE_AUTO),
            ]
            .concat(),
        );
        assert_eq!(
            read(command, &maskless).unwrap_err(),
            ReplyError::Missing(attr::STAT_AUTO_MODE_MASK)
        );
    }

    /// `rdma_counter_set_auto_mode` refuses a port without counter support with EOPNOTSUPP;
    /// `RDMA_NL_ADMIN_PERM` refuses a caller without CAP_NET_ADMIN with EPERM.
    #[test]
    fn a_mode_set_is_acknowledged_or_refused_with_its_errno() {
        let command = Command::SetQpCounterAuto { port: 1, mask: 3 };
        assert!(read(command, &encode::set(&rxe0(), 1, 1))
            .unwrap()
            .is_done());
        assert!(read(command, &encode::set_5_10(1, 1)).unwrap().is_done());
        for errno in [libc::EOPNOTSUPP, libc::EPERM, libc::EBUSY] {
            assert_eq!(
                read(command, &messages::error(1, errno)).unwrap_err(),
                ReplyError::Kernel(errno)
            );
        }
    }

    /// mlx5's Q counters (`mlx5_ib_q_cnts`), one counter per process in auto mode, over two
    /// datagrams; then a device without counters: DONE alone.
    #[test]
    fn a_counter_dump_reads_back() {
        let written = [
            encode::counter(
                1,
                Some(Holder::Process(812)),
                &[17, 18],
                &[("rx_write_requests", 1 << 33), ("out_of_sequence", 2)],
            ),
            encode::counter(2, None, &[], &[]),
            encode::counter(
                3,
                Some(Holder::Process(9)),
                &[40],
                &[("rx_read_requests", 5)],
            ),
        ];
        let first = encode::dump(&rxe0(), 1, &written[..2]);
        let second = [
            encode::dump(&rxe0(), 1, &written[2..]),
            messages::done(1, 0),
        ]
        .concat();
        let mut dump = Dump::new(Command::QpCounters, Some(3), 1);
        dump.feed(&first).unwrap();
        assert!(!dump.is_done());
        dump.feed(&second).unwrap();
        assert!(dump.is_done());
        assert_eq!(dump.qp_counters, written);
        let empty = read(Command::QpCounters, &messages::done(1, 0)).unwrap();
        assert!(empty.is_done() && empty.qp_counters.is_empty());
    }

    #[test]
    fn a_counter_without_its_values_or_qp_numbers_is_refused() {
        let entry = |fields: &[Vec<u8>]| {
            let entry = messages::attribute(attr::STAT_COUNTER_ENTRY, &fields.concat());
            let payload = [
                messages::u32(attr::DEV_INDEX, 3),
                messages::attribute(attr::STAT_COUNTER, &entry),
            ]
            .concat();
            messages::message(Command::QpCounters.message_type(), 0x2, 1, &payload)
        };
        let handle = [
            messages::u32(attr::PORT_INDEX, 1),
            messages::u32(attr::STAT_COUNTER_ID, 1),
        ];
        assert_eq!(
            read(Command::QpCounters, &entry(&handle)).unwrap_err(),
            ReplyError::Missing(attr::STAT_HWCOUNTERS)
        );
        let numberless =
            messages::nested(attr::RES_QP, &[messages::nested(attr::RES_QP_ENTRY, &[])]);
        assert_eq!(
            read(
                Command::QpCounters,
                &entry(&[&handle[..], &[numberless]].concat())
            )
            .unwrap_err(),
            ReplyError::Missing(attr::RES_LQPN)
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::netlink::rdma::message::{Command, Device, Dump};
    use crate::netlink::rdma::reply::NLA_HEADER_LEN;
    use proptest::prelude::*;

    fn qp_counter() -> impl Strategy<Value = QpCounter> {
        (
            1u32..=4,
            any::<u32>(),
            proptest::option::of(prop_oneof![
                any::<u32>().prop_map(Holder::Process),
                "[a-z_]{1,15}".prop_map(Holder::Kernel),
            ]),
            proptest::collection::vec(any::<u32>(), 0..8),
            proptest::collection::vec(
                ("[a-z_]{1,40}", any::<u64>()).prop_map(|(name, value)| Counter { name, value }),
                0..12,
            ),
        )
            .prop_map(|(port, id, holder, qp_numbers, counters)| QpCounter {
                port,
                id,
                holder,
                qp_numbers,
                counters,
            })
    }

    fn rxe0() -> Device {
        Device {
            index: 3,
            name: "rxe0".into(),
        }
    }

    proptest! {
        #[test]
        fn written_counters_read_back(written in proptest::collection::vec(qp_counter(), 0..12)) {
            let mut dump = Dump::new(Command::QpCounters, Some(3), 1);
            dump.feed(&encode::dump(&rxe0(), 1, &written)).unwrap();
            prop_assert_eq!(dump.qp_counters, written);
        }

        /// A dump cut short, grown or with bytes changed, and a mode reply likewise: an error
        /// or counters, never a panic, and never more counters than the bytes could hold.
        #[test]
        fn damaged_counter_replies_never_panic(
            written in proptest::collection::vec(qp_counter(), 0..6),
            cut in any::<proptest::sample::Index>(),
            flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..6),
            extra in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mode = encode::mode(&rxe0(), 1, 1, QpCounterMode::Auto { mask: 3 });
            for (command, reply) in [
                (Command::QpCounters, encode::dump(&rxe0(), 1, &written)),
                (Command::QpCounterMode { port: 1 }, mode),
                (Command::SetQpCounterAuto { port: 1, mask: 3 }, encode::set(&rxe0(), 1, 1)),
            ] {
                let mut damaged = reply[..cut.index(reply.len() + 1)].to_vec();
                for (at, byte) in &flips {
                    if !damaged.is_empty() {
                        let at = at.index(damaged.len());
                        damaged[at] ^= byte;
                    }
                }
                damaged.extend_from_slice(&extra);
                let mut dump = Dump::new(command, Some(3), 1);
                let _ = dump.feed(&damaged);
                prop_assert!(dump.qp_counters.len() <= damaged.len() / (3 * NLA_HEADER_LEN));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            for command in [
                Command::QpCounters,
                Command::QpCounterMode { port: 1 },
                Command::SetQpCounterAuto { port: 1, mask: 3 },
            ] {
                let _ = Dump::new(command, Some(3), 1).feed(&bytes);
                let message = crate::netlink::rdma::message::encode::message(command.message_type(), 0x2, 1, &bytes);
                let _ = Dump::new(command, Some(3), 1).feed(&message);
            }
        }
    }
}

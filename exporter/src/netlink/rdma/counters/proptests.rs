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

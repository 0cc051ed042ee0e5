use super::encode;
use super::*;
use crate::netlink::rdma::reply::NLA_HEADER_LEN;
use proptest::prelude::*;

fn holder() -> impl Strategy<Value = Holder> {
    prop_oneof![
        any::<u32>().prop_map(Holder::Process),
        "[a-z_]{1,20}".prop_map(Holder::Kernel),
        Just(Holder::Unknown),
    ]
}

fn entry(resource: Resource) -> impl Strategy<Value = Entry> {
    let queue_pair = resource == Resource::QueuePair;
    let memory_region = resource == Resource::MemoryRegion;
    (
        holder(),
        proptest::option::of(1u32..=255),
        any::<u8>(),
        any::<u8>(),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(
            move |(holder, port, qp_type, state, length, number)| Entry {
                holder,
                port,
                qp_number: queue_pair.then_some(number),
                qp_type: queue_pair.then_some(qp_type),
                qp_state: queue_pair.then_some(state),
                mr_length: memory_region.then_some(length),
            },
        )
}

fn resource() -> impl Strategy<Value = Resource> {
    proptest::sample::select(Resource::ALL.to_vec())
}

/// A whole dump: entries split over messages, the messages over datagrams, then DONE.
fn dump() -> impl Strategy<Value = (Resource, Vec<Entry>, Vec<Vec<u8>>)> {
    resource()
        .prop_flat_map(|resource| {
            (
                Just(resource),
                proptest::collection::vec(entry(resource), 0..40),
                1usize..8,
                1usize..4,
            )
        })
        .prop_map(|(resource, entries, per_message, per_datagram)| {
            let device = Device {
                index: 3,
                name: "rxe0".into(),
            };
            let mut messages: Vec<Vec<u8>> = entries
                .chunks(per_message)
                .map(|chunk| encode::resources(resource, &device, 1, chunk))
                .collect();
            messages.push(encode::done(1, 0));
            let datagrams = messages
                .chunks(per_datagram)
                .map(|chunk| chunk.concat())
                .collect();
            (resource, entries, datagrams)
        })
}

fn counter() -> impl Strategy<Value = Counter> {
    ("[a-z_]{1,40}", any::<u64>()).prop_map(|(name, value)| Counter { name, value })
}

proptest! {
    #[test]
    fn written_port_counters_read_back(
        written in proptest::collection::vec(counter(), 0..64),
        port in 1u32..=255,
    ) {
        let device = Device { index: 3, name: "rxe0".into() };
        let mut read = Dump::new(Command::PortCounters { port }, Some(3), 1);
        read.feed(&encode::port_counters(&device, port, 1, &written)).unwrap();
        prop_assert!(read.is_done());
        prop_assert_eq!(read.counters, written);
    }

    /// A real reply cut short or with bytes changed: an error or counters, never a panic,
    /// and never more counters than the bytes could hold.
    #[test]
    fn damaged_port_counters_never_panic(
        written in proptest::collection::vec(counter(), 0..32),
        cut in any::<proptest::sample::Index>(),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..6),
    ) {
        let device = Device { index: 3, name: "rxe0".into() };
        let reply = encode::port_counters(&device, 1, 1, &written);
        let mut damaged = reply[..cut.index(reply.len() + 1)].to_vec();
        for (at, byte) in &flips {
            if !damaged.is_empty() {
                let at = at.index(damaged.len());
                damaged[at] ^= byte;
            }
        }
        let mut read = Dump::new(Command::PortCounters { port: 1 }, Some(3), 1);
        let _ = read.feed(&damaged);
        prop_assert!(read.counters.len() <= damaged.len() / (3 * NLA_HEADER_LEN));
    }

    #[test]
    fn a_written_dump_reads_back((resource, entries, datagrams) in dump()) {
        let mut read = Dump::new(Command::Resources(resource), Some(3), 1);
        for datagram in &datagrams {
            read.feed(datagram).unwrap();
        }
        prop_assert!(read.is_done());
        prop_assert_eq!(read.entries, entries);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096), resource in resource()) {
        for command in [Command::Resources(resource), Command::Devices, Command::PortCounters { port: 1 }] {
            let _ = Dump::new(command, Some(3), 1).feed(&bytes);
            // The same bytes as the attributes of a reply whose header is right.
            let message = encode::message(command.message_type(), 0x2, 1, &bytes);
            let _ = Dump::new(command, Some(3), 1).feed(&message);
        }
    }

    /// A real dump cut short, grown, or with bytes changed: an error or entries, never a
    /// panic, and never more entries than were written.
    #[test]
    fn damaged_dumps_never_panic(
        (resource, entries, datagrams) in dump(),
        cut in any::<proptest::sample::Index>(),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..6),
        extra in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut read = Dump::new(Command::Resources(resource), Some(3), 1);
        for datagram in &datagrams {
            let mut damaged = datagram[..cut.index(datagram.len() + 1)].to_vec();
            for (at, byte) in &flips {
                if !damaged.is_empty() {
                    let at = at.index(damaged.len());
                    damaged[at] ^= byte;
                }
            }
            damaged.extend_from_slice(&extra);
            if read.feed(&damaged).is_err() {
                break;
            }
        }
        // A flipped length can split one entry's attributes into more entries only
        // within the bytes written, each at least one attribute header long.
        let written: usize = datagrams.iter().map(Vec::len).sum::<usize>() + extra.len() * datagrams.len();
        prop_assert!(read.entries.len() <= entries.len().max(written / NLA_HEADER_LEN));
    }
}

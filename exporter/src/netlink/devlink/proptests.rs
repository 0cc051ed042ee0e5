use proptest::prelude::*;

use super::tests::reporter_payload;
use super::*;

fn reporters() -> impl Strategy<Value = Reporter> {
    (
        "[a-z]{1,8}",
        "[0-9a-f:.]{1,16}",
        any::<Option<u32>>(),
        "[a-z_]{1,12}",
        any::<bool>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(bus, device, port, name, healthy, errors, recoveries)| Reporter {
                bus,
                device,
                port,
                name,
                healthy,
                errors,
                recoveries,
            },
        )
}

proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = health_reporter(&bytes);
    }

    #[test]
    fn a_valid_message_reads_back(reporter in reporters()) {
        prop_assert_eq!(health_reporter(&reporter_payload(&reporter)), Ok(reporter));
    }

    #[test]
    fn never_panics_on_a_cut_or_changed_message(
        reporter in reporters(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte: u8,
    ) {
        let mut bytes = reporter_payload(&reporter);
        let at = flip.index(bytes.len());
        bytes[at] = byte;
        let _ = health_reporter(&bytes[..cut.index(bytes.len())]);
        let _ = health_reporter(&bytes);
    }
}

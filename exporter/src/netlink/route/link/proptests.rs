use super::encode::{reply, vf_info};
use super::*;
use proptest::prelude::*;

fn counters() -> impl Strategy<Value = Vec<(VfCounter, u64)>> {
    proptest::collection::vec(any::<u64>(), 8).prop_flat_map(|values| {
        (0..=VfCounter::ALL.len()).prop_map(move |count| {
            VfCounter::ALL
                .into_iter()
                .zip(values.clone())
                .take(count)
                .collect()
        })
    })
}

proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), index: u32) {
        let _ = decode(&bytes, 1, index);
    }

    #[test]
    fn never_panics_on_a_cut_or_changed_reply(
        vfs in proptest::collection::vec(counters(), 0..4),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte: u8,
    ) {
        let entries: Vec<_> = (0..).zip(&vfs).map(|(vf, c)| vf_info(vf, c)).collect();
        let mut bytes = reply(1, 3, "ens1f0", Some(&entries));
        let at = flip.index(bytes.len());
        bytes[at] = byte;
        let _ = decode(&bytes[..cut.index(bytes.len())], 1, 3);
        let _ = decode(&bytes, 1, 3);
    }

    #[test]
    fn a_valid_reply_reads_back(vfs in proptest::collection::vec(counters(), 0..8)) {
        let entries: Vec<_> = (0..).zip(&vfs).map(|(vf, c)| vf_info(vf, c)).collect();
        let decoded = decode(&reply(9, 3, "ens1f0", Some(&entries)), 9, 3).unwrap();
        let expected: Vec<_> = (0..)
            .zip(vfs)
            .filter(|(_, counters)| !counters.is_empty())
            .map(|(vf, counters)| VfStats { vf, counters })
            .collect();
        prop_assert_eq!(decoded, expected);
    }
}

//! Any bytes, and valid objects with bytes changed: never a panic, and what is read is bounded.

use proptest::collection::vec;
use proptest::prelude::*;

use super::tests::Builder;
use super::*;

/// A valid object of any class and byte order, with up to 8 bytes overwritten anywhere.
fn damaged() -> impl Strategy<Value = Vec<u8>> {
    let changes = vec((any::<prop::sample::Index>(), any::<u8>()), 0..=8);
    (any::<bool>(), any::<bool>(), changes).prop_map(|(class64, big_endian, changes)| {
        let mut bytes = Builder::libibverbs(class64, big_endian).build();
        for (index, byte) in changes {
            let at = index.index(bytes.len());
            bytes[at] = byte;
        }
        bytes
    })
}

proptest! {
    #[test]
    fn any_bytes_read_or_fail_without_panicking(bytes in vec(any::<u8>(), 0..512)) {
        let _ = read_shared_object(&bytes, |_| true);
    }

    #[test]
    fn a_damaged_object_reads_or_fails_without_panicking(bytes in damaged()) {
        if let Ok(object) = read_shared_object(&bytes, |_| true) {
            prop_assert!(object.strings.len() <= MAX_KEPT_STRINGS);
            prop_assert!(object.definitions.len() <= MAX_VERSIONS);
        }
    }

    #[test]
    fn a_valid_object_reads_back(class64: bool, big_endian: bool) {
        let object = read_shared_object(&Builder::libibverbs(class64, big_endian).build(), |_| true);
        prop_assert_eq!(object.map(|o| o.definitions.len()), Ok(3));
    }
}

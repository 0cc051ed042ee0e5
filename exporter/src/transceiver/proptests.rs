//! Any bytes in any pages: never a panic; a decoded module's lanes are in range, and it has
//! no more flags or thresholds than its layout holds.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;

use super::*;

/// A page of arbitrary bytes, of any length around a half page's.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=HALF_PAGE + 8)
}

/// Memory whose identifier is one the decoders read most of the time.
fn memory() -> impl Strategy<Value = Memory> {
    let identifier = prop_oneof![
        3 => select(vec![0x03u8, 0x0C, 0x0D, 0x11, 0x18, 0x19, 0x1E]),
        1 => any::<u8>(),
    ];
    let pages = btree_map(select(vec![0u8, 1, 2, 3, 0x11]), bytes(), 0..=5);
    (identifier, bytes(), pages, bytes()).prop_map(|(identifier, mut lower, upper, a2)| {
        if let Some(first) = lower.first_mut() {
            *first = identifier;
        }
        Memory { lower, upper, a2 }
    })
}

proptest! {
    #[test]
    fn any_memory_decodes_or_fails_without_panicking(memory in memory()) {
        let _ = wanted(&memory.lower);
        if let Ok(module) = decode(&memory) {
            prop_assert!(module.readings.iter().all(|r| r.lane.is_none_or(|l| (1..=8).contains(&l))));
            prop_assert!(module.flags.len() <= 4 * (2 + 3 * 8));
            prop_assert!(module.thresholds.len() <= 4 * 5);
            prop_assert!(module.vendor.bytes().all(|b| (0x20..0x7f).contains(&b)));
        }
    }

    /// Every full-length image of a known layout decodes: only the identity's bytes can make it
    /// garbage.
    #[test]
    fn full_pages_with_printable_identity_decode(
        identifier in select(vec![0x03u8, 0x0C, 0x0D, 0x11, 0x18, 0x19, 0x1E]),
        fill in vec(any::<u8>(), 6 * HALF_PAGE),
        text in 0x20u8..0x7f,
    ) {
        let mut pages = fill.chunks(HALF_PAGE).map(<[u8]>::to_vec);
        let mut memory = Memory {
            lower: pages.next().unwrap(),
            upper: [0u8, 1, 2, 3].into_iter().zip(pages.by_ref()).collect(),
            a2: pages.next().unwrap(),
        };
        memory.lower[0] = identifier;
        let page = if identifier == 0x03 { &mut memory.lower } else { memory.upper.get_mut(&0).unwrap() };
        for identity in [1..17, 20..36, 38..56, 68..84] {
            page[identity].fill(text);
        }
        memory.upper.insert(0x11, memory.a2.clone());
        prop_assert!(decode(&memory).is_ok());
    }
}

use super::tests::{encode, entry};
use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::Old), Just(Layout::Compat), Just(Layout::New)]
}

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    let flags = prop_oneof![Just(0x303), Just(0x0a03), Just(3), any::<i32>()];
    let one = (
        flags,
        "lib[a-z0-9_]{1,12}\\.so\\.[0-9]{1,2}",
        "(/[a-z0-9_.-]{1,10}){1,4}",
    );
    vec(
        one.prop_map(|(flags, soname, path)| entry(flags, &soname, &path, 0)),
        0..40,
    )
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let _ = Cache::parse(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_magic_never_panic(
        magic in prop_oneof![Just(OLD_MAGIC), Just(NEW_MAGIC)],
        rest in vec(any::<u8>(), 0..512),
    ) {
        let bytes = [magic, &rest].concat();
        if let Ok(cache) = Cache::parse(&bytes) {
            prop_assert!(cache.entries.len() <= bytes.len() / OLD_ENTRY_BYTES);
        }
    }

    #[test]
    fn an_encoded_cache_is_read_back(layout in layout(), entries in entries()) {
        let parsed = Cache::parse(&encode(layout, &entries, 2));
        // glibc wants more than the header (`cachesize > sizeof *cache`): an empty old or new
        // cache is none.
        if entries.is_empty() && layout != Layout::Compat {
            prop_assert_eq!(parsed, Err(LdCacheError::NoMagic));
            return Ok(());
        }
        let cache = parsed.unwrap();
        prop_assert_eq!(cache.layout, layout);
        prop_assert_eq!(&cache.entries, &entries);
        for entry in &entries {
            let first = entries.iter().find(|e| e.soname == entry.soname && e.flags == DEFAULT_ID);
            prop_assert_eq!(cache.lookup(&entry.soname), first);
        }
    }

    #[test]
    fn a_damaged_cache_never_panics(
        layout in layout(),
        entries in entries(),
        damage in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode(layout, &entries, 2);
        for (at, byte) in damage {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        let _ = Cache::parse(&bytes);
    }
}

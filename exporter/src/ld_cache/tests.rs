use super::*;

/// A cache as glibc's `ldconfig` writes it (`save_cache` in `elf/cache.c`), field by field from
/// `sysdeps/generic/dl-cache.h`: `struct cache_file` (11-byte magic, a pad byte, `nlibs`),
/// `struct file_entry` (`flags`, `key`, `value`), `struct cache_file_new` (magic and version,
/// `nlibs`, `len_strings`, the `flags` byte, 3 pad bytes, `extension_offset`, 3 unused words)
/// and `struct file_entry_new` (`flags`, `key`, `value`, `osversion`, `hwcap`). One string table
/// at the end serves both tables of the compat layout, each with its own base.
pub(super) fn encode(layout: Layout, entries: &[Entry], endian_flags: u8) -> Vec<u8> {
    let mut strings = Vec::new();
    let mut offsets = Vec::new();
    for entry in entries {
        let key = strings.len();
        strings.extend_from_slice(entry.soname.as_bytes());
        strings.push(0);
        let value = strings.len();
        strings.extend_from_slice(entry.path.as_bytes());
        strings.push(0);
        offsets.push((key, value));
    }
    let count = entries.len();
    let old_part = match layout {
        Layout::New => 0,
        Layout::Old | Layout::Compat => OLD_HEADER_BYTES + count * OLD_ENTRY_BYTES,
    };
    let new_start = match layout {
        Layout::New => 0,
        Layout::Compat => old_part.next_multiple_of(8),
        Layout::Old => old_part,
    };
    let strings_at = match layout {
        Layout::Old => old_part,
        Layout::Compat | Layout::New => new_start + NEW_HEADER_BYTES + count * NEW_ENTRY_BYTES,
    };
    let word =
        |out: &mut Vec<u8>, value: usize| out.extend_from_slice(&(value as u32).to_ne_bytes());
    let mut out = Vec::new();
    if layout != Layout::New {
        out.extend_from_slice(b"ld.so-1.7.0\0");
        word(&mut out, count);
        for (entry, (key, value)) in entries.iter().zip(&offsets) {
            out.extend_from_slice(&entry.flags.to_ne_bytes());
            word(&mut out, strings_at - old_part + key);
            word(&mut out, strings_at - old_part + value);
        }
        out.resize(new_start, 0);
    }
    if layout != Layout::Old {
        out.extend_from_slice(b"glibc-ld.so.cache1.1");
        word(&mut out, count);
        word(&mut out, strings.len());
        out.extend_from_slice(&[endian_flags, 0, 0, 0]);
        out.extend_from_slice(&[0; 16]);
        for (entry, (key, value)) in entries.iter().zip(&offsets) {
            out.extend_from_slice(&entry.flags.to_ne_bytes());
            word(&mut out, strings_at - new_start + key);
            word(&mut out, strings_at - new_start + value);
            word(&mut out, 0);
            out.extend_from_slice(&entry.hwcap.to_ne_bytes());
        }
    }
    out.extend_from_slice(&strings);
    out
}

pub(super) fn entry(flags: i32, soname: &str, path: &str, hwcap: u64) -> Entry {
    Entry {
        flags,
        soname: soname.into(),
        path: path.into(),
        hwcap,
    }
}

const LAYOUTS: [Layout; 3] = [Layout::Old, Layout::Compat, Layout::New];

/// What the incident's node had: the stale copy in /usr/local/lib64 listed before the new one.
fn incident() -> Vec<Entry> {
    vec![
        entry(
            0x303,
            "libibverbs.so.1",
            "/usr/local/lib64/libibverbs.so.1",
            0,
        ),
        entry(0x303, "libibverbs.so.1", "/usr/lib64/libibverbs.so.1", 0),
        entry(0x303, "libmlx5.so.1", "/usr/lib64/libmlx5.so.1", 0),
    ]
}

#[test]
fn each_layout_is_read_with_its_own_string_base() {
    for layout in LAYOUTS {
        let cache = Cache::parse(&encode(layout, &incident(), 2)).unwrap();
        assert_eq!(cache.layout, layout);
        assert_eq!(cache.entries, incident(), "{layout:?}");
    }
}

#[test]
fn the_linker_takes_the_first_entry_of_the_soname_in_file_order() {
    for layout in LAYOUTS {
        let cache = Cache::parse(&encode(layout, &incident(), 2)).unwrap();
        let taken = cache.lookup("libibverbs.so.1").unwrap();
        assert_eq!(taken.path, "/usr/local/lib64/libibverbs.so.1", "{layout:?}");
        assert_eq!(cache.lookup("libibverbs.so"), None);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn entries_of_other_abis_and_hwcaps_are_passed_over() {
    let entries = vec![
        // i386's libc6 (FLAG_ELF_LIBC6 alone) and x32 (FLAG_X8664_LIBX32 | FLAG_ELF_LIBC6).
        entry(0x0003, "libibverbs.so.1", "/usr/lib32/libibverbs.so.1", 0),
        entry(0x0803, "libibverbs.so.1", "/usr/libx32/libibverbs.so.1", 0),
        // A glibc-hwcaps copy (index 0 of the hwcaps section, ISA level bits set).
        entry(
            0x303,
            "libibverbs.so.1",
            "/usr/lib64/glibc-hwcaps/x86-64-v3/libibverbs.so.1",
            HWCAP_EXTENSION | 1 << 32,
        ),
        // A legacy hwcap subdirectory copy (skipped since glibc 2.37).
        entry(
            0x303,
            "libibverbs.so.1",
            "/usr/lib64/tls/libibverbs.so.1",
            1 << 63,
        ),
        entry(0x303, "libibverbs.so.1", "/usr/lib64/libibverbs.so.1", 0),
    ];
    let cache = Cache::parse(&encode(Layout::New, &entries, 2)).unwrap();
    assert!(cache.entries[2].is_hwcaps_extension());
    assert!(!cache.entries[3].is_hwcaps_extension());
    assert_eq!(
        cache.lookup("libibverbs.so.1").unwrap().path,
        "/usr/lib64/libibverbs.so.1"
    );
}

#[test]
fn a_cache_of_the_other_byte_order_or_marked_invalid_is_ignored() {
    let other = if cfg!(target_endian = "little") { 3 } else { 2 };
    for layout in [Layout::Compat, Layout::New] {
        let bytes = encode(layout, &incident(), other);
        assert_eq!(
            Cache::parse(&bytes),
            Err(LdCacheError::OtherByteOrder(other))
        );
        // cache_file_new_flags_endian_invalid.
        let bytes = encode(layout, &incident(), 1);
        assert_eq!(Cache::parse(&bytes), Err(LdCacheError::OtherByteOrder(1)));
        // Unset: written before glibc 2.33.
        assert!(Cache::parse(&encode(layout, &incident(), 0)).is_ok());
    }
}

#[test]
fn a_count_past_the_end_of_the_file_is_refused() {
    for (layout, count_at) in [(Layout::Old, 12), (Layout::New, 20), (Layout::Compat, 12)] {
        let mut bytes = encode(layout, &incident(), 2);
        bytes[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(
            matches!(
                Cache::parse(&bytes),
                Err(LdCacheError::Truncated {
                    entries: u32::MAX,
                    ..
                })
            ),
            "{layout:?}"
        );
    }
    // The compat layout's inner table, checked on its own.
    let mut bytes = encode(Layout::Compat, &incident(), 2);
    let inner = (16 + 3 * 12usize).next_multiple_of(8) + 20;
    bytes[inner..inner + 4].copy_from_slice(&1000u32.to_ne_bytes());
    assert!(matches!(
        Cache::parse(&bytes),
        Err(LdCacheError::Truncated { entries: 1000, .. })
    ));
}

#[test]
fn an_entry_whose_strings_are_not_in_the_file_is_skipped() {
    let mut bytes = encode(Layout::New, &incident(), 2);
    // The first entry's value (`struct file_entry_new` at 48, value at +8) far past the end.
    bytes[56..60].copy_from_slice(&0x00ff_ffffu32.to_ne_bytes());
    let cache = Cache::parse(&bytes).unwrap();
    assert_eq!(cache.entries, incident()[1..]);
    assert_eq!(
        cache.lookup("libibverbs.so.1").unwrap().path,
        "/usr/lib64/libibverbs.so.1"
    );
}

#[test]
fn a_corrupt_extension_directory_drops_the_cache() {
    let base = encode(Layout::New, &incident(), 2);
    let with_extension = |offset: u32, directory: &[u32]| {
        let mut bytes = base.clone();
        bytes[32..36].copy_from_slice(&offset.to_ne_bytes());
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        for word in directory {
            bytes.extend_from_slice(&word.to_ne_bytes());
        }
        bytes
    };
    let at = base.len().next_multiple_of(4) as u32;
    // A generator section (tag 0) of 4 bytes at the directory itself: valid.
    let good = with_extension(at, &[EXTENSION_MAGIC, 1, 0, 0, at, 4]);
    assert_eq!(Cache::parse(&good).unwrap().entries, incident());
    for bad in [
        with_extension(at, &[0x1234_5678, 0]),
        with_extension(at + 2, &[EXTENSION_MAGIC, 0]),
        with_extension(at, &[EXTENSION_MAGIC, 2, 0, 0, at, 4]),
        with_extension(at, &[EXTENSION_MAGIC, 1, 0, 0, at, 4096]),
        with_extension(at + 64, &[]),
    ] {
        assert_eq!(Cache::parse(&bad), Err(LdCacheError::BadExtension));
    }
}

#[test]
fn an_old_header_without_the_new_table_is_the_old_layout() {
    let mut bytes = encode(Layout::Compat, &incident(), 2);
    let inner = (16 + 3 * 12usize).next_multiple_of(8);
    bytes[inner] = b'X';
    let cache = Cache::parse(&bytes).unwrap();
    assert_eq!(cache.layout, Layout::Old);
    // The old table's offsets count from the end of its entries, over the new table's bytes.
    assert_eq!(cache.entries, incident());
}

#[test]
fn what_is_not_a_cache_is_said() {
    for bytes in [
        &b""[..],
        b"ld.so-1.7.0",
        b"glibc-ld.so.cache1.1",
        b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\0\0",
    ] {
        assert_eq!(Cache::parse(bytes), Err(LdCacheError::NoMagic), "{bytes:?}");
    }
}

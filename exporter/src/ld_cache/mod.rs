//! `ld.so.cache`, the dynamic linker's cache of sonames, decoded in its three layouts, and the
//! entry the linker takes for a soname. Plain code, no I/O: the caller reads the file (bounded
//! by [`MAX_CACHE_BYTES`]).
//!
//! The layouts, from glibc's `sysdeps/generic/dl-cache.h` and how `_dl_maybe_load_ldsocache` in
//! `elf/dl-cache.c` tells them apart:
//! - old (`ld.so-1.7.0`, libc5 and glibc 2.0/2.1): a 16-byte header (11-byte magic, pad, `nlibs`)
//!   and 12-byte `struct file_entry {flags, key, value}`; key and value are string offsets from
//!   the end of the entries;
//! - compat (glibc 2.2 to 2.31's default: RHEL 7/8, Ubuntu 18.04/20.04): the old cache, then at
//!   the next 8-byte boundary (`ALIGN_CACHE`) a `glibc-ld.so.cache1.1` table whose string
//!   offsets count from that table's start. The linker reads only the new table;
//! - new (the default since 2.32): the `glibc-ld.so.cache1.1` table alone (48-byte
//!   `struct cache_file_new`, 24-byte `struct file_entry_new {flags, key, value, osversion,
//!   hwcap}`), offsets from the file's start; since 2.33 its `flags` byte says the byte order
//!   (`cache_file_new_flags_endian_*`: a cache of the other order is ignored), and entries whose
//!   `hwcap` is the `DL_CACHE_HWCAP_EXTENSION` bit (62) name a `glibc-hwcaps` subdirectory copy.
//!
//! The linker's choice ([`Cache::lookup`]) is `search_cache` of glibc's `elf/dl-cache.c` for a
//! cache `ldconfig` wrote (entries sorted by name): among the entries for the soname, in file
//! order, the first whose flags are exactly the architecture's `_DL_CACHE_DEFAULT_ID`
//! (`sysdeps/unix/sysv/linux/x86_64/dl-cache.h`: `0x303`, `FLAG_X8664_LIB64 | FLAG_ELF_LIBC6`;
//! `.../aarch64/dl-cache.h`: `FLAG_AARCH64_LIB64 | FLAG_ELF_LIBC6`, `0xa03`), skipping entries
//! with a legacy hwcap (skipped since glibc 2.37) and, since this module does not model the
//! CPU's glibc-hwcaps levels, the hwcaps-extension entries too: on a node with an
//! `x86-64-v3` copy of a library, the linker may take that copy instead.

pub mod conf;
pub mod library_path;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// A cache is read whole; a node's is tens to hundreds of KiB (about 70 bytes a library).
pub const MAX_CACHE_BYTES: usize = 16 << 20;
/// Entries decoded at most; more is not a cache `ldconfig` wrote for one node.
pub const MAX_ENTRIES: usize = 1 << 18;
/// `PATH_MAX`: a soname or path longer than this is not one.
const MAX_STRING_BYTES: usize = 4096;

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const OLD_HEADER_BYTES: usize = 16;
const OLD_ENTRY_BYTES: usize = 12;
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const NEW_HEADER_BYTES: usize = 48;
const NEW_ENTRY_BYTES: usize = 24;
/// `__alignof__ (struct cache_file_new)`, which `ALIGN_CACHE` rounds the compat table's offset to.
const NEW_ALIGN: usize = 8;
/// `cache_file_new_flags_endian_mask`, and the value `cache_file_new_flags_endian_current` has.
const ENDIAN_MASK: u8 = 3;
const ENDIAN_CURRENT: u8 = if cfg!(target_endian = "little") { 2 } else { 3 };
/// `cache_extension_magic`: `(uint32_t) -358342284`.
const EXTENSION_MAGIC: u32 = 0xeaa4_2174;
/// `DL_CACHE_HWCAP_EXTENSION`.
pub const HWCAP_EXTENSION: u64 = 1 << 62;
/// `DL_CACHE_HWCAP_ISA_LEVEL_MASK`: the ISA level bits above bit 32 that an extension entry
/// may also carry (`dl_cache_hwcap_extension`).
const HWCAP_ISA_LEVEL_MASK: u64 = (1 << 10) - 1;

/// `_DL_CACHE_DEFAULT_ID` of the architecture the exporter is built for: the only flags its
/// `_dl_cache_check_flags` accepts.
#[cfg(target_arch = "x86_64")]
pub const DEFAULT_ID: i32 = 0x0303;
#[cfg(target_arch = "aarch64")]
pub const DEFAULT_ID: i32 = 0x0a03;

/// Which of the three layouts a cache has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Old,
    Compat,
    New,
}

/// One entry, as the linker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub flags: i32,
    pub soname: String,
    pub path: String,
    /// Zero in the old layout.
    pub hwcap: u64,
}

impl Entry {
    /// `dl_cache_hwcap_extension`: only bit 62 set above bit 32, the ISA level bits aside.
    pub fn is_hwcaps_extension(&self) -> bool {
        (self.hwcap >> 32) & !HWCAP_ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32
    }
}

/// A decoded cache: its entries in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub layout: Layout,
    pub entries: Vec<Entry>,
}

/// Why bytes are not a cache the linker would use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LdCacheError {
    #[error("no ld.so.cache magic")]
    NoMagic,
    #[error("{entries} entries do not fit in {bytes} bytes")]
    Truncated { entries: u32, bytes: usize },
    #[error("{0} entries, more than the {MAX_ENTRIES} read")]
    TooManyEntries(u32),
    #[error("written for the other byte order (flags {0:#x}), which the linker ignores")]
    OtherByteOrder(u8),
    #[error("its extension directory is corrupt, so the linker ignores it")]
    BadExtension,
}

impl Cache {
    /// Decodes a whole cache file; never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Cache, LdCacheError> {
        if bytes.len() > NEW_HEADER_BYTES && bytes.starts_with(NEW_MAGIC) {
            let entries = new_table(bytes, 0)?;
            return Ok(Cache {
                layout: Layout::New,
                entries,
            });
        }
        if bytes.len() <= OLD_HEADER_BYTES || !bytes.starts_with(OLD_MAGIC) {
            return Err(LdCacheError::NoMagic);
        }
        let count = u32_at(bytes, 12);
        let fits = (bytes.len() - OLD_HEADER_BYTES) / OLD_ENTRY_BYTES;
        if count as usize > fits {
            return Err(LdCacheError::Truncated {
                entries: count,
                bytes: bytes.len(),
            });
        }
        let strings = OLD_HEADER_BYTES + count as usize * OLD_ENTRY_BYTES;
        let new_start = strings.next_multiple_of(NEW_ALIGN);
        let has_new = bytes.len() >= new_start + NEW_HEADER_BYTES
            && bytes[new_start..].starts_with(NEW_MAGIC);
        if has_new {
            let entries = new_table(bytes, new_start)?;
            return Ok(Cache {
                layout: Layout::Compat,
                entries,
            });
        }
        let entries = decode_entries(bytes, OLD_HEADER_BYTES, count, OLD_ENTRY_BYTES, strings)?;
        Ok(Cache {
            layout: Layout::Old,
            entries,
        })
    }

    /// The entry the linker takes for `soname` (see the module's doc), if any.
    pub fn lookup(&self, soname: &str) -> Option<&Entry> {
        self.entries.iter().find(|entry| {
            entry.soname == soname
                && entry.flags == DEFAULT_ID
                && entry.hwcap == 0
                && !entry.is_hwcaps_extension()
        })
    }
}

/// The `glibc-ld.so.cache1.1` table at `start`: its byte order, extension directory and
/// entries, strings counted from `start`.
fn new_table(bytes: &[u8], start: usize) -> Result<Vec<Entry>, LdCacheError> {
    let count = u32_at(bytes, start + 20);
    let flags = bytes[start + 28];
    // `cache_file_new_matches_endian`.
    if flags != 0 && flags & ENDIAN_MASK != ENDIAN_CURRENT {
        return Err(LdCacheError::OtherByteOrder(flags));
    }
    let fits = (bytes.len() - start - NEW_HEADER_BYTES) / NEW_ENTRY_BYTES;
    if count as usize > fits {
        return Err(LdCacheError::Truncated {
            entries: count,
            bytes: bytes.len(),
        });
    }
    check_extensions(bytes, u32_at(bytes, start + 32) as usize)?;
    decode_entries(
        bytes,
        start + NEW_HEADER_BYTES,
        count,
        NEW_ENTRY_BYTES,
        start,
    )
}

/// `cache_extension_load`: an extension directory (offsets from the file's start) that is
/// misaligned, has another magic or reaches past the file makes the linker drop the cache.
fn check_extensions(bytes: &[u8], offset: usize) -> Result<(), LdCacheError> {
    if offset == 0 {
        return Ok(());
    }
    let bad = Err(LdCacheError::BadExtension);
    if !offset.is_multiple_of(4) || offset.saturating_add(8) > bytes.len() {
        return bad;
    }
    if u32_at(bytes, offset) != EXTENSION_MAGIC {
        return bad;
    }
    let sections = u32_at(bytes, offset + 4) as usize;
    let end = sections
        .checked_mul(16)
        .and_then(|size| size.checked_add(offset + 8));
    let Some(end) = end.filter(|&end| end <= bytes.len()) else {
        return bad;
    };
    for section in (offset + 8..end).step_by(16) {
        let start = u32_at(bytes, section + 8) as u64;
        let size = u32_at(bytes, section + 12) as u64;
        if start + size > bytes.len() as u64 {
            return bad;
        }
    }
    Ok(())
}

/// `count` entries of `size` bytes from `first`, their strings counted from `strings`. An entry
/// whose key or value is not a string in the file is skipped, as `_dl_cache_verify_ptr` makes
/// the linker skip it.
fn decode_entries(
    bytes: &[u8],
    first: usize,
    count: u32,
    size: usize,
    strings: usize,
) -> Result<Vec<Entry>, LdCacheError> {
    if count as usize > MAX_ENTRIES {
        return Err(LdCacheError::TooManyEntries(count));
    }
    let table = &bytes[strings.min(bytes.len())..];
    let entries = (0..count as usize).filter_map(|index| {
        let at = first + index * size;
        let hwcap = if size == NEW_ENTRY_BYTES {
            u64_at(bytes, at + 16)
        } else {
            0
        };
        Some(Entry {
            flags: u32_at(bytes, at) as i32,
            soname: string_at(table, u32_at(bytes, at + 4))?,
            path: string_at(table, u32_at(bytes, at + 8))?,
            hwcap,
        })
    });
    Ok(entries.collect())
}

/// The NUL-terminated string at `offset` of the string table.
fn string_at(table: &[u8], offset: u32) -> Option<String> {
    let rest = table.get(offset as usize..)?;
    let rest = &rest[..rest.len().min(MAX_STRING_BYTES + 1)];
    let end = rest.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// The caller has checked that the 4 bytes are in `bytes`; the linker reads its own byte order.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(word)
}

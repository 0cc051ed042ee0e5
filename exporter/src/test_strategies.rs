//! Proptest strategies shared by the parsers' property tests (each parser's `mod proptests`):
//! hostile input built from a parser's own tokens mixed with arbitrary characters or bytes, so
//! that generated input gets past a parser's first checks instead of failing them all alike.
//! Short most of the time; one case in ten is a short input repeated up to far more than a page,
//! which is what a broken or hostile file gives.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};

/// Pieces (tokens or arbitrary characters) in one short input.
const MAX_PIECES: usize = 40;
/// How long a repeated input grows: more than a sysfs page (4 KiB) and a micras or Nova
/// file, less than the 1 MiB bound of `/proc/modules`, so the whole suite stays fast.
const MAX_LONG_BYTES: usize = 256 << 10;

/// Text made of `tokens` and arbitrary characters.
pub fn text(tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => select(tokens).prop_map(|token| token.as_bytes().to_vec()),
        1 => any::<char>().prop_map(|c| c.to_string().into_bytes()),
    ];
    // Every piece is UTF-8, so their concatenation is.
    joined(piece).prop_map(|bytes| String::from_utf8(bytes).expect("pieces are UTF-8"))
}

/// Bytes made of `tokens` and arbitrary bytes, so not UTF-8 in most cases.
pub fn bytes(tokens: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        3 => select(tokens).prop_map(|token| token.as_bytes().to_vec()),
        1 => vec(any::<u8>(), 1..4),
    ];
    joined(piece)
}

/// Lines, each one of `line`, joined by `\n` (the last one ended too, as files are).
pub fn lines(line: impl Strategy<Value = String>, max: usize) -> impl Strategy<Value = String> {
    vec(line, 0..=max).prop_map(|lines| lines.iter().map(|line| format!("{line}\n")).collect())
}

/// A kernel module name as the kernel spells it (MODULE_NAME_LEN allows 55 characters).
pub const MODULE_NAME: &str = "[a-z][a-z0-9_]{0,54}";

/// fnmatch pattern tokens (modules.alias patterns, modprobe.d install patterns).
pub const GLOB_TOKENS: &[&str] = &["*", "?", "[", "]", "!", "^", "-", "a", "b"];

fn joined(piece: impl Strategy<Value = Vec<u8>> + Clone) -> impl Strategy<Value = Vec<u8>> {
    let short = |pieces| vec(piece.clone(), pieces).prop_map(|pieces| pieces.concat());
    prop_oneof![
        9 => short(0..MAX_PIECES),
        1 => (short(1..MAX_PIECES), any::<Index>()).prop_map(|(s, times)| {
            s.repeat(1 + times.index(MAX_LONG_BYTES / s.len().max(1)))
        }),
    ]
}

/// Bytes made of binary `tokens` (magic numbers, headers with their checksums) and arbitrary
/// bytes, for formats whose tokens are not text.
pub fn binary(tokens: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        3 => select(tokens).prop_map(<[u8]>::to_vec),
        1 => vec(any::<u8>(), 1..4),
    ];
    joined(piece)
}

//! The ethtool ioctl (`SIOCETHTOOL`): a netdev's statistics (`ethtool -S`). The command structs are built and read here as bytes, as `include/uapi/linux/
//! ethtool.h` lays them out (native endian, no padding: each is `u32`s, then a `u64` array
//! at offset 8 or bytes); `socket.rs` is the only code that hands them to the kernel.
//!
//! Who may ask (`__dev_ethtool` in `net/ethtool/ioctl.c`, its "Allow some commands to be
//! done by anyone" list): `ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS` and `ETHTOOL_GSTATS` need
//! no capability. `ETHTOOL_GMODULEINFO` and `ETHTOOL_GMODULEEEPROM` (a module's memory on
//! kernels before 5.13, not read here) are not on the list and need CAP_NET_ADMIN.

pub mod socket;

/// `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS`, `ETHTOOL_GSSET_INFO` (`include/uapi/linux/ethtool.h`).
const GSTRINGS: u32 = 0x1b;
const GSTATS: u32 = 0x1d;
const GSSET_INFO: u32 = 0x37;
/// `ETH_SS_STATS`, the string set of `ethtool -S`.
const ETH_SS_STATS: u32 = 1;
/// `ETH_GSTRING_LEN`: each name's room in a string table, its NUL included.
pub const ETH_GSTRING_LEN: usize = 32;

/// `struct ethtool_sset_info`: cmd, reserved, `u64 sset_mask`, then one `u32` count per set
/// the mask keeps.
const SSET_INFO_LEN: usize = 16 + 4;
/// `struct ethtool_gstrings`: cmd, string_set, len, then `len * ETH_GSTRING_LEN` bytes.
const GSTRINGS_HEADER: usize = 12;
/// `struct ethtool_stats`: cmd, n_stats, then `n_stats` `u64`s.
const GSTATS_HEADER: usize = 8;
/// What an answer says that cannot be right.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The netdev's count of statistics is not the one asked with: it changed since (mlx5e
    /// adds per-channel statistics with channels). Kernels with "ethtool: Avoid overflowing
    /// userspace buffer on stats query" answer 0 then; older ones their new count.
    #[error("the statistics count changed from {asked} to {answered}")]
    CountChanged { asked: u32, answered: u32 },
    #[error("malformed {0} answer")]
    Malformed(&'static str),
}

fn word(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn command(cmd: u32, len: usize, words: &[u32]) -> Vec<u8> {
    let mut out = vec![0; len];
    for (at, value) in std::iter::once(cmd)
        .chain(words.iter().copied())
        .enumerate()
    {
        out[at * 4..at * 4 + 4].copy_from_slice(&value.to_ne_bytes());
    }
    out
}

/// The entries of an answer whose count is the word at `count_at`, right after which they
/// start, each `size` bytes: the `count` asked for, or the count changed.
fn entries<'a>(
    answer: &'a [u8],
    command: &'static str,
    count_at: usize,
    count: u32,
    size: usize,
) -> Result<&'a [u8], AnswerError> {
    let answered = word(answer, count_at).ok_or(AnswerError::Malformed(command))?;
    if answered != count {
        return Err(AnswerError::CountChanged {
            asked: count,
            answered,
        });
    }
    (answer.get(count_at + 4..))
        .filter(|entries| entries.len() == count as usize * size)
        .ok_or(AnswerError::Malformed(command))
}

/// `ETHTOOL_GSSET_INFO` asking for the count of `ETH_SS_STATS`.
pub fn sset_info_request() -> Vec<u8> {
    let mut out = command(GSSET_INFO, SSET_INFO_LEN, &[]);
    out[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
    out
}

/// The count of statistics in an answered `ETHTOOL_GSSET_INFO`; `None` where the kernel
/// cleared the set's bit (`ethtool_get_sset_info`: the driver has no `get_sset_count`, or it
/// failed for the set): the netdev has no statistics.
pub fn sset_info_answer(answer: &[u8]) -> Result<Option<u32>, AnswerError> {
    let malformed = AnswerError::Malformed("ETHTOOL_GSSET_INFO");
    let mask = answer.get(8..16).ok_or(malformed.clone())?;
    let mask = u64::from_ne_bytes(mask.try_into().expect("8 bytes"));
    if mask & (1 << ETH_SS_STATS) == 0 {
        return Ok(None);
    }
    word(answer, 16).map(Some).ok_or(malformed)
}

/// `ETHTOOL_GSTRINGS` of `ETH_SS_STATS`, with room for `count` names.
pub fn strings_request(count: u32) -> Vec<u8> {
    let len = GSTRINGS_HEADER + count as usize * ETH_GSTRING_LEN;
    command(GSTRINGS, len, &[ETH_SS_STATS, count])
}

/// The names in an answered `ETHTOOL_GSTRINGS` asked with `count`: each up to its NUL, as
/// the driver wrote it (`ethtool_get_strings`); a name that is not UTF-8 is kept lossily (it
/// matches no name looked for).
pub fn strings_answer(answer: &[u8], count: u32) -> Result<Vec<String>, AnswerError> {
    let table = entries(answer, "ETHTOOL_GSTRINGS", 8, count, ETH_GSTRING_LEN)?;
    Ok(table
        .chunks_exact(ETH_GSTRING_LEN)
        .map(|name| {
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        })
        .collect())
}

/// `ETHTOOL_GSTATS`, with room for `count` values.
pub fn stats_request(count: u32) -> Vec<u8> {
    command(GSTATS, GSTATS_HEADER + count as usize * 8, &[count])
}

/// The values in an answered `ETHTOOL_GSTATS` asked with `count`, in the string table's
/// order (`ethtool_get_stats`).
pub fn stats_answer(answer: &[u8], count: u32) -> Result<Vec<u64>, AnswerError> {
    let values = entries(answer, "ETHTOOL_GSTATS", 4, count, 8)?;
    Ok(values
        .chunks_exact(8)
        .map(|value| u64::from_ne_bytes(value.try_into().expect("8 bytes")))
        .collect())
}

#[cfg(test)]
mod tests;

use super::socket::Socket;
use super::*;

/// `name` in a table slot as a driver's `get_strings` writes it (`strscpy`/`ethtool_puts`):
/// the name, then NULs up to ETH_GSTRING_LEN.
fn slot(name: &str) -> [u8; ETH_GSTRING_LEN] {
    let mut slot = [0; ETH_GSTRING_LEN];
    slot[..name.len()].copy_from_slice(name.as_bytes());
    slot
}

/// An `ETHTOOL_GSTRINGS` answer as `ethtool_get_strings` leaves it: cmd, string_set, the
/// count it wrote, then the table.
fn strings_answered(count: u32, names: &[&str]) -> Vec<u8> {
    let mut answer = Vec::new();
    answer.extend(0x1bu32.to_ne_bytes());
    answer.extend(1u32.to_ne_bytes());
    answer.extend(count.to_ne_bytes());
    for name in names {
        answer.extend(slot(name));
    }
    answer
}

/// An `ETHTOOL_GSTATS` answer as `ethtool_get_stats` leaves it: cmd, n_stats, the values.
fn stats_answered(count: u32, values: &[u64]) -> Vec<u8> {
    let mut answer = Vec::new();
    answer.extend(0x1du32.to_ne_bytes());
    answer.extend(count.to_ne_bytes());
    for value in values {
        answer.extend(value.to_ne_bytes());
    }
    answer
}

#[test]
fn requests_are_the_uapi_structs() {
    let mut sset = vec![0x37, 0, 0, 0, 0, 0, 0, 0];
    sset.extend(2u64.to_ne_bytes());
    sset.extend([0; 4]);
    assert_eq!(sset_info_request(), sset);
    let mut strings = Vec::new();
    for word in [0x1bu32, 1, 2] {
        strings.extend(word.to_ne_bytes());
    }
    strings.extend([0; 64]);
    assert_eq!(strings_request(2), strings);
    let mut stats = Vec::new();
    for word in [0x1du32, 3] {
        stats.extend(word.to_ne_bytes());
    }
    stats.extend([0; 24]);
    assert_eq!(stats_request(3), stats);
}

/// `ethtool_get_sset_info`: the mask keeps the bit of each set the driver counted, followed
/// by the counts; a set it could not count is cleared, with no count.
#[test]
fn sset_info_gives_the_count_or_none() {
    let mut answer = vec![0x37, 0, 0, 0, 0, 0, 0, 0];
    answer.extend(2u64.to_ne_bytes());
    answer.extend(97u32.to_ne_bytes());
    assert_eq!(sset_info_answer(&answer), Ok(Some(97)));
    answer[8..16].copy_from_slice(&0u64.to_ne_bytes());
    assert_eq!(sset_info_answer(&answer), Ok(None));
    assert!(sset_info_answer(&answer[..12]).is_err());
}

/// mlx5e's table (`mlx5e_pme_status_desc`, `mlx5e_pme_error_desc` in `en_stats.c`) among
/// others; a name that fills its slot has no NUL.
#[test]
fn strings_are_read_up_to_their_nul() {
    let long = "a_name_of_exactly_thirty_two_chr";
    assert_eq!(long.len(), ETH_GSTRING_LEN);
    let names = ["rx_packets", "module_unplug", "module_bus_stuck", long];
    let answer = strings_answered(4, &names);
    assert_eq!(strings_answer(&answer, 4).unwrap(), names);
}

/// A kernel with the overflow fix answers 0 for a count that changed; an older one its new
/// count: neither is read as a table of the old length.
#[test]
fn a_changed_count_is_no_table() {
    let answer = strings_answered(0, &[]);
    let changed = AnswerError::CountChanged {
        asked: 2,
        answered: 0,
    };
    // The buffer is as long as asked: 12 + 2 * 32 bytes, the table's zeroed.
    let mut answer = answer;
    answer.resize(12 + 64, 0);
    assert_eq!(strings_answer(&answer, 2), Err(changed));
    let stats = stats_answered(3, &[1, 2]);
    assert_eq!(
        stats_answer(&stats, 2),
        Err(AnswerError::CountChanged {
            asked: 2,
            answered: 3
        })
    );
}

#[test]
fn stats_are_the_values_in_order() {
    let answer = stats_answered(3, &[7, u64::MAX, 0]);
    assert_eq!(stats_answer(&answer, 3), Ok(vec![7, u64::MAX, 0]));
    assert!(stats_answer(&answer[..20], 3).is_err());
    assert!(stats_answer(&answer[..3], 3).is_err());
}

/// A veth pair, deleted when dropped; `None` where it cannot be made (not root), which
/// only a run outside CI may accept.
struct Veth(String);

impl Veth {
    fn new(test: &str) -> Option<Veth> {
        let name = format!("hpcvt{}", std::process::id() % 100_000);
        let made = std::process::Command::new("ip")
            .args(["link", "add", &name, "type", "veth", "peer", "name"])
            .arg(format!("{name}p"))
            .status()
            .is_ok_and(|status| status.success());
        if made {
            return Some(Veth(name));
        }
        let why = "a veth pair cannot be made here (ip link add needs CAP_NET_ADMIN)";
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} must run in CI: {why}"
        );
        eprintln!("SKIPPED {test}: {why}");
        None
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.0])
            .status();
    }
}

/// The real kernel's answer for a veth (`veth_get_strings`, `veth_get_ethtool_stats` in
/// `drivers/net/veth.c`): `peer_ifindex` first, its value the peer's ifindex; and the
/// loopback device, which has no statistics.
#[test]
fn veth_statistics_for_real() {
    let Some(veth) = Veth::new("veth_statistics_for_real") else {
        return;
    };
    let socket = Socket::open().unwrap();
    let count = socket.stats_count(&veth.0).unwrap().unwrap();
    let names = socket.stat_names(&veth.0, count).unwrap();
    assert_eq!(names[0], "peer_ifindex");
    let values = socket.stats(&veth.0, count).unwrap();
    let peer = std::fs::read_to_string(format!("/sys/class/net/{}p/ifindex", veth.0)).unwrap();
    assert_eq!(values[0], peer.trim().parse::<u64>().unwrap());
    // A count other than the driver's: the guard page, or the fixed kernel's 0, not a read
    // past the buffer.
    assert!(socket.stats(&veth.0, count - 1).is_err());
    assert_eq!(socket.stats_count("lo").unwrap(), None);
    let gone = socket.stats_count("hpcvt-none").unwrap_err();
    assert_eq!(gone.errno(), Some(libc::ENODEV));
}

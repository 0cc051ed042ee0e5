//! The verbs probe mesh: the fleet's responders from a peers file, and which node probes which
//! in each round, and when.
//!
//! Every node computes the whole round from the same file and the clock, so nodes agree
//! without talking to each other:
//! - the round's order ranks the nodes by a hash of (round, name), highest first (rendezvous
//!   hashing): a permutation that changes each round, and removing a node removes it from the
//!   order without moving the others;
//! - the node at position `i` probes the nodes at `i+1 ..= i+k` (mod N), so each node probes
//!   exactly `k` peers and answers exactly `k` probers per round, and every node is probed in
//!   every round;
//! - the round is cut into `3k` slots, and each probe gets one: those at offset `j` form cycles
//!   over the positions, coloured 0, 1, 0, 1, … along each cycle (an odd cycle's last probe 2),
//!   in slots `3(j-1)..3(j-1)+3`. A node's probes and the probes of it are never in one slot, so
//!   no port runs two probes at once when the runs fit their slots.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ring::digest;

use crate::collector::{CollectError, ErrorKind};
use crate::logging::{self, Level};
use crate::sysfs::{read_named_file, SysfsError};

/// The largest peers file read: about 20 000 nodes at 50 bytes a line.
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// The longest node name: a label value and a log field, so short and printable.
const MAX_NAME: usize = 64;

/// One responder of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// `HOST:PORT` of its responder (`--probe.verbs.listen` there).
    pub address: String,
}

/// A peers file, its nodes sorted by name (the order the file lists them in does not matter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers {
    nodes: Vec<Node>,
}

#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    #[error(transparent)]
    Read(#[from] SysfsError),
    #[error("{path}: not UTF-8 text")]
    NotText { path: String },
    #[error("{path} line {line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("{path} line {line}: the node of line {first} again")]
    Duplicate {
        path: String,
        line: usize,
        first: usize,
    },
    #[error("{path}: no node listed")]
    Empty { path: String },
}

impl From<PeersError> for CollectError {
    fn from(err: PeersError) -> Self {
        // The file and the line are the fault, whatever is wrong with the line.
        let key = match &err {
            PeersError::Read(read) => {
                return CollectError::new(read.kind(), format!("verbs probe mesh: {err}"))
            }
            PeersError::NotText { path } | PeersError::Empty { path } => path.clone(),
            PeersError::Line { path, line, .. } | PeersError::Duplicate { path, line, .. } => {
                format!("{path}:{line}")
            }
        };
        CollectError::new(ErrorKind::Parse, format!("verbs probe mesh: {err}")).keyed_by(key)
    }
}

/// Whether `address` is `HOST:PORT` with a port number.
pub fn is_host_port(address: &str) -> bool {
    address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

/// Whether `name` can name a node: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn is_node_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Peers {
    /// Reads the peers file at `path` (a regular file, at most [`MAX_FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<Peers, PeersError> {
        let bytes = read_named_file(path, MAX_FILE_BYTES)?;
        let shown = path.display().to_string();
        let text = String::from_utf8(bytes).map_err(|_| PeersError::NotText {
            path: shown.clone(),
        })?;
        Peers::parse(&shown, &text)
    }

    /// One node a line, `NAME HOST:PORT`, separated by blanks; `#` starts a comment, blank
    /// lines are skipped. Errors name the line, never quote it (the file is the operator's,
    /// the log may be anyone's).
    pub fn parse(path: &str, text: &str) -> Result<Peers, PeersError> {
        let mut lines_of = BTreeMap::new();
        let mut nodes = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let content = line.split_once('#').map_or(line, |(before, _)| before);
            let fields: Vec<&str> = content.split_whitespace().collect();
            let bad = |reason: String| PeersError::Line {
                path: path.to_string(),
                line: line_number,
                reason,
            };
            let (name, address) = match fields[..] {
                [] => continue,
                [name, address] => (name, address),
                _ => {
                    return Err(bad(format!(
                        "expected NAME HOST:PORT, found {} fields",
                        fields.len()
                    )))
                }
            };
            if !is_node_name(name) {
                return Err(bad(format!(
                    "the node name is not 1 to {MAX_NAME} of A-Z a-z 0-9 . _ -"
                )));
            }
            if !is_host_port(address) {
                return Err(bad("the address is not HOST:PORT".into()));
            }
            if let Some(first) = lines_of.insert(name.to_string(), line_number) {
                return Err(PeersError::Duplicate {
                    path: path.to_string(),
                    line: line_number,
                    first,
                });
            }
            nodes.push(Node {
                name: name.to_string(),
                address: address.to_string(),
            });
        }
        if nodes.is_empty() {
            return Err(PeersError::Empty {
                path: path.to_string(),
            });
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Peers { nodes })
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node named `name`, if listed.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.nodes
            .binary_search_by(|node| node.name.as_str().cmp(name))
            .ok()
    }
}

/// `--probe.verbs.peers` and its companions: what a mesh starts from (`cli.rs` builds it).
#[derive(Debug, Clone)]
pub(super) struct MeshSettings {
    /// Read when the probe starts and at each round when it changed.
    pub peers: PathBuf,
    pub fanout: usize,
    /// `None`: the hostname, looked up when the probe starts.
    pub node_name: Option<String>,
}

/// This node in the mesh: its name, its fanout, and the last good copy of the peers file.
#[derive(Debug)]
pub struct MeshNode {
    path: PathBuf,
    name: String,
    pub fanout: usize,
    pub peers: Peers,
    /// Whether the file parsed when last read.
    file_valid: bool,
}

/// What the mesh exports about the peers file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeshState {
    pub nodes: usize,
    pub member: bool,
    pub file_valid: bool,
}

impl MeshNode {
    /// This node, with the peers file as it is now (which must parse: a mesh cannot start
    /// without one) and its name (the hostname unless `--probe.verbs.node-name` gives one).
    pub(super) fn start(settings: &MeshSettings) -> Result<MeshNode, String> {
        let name = match &settings.node_name {
            Some(name) => name.clone(),
            None => hostname()?,
        };
        let peers =
            Peers::read(&settings.peers).map_err(|err| format!("--probe.verbs.peers: {err}"))?;
        let node = MeshNode {
            path: settings.peers.clone(),
            name,
            fanout: settings.fanout,
            peers,
            file_valid: true,
        };
        node.log_read();
        Ok(node)
    }

    /// Reads the peers file again (it is small, and read once a round): a copy that parses
    /// replaces the one in use, one that does not leaves it in use and is the error.
    pub fn refresh(&mut self) -> Result<(), PeersError> {
        match Peers::read(&self.path) {
            Ok(peers) => {
                self.file_valid = true;
                if peers != self.peers {
                    self.peers = peers;
                    self.log_read();
                }
                Ok(())
            }
            Err(err) => {
                self.file_valid = false;
                Err(err)
            }
        }
    }

    fn log_read(&self) {
        logging::log(
            Level::Info,
            "verbs probe mesh: peers file read",
            &[
                ("path", &self.path.display().to_string()),
                ("nodes", &self.peers.nodes().len().to_string()),
                ("node", &self.name),
                (
                    "member",
                    &self.peers.position(&self.name).is_some().to_string(),
                ),
            ],
        );
    }

    pub fn state(&self) -> MeshState {
        MeshState {
            nodes: self.peers.nodes().len(),
            member: self.peers.position(&self.name).is_some(),
            file_valid: self.file_valid,
        }
    }

    /// The error of a node the peers file does not list.
    pub fn not_member(&self) -> CollectError {
        CollectError::new(
            ErrorKind::Parse,
            format!(
                "verbs probe mesh: node {:?} is not in {}, so it probes nobody (set --probe.verbs.node-name to its name there)",
                self.name,
                self.path.display()
            ),
        )
    }

    /// This node's probes in `round`: slot and peer, by slot.
    pub fn probes(&self, round: u64) -> Vec<(usize, &Node)> {
        let Some(me) = self.peers.position(&self.name) else {
            return Vec::new();
        };
        schedule(&self.peers, round, self.fanout)
            .into_iter()
            .filter(|probe| probe.prober == me)
            .map(|probe| (probe.slot, &self.peers.nodes[probe.responder]))
            .collect()
    }
}

/// This host's name (gethostname(2)), a mesh node's name unless a flag gives one.
fn hostname() -> Result<String, String> {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` bytes into the buffer, which outlives
    // the call.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if rc != 0 {
        return Err(format!(
            "the hostname (for --probe.verbs.node-name): {}",
            std::io::Error::last_os_error()
        ));
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match std::str::from_utf8(&buffer[..end]) {
        Ok(name) if is_node_name(name) => Ok(name.to_string()),
        _ => Err(format!(
            "the hostname ({end} bytes) is not 1 to {MAX_NAME} of A-Z a-z 0-9 . _ -, so it cannot name a node: set --probe.verbs.node-name"
        )),
    }
}

/// The peers each node probes per round: `fanout`, but never more than the other nodes.
pub fn effective_fanout(nodes: usize, fanout: usize) -> usize {
    fanout.min(nodes.saturating_sub(1))
}

/// The slots of a round with `fanout` peers per node.
pub fn slots(fanout: usize) -> usize {
    3 * fanout
}

/// One probe of a round: indices into [`Peers::nodes`], and its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Probe {
    pub slot: usize,
    pub prober: usize,
    pub responder: usize,
}

/// A node's weight in `round`: the first 8 bytes of SHA-256(round, name), the same on every
/// node and in every build.
fn weight(round: u64, name: &str) -> u64 {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(&round.to_be_bytes());
    context.update(name.as_bytes());
    let hash = context.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// The round's order: node indices by weight, highest first (ties, never seen in practice, by
/// name).
pub fn order(peers: &Peers, round: u64) -> Vec<usize> {
    let mut ranked: Vec<(u64, usize)> = peers
        .nodes
        .iter()
        .enumerate()
        .map(|(index, node)| (weight(round, &node.name), index))
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().map(|(_, index)| index).collect()
}

/// Every probe of `round`, sorted by slot.
pub fn schedule(peers: &Peers, round: u64, fanout: usize) -> Vec<Probe> {
    let order = order(peers, round);
    let n = order.len();
    let fanout = effective_fanout(n, fanout);
    let mut probes = Vec::with_capacity(n * fanout);
    for offset in 1..=fanout {
        let mut visited = vec![false; n];
        for start in 0..n {
            let mut cycle = Vec::new();
            let mut position = start;
            while !visited[position] {
                visited[position] = true;
                cycle.push(position);
                position = (position + offset) % n;
            }
            let odd = cycle.len() % 2 == 1;
            for (step, &position) in cycle.iter().enumerate() {
                let colour = if odd && step == cycle.len() - 1 {
                    2
                } else {
                    step % 2
                };
                probes.push(Probe {
                    slot: 3 * (offset - 1) + colour,
                    prober: order[position],
                    responder: order[(position + offset) % n],
                });
            }
        }
    }
    probes.sort();
    probes
}

/// The round a time (since the epoch) falls in, and when in it that is.
pub fn round_at(since_epoch: Duration, interval: Duration) -> (u64, Duration) {
    let interval_nanos = interval.as_nanos().max(1);
    let now = since_epoch.as_nanos();
    let round = u64::try_from(now / interval_nanos).unwrap_or(u64::MAX);
    let into = Duration::from_nanos(u64::try_from(now % interval_nanos).unwrap_or(0));
    (round, into)
}

/// When slot `slot` of a round with `fanout` peers per node starts, from the round's start.
pub fn slot_start(interval: Duration, fanout: usize, slot: usize) -> Duration {
    let slots = u32::try_from(slots(fanout).max(1)).unwrap_or(u32::MAX);
    interval / slots * u32::try_from(slot).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn peers(count: usize) -> Peers {
        let text: String = (0..count)
            .map(|i| format!("node{i:03} 10.0.{}.{}:18515\n", i / 250, i % 250 + 1))
            .collect();
        Peers::parse("peers", &text).unwrap()
    }

    fn pairs(peers: &Peers, round: u64, fanout: usize) -> BTreeSet<(String, String)> {
        schedule(peers, round, fanout)
            .iter()
            .map(|p| {
                (
                    peers.nodes[p.prober].name.clone(),
                    peers.nodes[p.responder].name.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn the_file_format() {
        let text = "# the fleet's responders\n\
                    \n\
                    n2   10.0.0.2:18515   # rack 1\n\
                    \tn1 10.0.0.1:18515\n\
                    n10 [fe80::1%ib0]:18515\n";
        let peers = Peers::parse("peers", text).unwrap();
        let names: Vec<_> = peers.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "n10", "n2"]);
        assert_eq!(peers.nodes()[2].address, "10.0.0.2:18515");
        assert_eq!(peers.position("n10"), Some(1));
        assert_eq!(peers.position("n3"), None);
    }

    #[test]
    fn bad_files_name_the_line_and_what_is_wrong_never_its_content() {
        for (text, want) in [
            (
                "n1 10.0.0.1:18515\nn2\n",
                "peers line 2: expected NAME HOST:PORT, found 1 fields",
            ),
            (
                "n1 10.0.0.1:18515 extra\n",
                "peers line 1: expected NAME HOST:PORT, found 3 fields",
            ),
            (
                "n1 10.0.0.1\n",
                "peers line 1: the address is not HOST:PORT",
            ),
            (
                "n1 10.0.0.1:99999\n",
                "peers line 1: the address is not HOST:PORT",
            ),
            (
                "n/1 10.0.0.1:1\n",
                "peers line 1: the node name is not 1 to 64 of A-Z a-z 0-9 . _ -",
            ),
            (
                "n1 a:1\n# x\nn1 b:1\n",
                "peers line 3: the node of line 1 again",
            ),
            ("# nobody\n\n", "peers: no node listed"),
        ] {
            let err = Peers::parse("peers", text).unwrap_err();
            assert_eq!(err.to_string(), want, "{text:?}");
        }
        let long = format!("{} a:1\n", "n".repeat(65));
        assert!(Peers::parse("peers", &long).is_err());
    }

    #[test]
    fn reading_refuses_what_is_not_a_small_text_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers");
        std::fs::write(&path, b"n1 10.0.0.1:1\n").unwrap();
        assert_eq!(Peers::read(&path).unwrap().nodes().len(), 1);
        std::fs::write(&path, b"n1 \xff:1\n").unwrap();
        assert!(matches!(
            Peers::read(&path),
            Err(PeersError::NotText { .. })
        ));
        std::fs::write(&path, vec![b'#'; MAX_FILE_BYTES + 1]).unwrap();
        assert!(matches!(Peers::read(&path), Err(PeersError::Read(_))));
        assert!(matches!(
            Peers::read(&dir.path().join("missing")),
            Err(PeersError::Read(_))
        ));
        assert!(Peers::read(Path::new("/dev/zero")).is_err());
    }

    /// Each node probes exactly `k` others and is probed by exactly `k` others in every round,
    /// never itself, and nobody twice.
    #[test]
    fn each_node_probes_k_and_answers_k_per_round() {
        for n in [2, 3, 4, 5, 7, 8, 16, 33, 100] {
            let peers = peers(n);
            for fanout in [1, 2, 3, 5] {
                let k = effective_fanout(n, fanout);
                for round in [0, 1, 2, 1_000_003] {
                    let probes = schedule(&peers, round, fanout);
                    assert_eq!(probes.len(), n * k, "n={n} k={k}");
                    let mut probing: HashMap<usize, BTreeSet<usize>> = HashMap::new();
                    let mut probed: HashMap<usize, BTreeSet<usize>> = HashMap::new();
                    for p in &probes {
                        assert_ne!(p.prober, p.responder);
                        assert!(probing.entry(p.prober).or_default().insert(p.responder));
                        assert!(probed.entry(p.responder).or_default().insert(p.prober));
                        assert!(p.slot < slots(k), "slot {} of {}", p.slot, slots(k));
                    }
                    for node in 0..n {
                        assert_eq!(probing[&node].len(), k, "n={n} k={k} node {node} probes");
                        assert_eq!(probed[&node].len(), k, "n={n} k={k} node {node} probed");
                    }
                }
            }
        }
    }

    /// In one slot a node is in one probe at most, as prober or responder: no port runs two.
    #[test]
    fn no_node_is_in_two_probes_of_one_slot() {
        for n in 2..=40 {
            let peers = peers(n);
            for fanout in 1..=4 {
                for round in 0..5 {
                    let mut busy = BTreeSet::new();
                    for p in schedule(&peers, round, fanout) {
                        assert!(busy.insert((p.slot, p.prober)), "n={n} {p:?}");
                        assert!(busy.insert((p.slot, p.responder)), "n={n} {p:?}");
                    }
                }
            }
        }
    }

    /// Rounds differ, and over rounds every ordered pair comes up: with 10 nodes and k=2, each
    /// round covers 20 of the 90 pairs.
    #[test]
    fn rounds_vary_and_cover_every_pair() {
        let peers = peers(10);
        assert_ne!(pairs(&peers, 1, 2), pairs(&peers, 2, 2));
        let mut seen = BTreeSet::new();
        let mut rounds = 0;
        while seen.len() < 90 {
            seen.extend(pairs(&peers, rounds, 2));
            rounds += 1;
            assert!(rounds < 200, "only {} pairs after 200 rounds", seen.len());
        }
    }

    /// Every node computes the same schedule from the same file, whatever the order of its
    /// lines and its comments.
    #[test]
    fn the_schedule_depends_on_the_nodes_not_on_the_file_layout() {
        let a = Peers::parse("a", "x 1.1.1.1:1\ny 1.1.1.2:1\nz 1.1.1.3:1\nw 1.1.1.4:1\n").unwrap();
        let b = Peers::parse(
            "b",
            "# moved\nw 1.1.1.4:1\nz 1.1.1.3:1\n\ny 1.1.1.2:1 # c\nx 1.1.1.1:1\n",
        )
        .unwrap();
        assert_eq!(a, b);
        for round in 0..20 {
            assert_eq!(schedule(&a, round, 2), schedule(&b, round, 2));
        }
        // Fixed forever: weights are SHA-256, not a hasher that may change between builds
        // (this order computed apart, with Python's hashlib).
        let names: Vec<_> = order(&a, 8)
            .iter()
            .map(|&i| a.nodes[i].name.as_str())
            .collect();
        assert_eq!(names, ["w", "y", "z", "x"]);
    }

    /// Removing a node from the file changes the targets of the `k` nodes before it in the
    /// round's order (each loses it and gains the next node along), and of nobody else.
    #[test]
    fn removing_a_node_changes_only_the_probes_that_must() {
        let fanout = 2;
        let all = peers(12);
        for removed in 0..12 {
            let removed_name = all.nodes[removed].name.clone();
            let text: String = all
                .nodes
                .iter()
                .filter(|n| n.name != removed_name)
                .map(|n| format!("{} {}\n", n.name, n.address))
                .collect();
            let fewer = Peers::parse("fewer", &text).unwrap();
            for round in 0..10 {
                let before = pairs(&all, round, fanout);
                let after = pairs(&fewer, round, fanout);
                let targets =
                    |pairs: &BTreeSet<(String, String)>, prober: &str| -> BTreeSet<String> {
                        pairs
                            .iter()
                            .filter(|(p, _)| p == prober)
                            .map(|(_, r)| r.clone())
                            .collect()
                    };
                let mut changed = 0;
                for node in fewer.nodes() {
                    let old = targets(&before, &node.name);
                    let new = targets(&after, &node.name);
                    if old == new {
                        continue;
                    }
                    changed += 1;
                    assert!(
                        old.contains(&removed_name),
                        "{} changed without cause",
                        node.name
                    );
                    assert_eq!(old.difference(&new).count(), 1);
                    assert_eq!(new.difference(&old).count(), 1);
                }
                assert_eq!(changed, fanout, "round {round}, removed {removed_name}");
                // The order of the others is kept.
                let kept: Vec<_> = order(&all, round)
                    .into_iter()
                    .map(|i| all.nodes[i].name.clone())
                    .filter(|name| *name != removed_name)
                    .collect();
                let now: Vec<_> = order(&fewer, round)
                    .into_iter()
                    .map(|i| fewer.nodes[i].name.clone())
                    .collect();
                assert_eq!(kept, now);
            }
        }
    }

    /// A broken file leaves the last good copy in use (and says so); a good one replaces it,
    /// including one that no longer lists this node, which then probes nobody.
    #[test]
    fn a_broken_file_keeps_the_last_good_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers");
        std::fs::write(&path, "a 10.0.0.1:18515\nb 10.0.0.2:18515\n").unwrap();
        let settings = MeshSettings {
            peers: path.clone(),
            fanout: 2,
            node_name: Some("a".into()),
        };
        let mut node = MeshNode::start(&settings).unwrap();
        let state = |nodes, member, file_valid| MeshState {
            nodes,
            member,
            file_valid,
        };
        assert_eq!(node.state(), state(2, true, true));
        assert_eq!(node.probes(0).len(), 1);
        std::fs::write(&path, "a 10.0.0.1:18515\nb\n").unwrap();
        let err = CollectError::from(node.refresh().unwrap_err());
        let shown = path.display();
        assert_eq!(err.key(), format!("{shown}:2"));
        assert_eq!(
            err.cause,
            format!("verbs probe mesh: {shown} line 2: expected NAME HOST:PORT, found 1 fields")
        );
        assert_eq!(node.state(), state(2, true, false));
        assert_eq!(node.probes(0)[0].1.name, "b");
        std::fs::write(
            &path,
            "b 10.0.0.2:18515\nc 10.0.0.3:18515\nd 10.0.0.4:18515\n",
        )
        .unwrap();
        node.refresh().unwrap();
        assert_eq!(node.state(), state(3, false, true));
        assert!(node.probes(0).is_empty());
        assert!(node.not_member().cause.contains("node \"a\" is not in"));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(node.refresh(), Err(PeersError::Read(_))));
        assert_eq!(node.state(), state(3, false, false));
        let err = MeshNode::start(&settings).unwrap_err();
        assert!(err.starts_with("--probe.verbs.peers: "), "{err}");
    }

    #[test]
    fn rounds_and_slots_follow_the_clock() {
        let interval = Duration::from_secs(60);
        assert_eq!(
            round_at(Duration::from_secs(3_600 * 24 + 75), interval),
            (1_441, Duration::from_secs(15))
        );
        assert_eq!(round_at(Duration::ZERO, interval), (0, Duration::ZERO));
        assert_eq!(slot_start(interval, 2, 0), Duration::ZERO);
        assert_eq!(slot_start(interval, 2, 5), Duration::from_secs(50));
        assert_eq!(slots(2), 6);
        assert_eq!(effective_fanout(3, 5), 2);
        assert_eq!(effective_fanout(1, 2), 0);
        assert!(schedule(&peers(1), 0, 2).is_empty());
    }
}

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
    /// `HOST:PORT` of its responder (`--collector.verbs.listen` there).
    pub address: String,
}

/// A peers file, its nodes sorted by name (the order the file lists them in does not matter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers {
    nodes: Vec<Node>,
}

/// Why a mesh cannot start: no name for this node, or no peers file that parses.
#[derive(Debug, thiserror::Error)]
pub enum MeshStartError {
    #[error("the hostname (for --collector.verbs.node-name): {0}")]
    Hostname(std::io::Error),
    #[error("the hostname ({len} bytes) is not 1 to {MAX_NAME} of A-Z a-z 0-9 . _ -, so it cannot name a node: set --collector.verbs.node-name")]
    NotANodeName { len: usize },
    #[error("--collector.verbs.peers: {0}")]
    Peers(PeersError),
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

/// `--collector.verbs.peers` and its companions: what a mesh starts from (`cli.rs` builds it).
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
    /// without one) and its name (the hostname unless `--collector.verbs.node-name` gives one).
    pub(super) fn start(settings: &MeshSettings) -> Result<MeshNode, MeshStartError> {
        let name = match &settings.node_name {
            Some(name) => name.clone(),
            None => hostname()?,
        };
        let peers = Peers::read(&settings.peers).map_err(MeshStartError::Peers)?;
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
                "verbs probe mesh: node {:?} is not in {}, so it probes nobody (set --collector.verbs.node-name to its name there)",
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
fn hostname() -> Result<String, MeshStartError> {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` bytes into the buffer, which outlives
    // the call.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if rc != 0 {
        return Err(MeshStartError::Hostname(std::io::Error::last_os_error()));
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match std::str::from_utf8(&buffer[..end]) {
        Ok(name) if is_node_name(name) => Ok(name.to_string()),
        _ => Err(MeshStartError::NotANodeName { len: end }),
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
mod proptests;
#[cfg(test)]
mod tests;

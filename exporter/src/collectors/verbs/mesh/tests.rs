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
            let targets = |pairs: &BTreeSet<(String, String)>, prober: &str| -> BTreeSet<String> {
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
    let err = MeshNode::start(&settings).unwrap_err().to_string();
    assert!(err.starts_with("--collector.verbs.peers: "), "{err}");
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

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::test_strategies;

const PEERS_TOKENS: &[&str] = &[
    "node1", "n-2.x", " ", "\t", "\n", "#", ":", "[", "]", "::1", "10.0.0.1", "18515", "host", "_",
];

proptest! {
    #[test]
    fn any_peers_text_parses_without_panic(text in test_strategies::text(PEERS_TOKENS)) {
        let _ = Peers::parse("peers", &text);
    }

    /// A file of distinct names, each with an address, comments and blank lines between, reads
    /// back as its nodes sorted by name.
    #[test]
    fn a_written_peers_file_reads_back_sorted(
        nodes in prop::collection::btree_map("[A-Za-z0-9._-]{1,64}", ("[a-z][a-z0-9.-]{0,30}", 1..=65535u16), 1..40),
        comment in "[ -~]{0,20}",
    ) {
        let text: String = nodes
            .iter()
            .map(|(name, (host, port))| format!("{name}\t{host}:{port}  # {comment}\n\n"))
            .collect();
        let peers = Peers::parse("peers", &text).unwrap();
        let read: BTreeMap<_, _> = peers
            .nodes()
            .iter()
            .map(|node| (node.name.clone(), node.address.clone()))
            .collect();
        let written: BTreeMap<_, _> = nodes
            .iter()
            .map(|(name, (host, port))| (name.clone(), format!("{host}:{port}")))
            .collect();
        prop_assert_eq!(read, written);
        prop_assert!(peers.nodes().windows(2).all(|pair| pair[0].name < pair[1].name));
    }
}

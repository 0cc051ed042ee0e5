//! Who holds a device's resources: the entries of its dumps summed per holder (a process, or
//! a kernel module), the processes named by `comm` and Slurm job, per job, and the label sets
//! capped (the holders pinning the most memory first, the rest summed as `other`).

use std::collections::BTreeMap;

use crate::netlink::rdma::message::{Entry, Resource};
use crate::netlink::rdma::reply::Holder;

/// What one holder (or job, or device) has of each resource type, and the bytes its MRs pin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub counts: BTreeMap<Resource, u64>,
    pub pinned_bytes: u64,
}

impl Usage {
    pub fn add_entry(&mut self, resource: Resource, entry: &Entry) {
        *self.counts.entry(resource).or_default() += 1;
        self.pinned_bytes = self
            .pinned_bytes
            .saturating_add(entry.mr_length.unwrap_or(0));
    }

    pub fn add(&mut self, other: &Usage) {
        for (resource, count) in &other.counts {
            *self.counts.entry(*resource).or_default() += count;
        }
        self.pinned_bytes = self.pinned_bytes.saturating_add(other.pinned_bytes);
    }

    fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// A process holding resources, as the exporter labels it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Process {
    /// `/proc/PID/comm`; empty when the process exited meanwhile.
    pub comm: String,
    /// The Slurm job it runs in, from `/proc/PID/cgroup`.
    pub slurm_job: Option<String>,
}

/// The entries of every dump of one device, summed per holder.
pub fn by_holder(entries: &[(Resource, Entry)]) -> BTreeMap<Holder, Usage> {
    let mut holders: BTreeMap<Holder, Usage> = BTreeMap::new();
    for (resource, entry) in entries {
        holders
            .entry(entry.holder.clone())
            .or_default()
            .add_entry(*resource, entry);
    }
    holders
}

/// `items` ordered by pinned bytes, then by resources held, most first (ties by key, so the
/// order is stable from scrape to scrape); the first `keep` as they are, the rest summed.
pub fn capped<K: Ord + Clone>(
    items: &BTreeMap<K, Usage>,
    keep: usize,
) -> (Vec<(K, Usage)>, Option<Usage>) {
    let mut ranked: Vec<(&K, &Usage)> = items.iter().collect();
    ranked.sort_by(|(a_key, a), (b_key, b)| {
        (b.pinned_bytes, b.total())
            .cmp(&(a.pinned_bytes, a.total()))
            .then_with(|| a_key.cmp(b_key))
    });
    let kept = ranked
        .iter()
        .take(keep)
        .map(|(key, usage)| ((*key).clone(), (*usage).clone()))
        .collect();
    let rest = ranked
        .get(keep..)
        .filter(|rest| !rest.is_empty())
        .map(|rest| {
            let mut sum = Usage::default();
            rest.iter().for_each(|(_, usage)| sum.add(usage));
            sum
        });
    (kept, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn usage(pinned_bytes: u64, qps: u64) -> Usage {
        Usage {
            counts: BTreeMap::from([(Resource::QueuePair, qps)]),
            pinned_bytes,
        }
    }

    #[test]
    fn the_holders_pinning_most_are_kept_and_the_rest_summed() {
        let items = BTreeMap::from([
            ("a", usage(10, 1)),
            ("b", usage(30, 1)),
            ("c", usage(0, 5)),
            ("d", usage(0, 2)),
            ("e", usage(20, 1)),
        ]);
        let (kept, rest) = capped(&items, 3);
        let names: Vec<_> = kept.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["b", "e", "a"]);
        assert_eq!(rest, Some(usage(0, 7)));
        let (kept, rest) = capped(&items, 5);
        assert_eq!((kept.len(), rest), (5, None));
    }
}

#[cfg(test)]
mod proptests {
    use super::tests::usage;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn capping_keeps_every_count(values in proptest::collection::vec((0u64..1000, 0u64..10), 0..40), keep in 0usize..50) {
            let items: BTreeMap<usize, Usage> = values.iter().enumerate().map(|(i, (bytes, qps))| (i, usage(*bytes, *qps))).collect();
            let (kept, rest) = capped(&items, keep);
            prop_assert_eq!(kept.len(), keep.min(items.len()));
            let mut sum = rest.unwrap_or_default();
            kept.iter().for_each(|(_, usage)| sum.add(usage));
            let mut all = Usage::default();
            items.values().for_each(|usage| all.add(usage));
            prop_assert_eq!(sum.pinned_bytes, all.pinned_bytes);
            prop_assert_eq!(sum.counts.get(&Resource::QueuePair), all.counts.get(&Resource::QueuePair));
        }
    }
}

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

/// The Slurm job id a process runs in, from the text of its `/proc/PID/cgroup`:
/// - cgroup v2: a `job_<N>` directory under slurmstepd's scope
///   (`0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`);
/// - cgroup v1: `slurm/uid_<U>/job_<N>` in any hierarchy (`4:memory:/slurm/uid_1000/job_42/step_0/task_0`),
///   `slurm_<node>` too (slurmd's `--enable-multiple-slurmd` layout).
///
/// `None` for a process outside any job (slurmd itself, a login shell).
pub fn slurm_job(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        // hierarchy-ID:controllers:path; the path may hold colons itself.
        let path = line.splitn(3, ':').nth(2)?;
        let parts: Vec<&str> = path.split('/').collect();
        parts.iter().enumerate().find_map(|(at, part)| {
            let id = part.strip_prefix("job_")?;
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || at == 0 {
                return None;
            }
            let parent = parts[at - 1];
            let v2 = parent.ends_with("slurmstepd.scope");
            let v1 = parent
                .strip_prefix("uid_")
                .is_some_and(|uid| !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()))
                && at >= 2
                && (parts[at - 2] == "slurm" || parts[at - 2].starts_with("slurm_"));
            (v2 || v1).then(|| id.to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_job_from_cgroup_v2_under_slurmstepd() {
        assert_eq!(
            slurm_job("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n").as_deref(),
            Some("4242")
        );
        // slurmstepd's own processes sit beside the jobs, in no job.
        assert_eq!(
            slurm_job("0::/system.slice/slurmstepd.scope/system\n"),
            None
        );
    }

    #[test]
    fn slurm_job_from_cgroup_v1() {
        let cgroup = "12:pids:/user.slice\n\
                      4:memory:/slurm/uid_1000/job_77/step_batch/task_0\n\
                      3:freezer:/slurm/uid_1000/job_77/step_batch\n";
        assert_eq!(slurm_job(cgroup).as_deref(), Some("77"));
        assert_eq!(
            slurm_job("5:cpuset:/slurm_node07/uid_0/job_9/step_0\n").as_deref(),
            Some("9")
        );
    }

    #[test]
    fn job_directories_elsewhere_are_no_slurm_job() {
        for cgroup in [
            "0::/user.slice/user-1000.slice/job_5/session.scope\n",
            "0::/job_5\n",
            "4:memory:/slurm/job_5\n",
            "4:memory:/slurm/uid_x/job_5\n",
            "0::/system.slice/slurmstepd.scope/job_/step_0\n",
            "0::/system.slice/slurmstepd.scope/job_12a\n",
            "",
        ] {
            assert_eq!(slurm_job(cgroup), None, "{cgroup:?}");
        }
    }

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
    use crate::test_strategies::text;
    use proptest::prelude::*;

    const CGROUP_TOKENS: &[&str] = &[
        "0::",
        "4:memory:",
        "/",
        "slurm",
        "slurm_n1",
        "uid_1000",
        "job_",
        "42",
        "slurmstepd.scope",
        "system.slice",
        "step_0",
        "\n",
        ":",
    ];

    proptest! {
        #[test]
        fn any_cgroup_text_gives_digits_or_nothing(cgroup in text(CGROUP_TOKENS)) {
            if let Some(job) = slurm_job(&cgroup) {
                prop_assert!(!job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()));
            }
        }

        #[test]
        fn a_written_job_reads_back(job in 1u64.., uid in 0u32.., v2 in any::<bool>()) {
            let cgroup = if v2 {
                format!("0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n")
            } else {
                format!("7:devices:/slurm/uid_{uid}/job_{job}/step_0\n")
            };
            prop_assert_eq!(slurm_job(&cgroup), Some(job.to_string()));
        }

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

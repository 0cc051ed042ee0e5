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
        if let Some(job) = from_cgroup(&cgroup) {
            prop_assert!(is_number(&job));
        }
    }

    #[test]
    fn a_written_job_reads_back(job in 1u64.., uid in 0u32.., v2 in any::<bool>()) {
        let cgroup = if v2 {
            format!("0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n")
        } else {
            format!("7:devices:/slurm/uid_{uid}/job_{job}/step_0\n")
        };
        prop_assert_eq!(from_cgroup(&cgroup), Some(job.to_string()));
    }
}

use std::fs;
use std::path::Path;

use super::*;

#[test]
fn from_cgroup_v2_under_slurmstepd() {
    assert_eq!(
        from_cgroup("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n").as_deref(),
        Some("4242")
    );
    // slurmstepd's own processes sit beside the jobs, in no job.
    assert_eq!(
        from_cgroup("0::/system.slice/slurmstepd.scope/system\n"),
        None
    );
    // `--enable-multiple-slurmd`: the scope is named after the node.
    assert_eq!(
        from_cgroup("0::/system.slice/n07_slurmstepd.scope/job_9/step_extern/user/task_special\n")
            .as_deref(),
        Some("9")
    );
}

#[test]
fn from_cgroup_v1() {
    let cgroup = "12:pids:/user.slice\n\
                  4:memory:/slurm/uid_1000/job_77/step_batch/task_0\n\
                  3:freezer:/slurm/uid_1000/job_77/step_batch\n";
    assert_eq!(from_cgroup(cgroup).as_deref(), Some("77"));
    assert_eq!(
        from_cgroup("5:cpuset:/slurm_node07/uid_0/job_9/step_0\n").as_deref(),
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
        "4:memory:/other/uid_1/job_5\n",
        "0::/system.slice/slurmstepd.scope/job_/step_0\n",
        "0::/system.slice/slurmstepd.scope/job_12a\n",
        "",
    ] {
        assert_eq!(from_cgroup(cgroup), None, "{cgroup:?}");
    }
}

/// `dir` under `root`, made, with a `cgroup.procs` listing `pids`.
fn cgroup(root: &Path, dir: &str, pids: &[u32]) {
    let dir = root.join(dir);
    fs::create_dir_all(&dir).unwrap();
    let procs: String = pids.iter().map(|pid| format!("{pid}\n")).collect();
    fs::write(dir.join("cgroup.procs"), procs).unwrap();
}

fn tree_jobs(sysfs: &Path, pids: &[u32]) -> Vec<Found> {
    let mut jobs = Jobs::new(sysfs);
    pids.iter().map(|pid| jobs.of(*pid, None)).collect()
}

#[test]
fn hidden_processes_are_found_in_a_v2_tree() {
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path().join("fs/cgroup");
    // Slurm 22.05's cgroup/v2 layout: slurmstepd itself in `system`, a step's slurmstepd in
    // its `slurm` leaf, the tasks in `user/task_<n>`.
    cgroup(&root, "system.slice/slurmstepd.scope/system", &[10]);
    cgroup(
        &root,
        "system.slice/slurmstepd.scope/job_42/step_0/slurm",
        &[11],
    );
    cgroup(
        &root,
        "system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
        &[12, 13],
    );
    cgroup(
        &root,
        "system.slice/slurmstepd.scope/job_43/step_extern/user/task_special",
        &[14],
    );
    cgroup(&root, "user.slice/user-1000.slice/job_5", &[15]);
    let found = tree_jobs(sysfs.path(), &[10, 11, 12, 13, 14, 15, 16]);
    let job = |id: &str| Found::Tree(Some(id.to_string()));
    assert_eq!(
        found,
        [
            Found::Tree(None),
            job("42"),
            job("42"),
            job("42"),
            job("43"),
            Found::Tree(None),
            Found::Tree(None)
        ]
    );
}

#[test]
fn hidden_processes_are_found_in_v1_hierarchies_and_the_hybrid_unified() {
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path().join("fs/cgroup");
    cgroup(&root, "freezer/slurm/uid_1000/job_77/step_batch", &[20]);
    cgroup(
        &root,
        "memory/slurm/uid_1000/job_77/step_batch/task_0",
        &[20],
    );
    cgroup(&root, "freezer/slurm_n07/uid_0/job_78/step_0", &[21]);
    cgroup(
        &root,
        "unified/system.slice/slurmstepd.scope/job_79/step_0/user/task_0",
        &[22],
    );
    cgroup(&root, "freezer/other/uid_0/job_80", &[23]);
    let found = tree_jobs(sysfs.path(), &[20, 21, 22, 23]);
    let job = |id: &str| Found::Tree(Some(id.to_string()));
    assert_eq!(found, [job("77"), job("78"), job("79"), Found::Tree(None)]);
}

#[test]
fn a_readable_proc_cgroup_is_taken_as_it_is() {
    let sysfs = tempfile::tempdir().unwrap();
    cgroup(&sysfs.path().join("fs/cgroup"), "slurm/uid_0/job_7", &[30]);
    let mut jobs = Jobs::new(sysfs.path());
    // The process's own file wins, even where the tree would say otherwise.
    assert_eq!(jobs.of(30, Some("0::/init.scope\n")), Found::Proc(None));
    assert_eq!(jobs.of(30, None), Found::Tree(Some("7".into())));
}

#[test]
fn no_cgroup_file_system_is_no_job() {
    let sysfs = tempfile::tempdir().unwrap();
    assert_eq!(tree_jobs(sysfs.path(), &[1]), [Found::Tree(None)]);
}

/// tests/slurm's captures of a real one-node cluster (Slurm 22.05.8; the header of each file
/// says how): `/proc/PID/cgroup` of a process of every step of every kind of job, of each kind
/// of slurmstepd, of slurmd and slurmctld, and the cgroup tree at that moment. `cgroup/v1` on
/// the CI machine, `cgroup/v2` in the kernel lab (tests/lab/scenarios/slurm_cgroup_v2.sh).
const CAPTURES: [(&str, &str, &str); 2] = [
    (
        "cgroup/v1",
        include_str!("../../../tests/fixtures/slurm/cgroup_v1/proc_cgroup.txt"),
        include_str!("../../../tests/fixtures/slurm/cgroup_v1/tree.txt"),
    ),
    (
        "cgroup/v2",
        include_str!("../../../tests/fixtures/slurm/cgroup_v2/proc_cgroup.txt"),
        include_str!("../../../tests/fixtures/slurm/cgroup_v2/tree.txt"),
    ),
];

/// One `== PID JOB WHAT` block of a capture and the file below it; JOB is `squeue -o %A`'s.
struct Captured {
    pid: u32,
    job: Option<String>,
    what: String,
    cgroup: String,
}

fn captured(text: &str) -> Vec<Captured> {
    let mut blocks: Vec<Captured> = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        if let Some(head) = line.strip_prefix("== ") {
            let mut fields = head.splitn(3, ' ');
            let pid = fields.next().unwrap().parse().unwrap();
            let job = fields.next().unwrap();
            blocks.push(Captured {
                pid,
                job: (job != "-").then(|| job.to_string()),
                what: fields.next().unwrap_or_default().to_string(),
                cgroup: String::new(),
            });
        } else {
            let block = blocks.last_mut().expect("a line before the first block");
            block.cgroup.push_str(line);
            block.cgroup.push('\n');
        }
    }
    blocks
}

#[test]
fn the_real_captures_have_every_kind_of_step() {
    for (plugin, proc_cgroup, _) in CAPTURES {
        let blocks = captured(proc_cgroup);
        for step in ["step_0", "step_batch", "step_extern", "step_interactive"] {
            assert!(
                blocks
                    .iter()
                    .any(|b| b.cgroup.contains(&format!("/{step}"))),
                "{plugin}: no {step} in the capture"
            );
        }
        // An array task's cgroup is named by its own job id, not the array's: `3_1` is job 6.
        assert!(
            blocks
                .iter()
                .any(|b| b.what.contains("array job 3_1") && b.job.as_deref() == Some("6")),
            "{plugin}"
        );
    }
}

#[test]
fn real_cgroup_files_name_the_job_squeue_names() {
    for (plugin, proc_cgroup, _) in CAPTURES {
        for block in captured(proc_cgroup) {
            assert_eq!(
                from_cgroup(&block.cgroup),
                block.job,
                "{plugin}: pid {} ({}): {:?}",
                block.pid,
                block.what,
                block.cgroup
            );
        }
    }
}

#[test]
fn the_real_trees_name_the_same_jobs_for_hidden_processes() {
    for (plugin, proc_cgroup, tree) in CAPTURES {
        let sysfs = tempfile::tempdir().unwrap();
        let root = sysfs.path().join("fs/cgroup");
        for line in tree.lines().filter(|line| !line.starts_with('#')) {
            let mut fields = line.split(' ');
            let dir = fields.next().unwrap();
            let pids: Vec<u32> = fields.map(|pid| pid.parse().unwrap()).collect();
            cgroup(&root, dir, &pids);
        }
        let mut jobs = Jobs::new(sysfs.path());
        for block in captured(proc_cgroup) {
            assert_eq!(
                jobs.of(block.pid, None),
                Found::Tree(block.job),
                "{plugin}: pid {} ({})",
                block.pid,
                block.what
            );
        }
    }
}

//! Pid to job from the cgroup tree, for processes whose `/proc/PID/cgroup` is hidden. Only
//! the directories slurmd makes jobs in are listed, not the whole tree: in `fs/cgroup` itself
//! (cgroup v2), in each of its subdirectories (the v1 hierarchies, the hybrid layout's
//! `unified`, v2's `system.slice`) and in their `system.slice`, the entries named
//! `*slurmstepd.scope` (v2) and `slurm`/`slurm_<node>` (v1, with `uid_<U>` below); then every
//! `cgroup.procs` in each job's subtree (`step_<id>`, `user`, `task_<n>`, `slurm`).

use std::collections::BTreeMap;

use super::{in_path, is_slurm_root};
use crate::sysfs::SysDir;

/// Directories listed at most, all jobs together: a node runs a few jobs of a few steps and
/// tasks each; a tree past this is not Slurm's, and reading stops there.
const MAX_DIRECTORIES: usize = 16 << 10;
/// Levels below a job's directory: `step_0/user/task_0` is three.
const MAX_DEPTH: usize = 4;
/// A `cgroup.procs` lists one pid a line; 1 MiB is over 100 000 of them.
const MAX_PROCS_BYTES: usize = 1 << 20;

/// Every pid listed in a job's cgroups under `cgroupfs`, with the job's id.
pub fn pids_by_job(cgroupfs: &SysDir) -> BTreeMap<u32, String> {
    let mut walk = Walk {
        pids: BTreeMap::new(),
        listed: 0,
    };
    let names = walk.names(cgroupfs);
    walk.base(cgroupfs, &names);
    // The v1 hierarchies and `unified`; a v2 root's `system.slice` is looked into above.
    for name in names.iter().filter(|name| *name != "system.slice") {
        if let Ok(base) = cgroupfs.subdir(name) {
            let names = walk.names(&base);
            walk.base(&base, &names);
        }
    }
    walk.pids
}

struct Walk {
    pids: BTreeMap<u32, String>,
    listed: usize,
}

impl Walk {
    /// The jobs in one hierarchy's root, or in a directory that may hold slurmstepd's scope.
    fn base(&mut self, base: &SysDir, names: &[String]) {
        for name in names {
            if name.ends_with("slurmstepd.scope") {
                self.jobs_in(base, name, name);
            } else if is_slurm_root(name) {
                let Ok(slurm) = base.subdir(name) else {
                    continue;
                };
                for uid in self.names(&slurm) {
                    self.jobs_in(&slurm, &uid, &format!("{name}/{uid}"));
                }
            } else if name == "system.slice" {
                let Ok(slice) = base.subdir(name) else {
                    continue;
                };
                for scope in self.names(&slice) {
                    if scope.ends_with("slurmstepd.scope") {
                        self.jobs_in(&slice, &scope, &scope);
                    }
                }
            }
        }
    }

    /// The names in `dir`, nothing once the budget is spent.
    fn names(&mut self, dir: &SysDir) -> Vec<String> {
        if self.listed >= MAX_DIRECTORIES {
            return Vec::new();
        }
        self.listed += 1;
        let entries = dir.entries().unwrap_or_default();
        entries
            .into_iter()
            .filter_map(|e| e.into_name().ok())
            .collect()
    }

    /// The jobs directly in `parent/name`: each `job_<N>` that [`in_path`] names in `path`
    /// (`name` with the directories above it that tell where it is: `slurm/uid_0`).
    fn jobs_in(&mut self, parent: &SysDir, name: &str, path: &str) {
        let Ok(holder) = parent.subdir(name) else {
            return;
        };
        for job in self.names(&holder) {
            if let Some(id) = in_path(&format!("/{path}/{job}")).map(str::to_string) {
                if let Ok(dir) = holder.subdir(&job) {
                    self.procs(&dir, &id, 0);
                }
            }
        }
    }

    /// The pids of `dir` and every directory below it, down to [`MAX_DEPTH`].
    fn procs(&mut self, dir: &SysDir, job: &str, depth: usize) {
        if let Ok(text) = dir.read_text_file("cgroup.procs", MAX_PROCS_BYTES) {
            for pid in text.lines().filter_map(|line| line.trim().parse().ok()) {
                self.pids.insert(pid, job.to_string());
            }
        }
        if depth >= MAX_DEPTH {
            return;
        }
        for name in self.names(dir) {
            if let Ok(child) = dir.subdir(&name) {
                self.procs(&child, job, depth + 1);
            }
        }
    }
}

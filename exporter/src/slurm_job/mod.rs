//! Which Slurm job a process runs in, from the cgroups `slurmd` makes for it (the
//! `cgroup/v1` and `cgroup/v2` plugins of Slurm 22.05 and later; `docs/slurm.md` has the
//! layouts). The id is the job's own (`squeue -o %A`): an array task's cgroup is named by its
//! unique id, never `1234_5`.
//!
//! First `/proc/PID/cgroup`, which names the process's cgroup in every hierarchy. Where that
//! file is hidden (`/proc` mounted with `hidepid=`, as privacy-minded sites do, or a unit with
//! `ProtectProc=invisible`), the job is found the other way round: the `cgroup.procs` files of
//! Slurm's job cgroups are world-readable and list the pids in each ([`tree`]).

mod tree;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::sysfs::SysDir;

/// `/proc/PID/cgroup` is one line per hierarchy; a few KiB at most.
pub const MAX_CGROUP_BYTES: usize = 64 << 10;

/// The Slurm job id a process runs in, from the text of its `/proc/PID/cgroup`: the first
/// line whose path lies in a job's cgroup ([`in_path`]). `None` for a process outside any job
/// (slurmd itself, a login shell).
pub fn from_cgroup(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        // hierarchy-ID:controllers:path; the path may hold colons itself.
        let path = line.splitn(3, ':').nth(2)?;
        in_path(path).map(str::to_string)
    })
}

/// The job id in a cgroup path, where slurmd puts jobs:
/// - cgroup v2: a `job_<N>` directory of slurmstepd's scope
///   (`/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`; `<node>_slurmstepd.scope` under
///   `--enable-multiple-slurmd`);
/// - cgroup v1: `slurm/uid_<U>/job_<N>` in any hierarchy
///   (`/slurm/uid_1000/job_42/step_batch/task_0`; `slurm_<node>` under `--enable-multiple-slurmd`).
pub fn in_path(path: &str) -> Option<&str> {
    let parts: Vec<&str> = path.split('/').collect();
    parts.iter().enumerate().skip(1).find_map(|(at, part)| {
        let id = part.strip_prefix("job_").filter(|id| is_number(id))?;
        let parent = parts[at - 1];
        let v2 = parent.ends_with("slurmstepd.scope");
        let v1 = parent.strip_prefix("uid_").is_some_and(is_number)
            && at >= 2
            && is_slurm_root(parts[at - 2]);
        (v2 || v1).then_some(id)
    })
}

/// The cgroup v1 directory slurmd makes its `uid_<U>` directories in.
fn is_slurm_root(name: &str) -> bool {
    name == "slurm" || name.starts_with("slurm_")
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// The jobs of the processes one scrape names. The cgroup tree is read once, and only when a
/// process's `/proc/PID/cgroup` could not be.
pub struct Jobs {
    /// `--path.sysfs`, whose `fs/cgroup` is opened only when a process needs the tree.
    sysfs: PathBuf,
    /// Pid to job from the tree, once read.
    from_tree: Option<BTreeMap<u32, String>>,
}

/// Where a process's job came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `/proc/PID/cgroup` was read: the job named there, if any.
    Proc(Option<String>),
    /// `/proc/PID/cgroup` could not be read (hidden, or the process exited): the job whose
    /// `cgroup.procs` lists the pid, if any.
    Tree(Option<String>),
}

impl Found {
    pub fn job(self) -> Option<String> {
        match self {
            Found::Proc(job) | Found::Tree(job) => job,
        }
    }
}

impl Jobs {
    /// For the cgroup file system under `sysfs` (`--path.sysfs`).
    pub fn new(sysfs: &Path) -> Jobs {
        Jobs {
            sysfs: sysfs.to_path_buf(),
            from_tree: None,
        }
    }

    /// The job of process `pid`, from `cgroup` (the text of its `/proc/PID/cgroup`, `None`
    /// where it could not be read) or else from the cgroup tree.
    pub fn of(&mut self, pid: u32, cgroup: Option<&str>) -> Found {
        if let Some(cgroup) = cgroup {
            return Found::Proc(from_cgroup(cgroup));
        }
        let sysfs = &self.sysfs;
        let tree = self.from_tree.get_or_insert_with(|| {
            let cgroupfs = SysDir::open(sysfs, "fs/cgroup");
            cgroupfs
                .map(|dir| tree::pids_by_job(&dir))
                .unwrap_or_default()
        });
        Found::Tree(tree.get(&pid).cloned())
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

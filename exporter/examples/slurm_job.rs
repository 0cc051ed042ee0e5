//! The Slurm job of each pid, as the `rdma_netlink` collector names a holder's job:
//! `slurm_job [--procfs DIR] [--sysfs DIR] PID...` prints `PID JOB FROM` a line (`JOB` `-` for
//! none, `FROM` `proc` or `tree`: which file it came from). tests/slurm runs it on the processes
//! of jobs a real slurmd started, to compare with what `squeue` says.
use std::path::PathBuf;
use std::process::ExitCode;

use hpcnode_exporter::slurm_job::{Found, Jobs, MAX_CGROUP_BYTES};
use hpcnode_exporter::sysfs::SysDir;

fn main() -> ExitCode {
    let mut procfs = PathBuf::from("/proc");
    let mut sysfs = PathBuf::from("/sys");
    let mut pids = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let dir = match arg.as_str() {
            "--procfs" => &mut procfs,
            "--sysfs" => &mut sysfs,
            pid => match pid.parse::<u32>() {
                Ok(pid) => {
                    pids.push(pid);
                    continue;
                }
                Err(_) => return usage(),
            },
        };
        match args.next() {
            Some(path) => *dir = path.into(),
            None => return usage(),
        }
    }
    let proc = SysDir::open(&procfs, "").ok();
    let mut jobs = Jobs::new(&sysfs);
    for pid in pids {
        let cgroup = proc.as_ref().and_then(|proc| {
            proc.read_text_file(&format!("{pid}/cgroup"), MAX_CGROUP_BYTES)
                .ok()
        });
        let (job, from) = match jobs.of(pid, cgroup.as_deref()) {
            Found::Proc(job) => (job, "proc"),
            Found::Tree(job) => (job, "tree"),
        };
        println!("{pid} {} {from}", job.as_deref().unwrap_or("-"));
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("usage: slurm_job [--procfs DIR] [--sysfs DIR] PID...");
    ExitCode::from(2)
}

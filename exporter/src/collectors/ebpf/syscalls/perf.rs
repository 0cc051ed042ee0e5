//! Counting a tracepoint with perf events where BPF is refused, and tracefs, where the
//! tracepoints' ids are (mounted here when it is not yet).

use std::path::Path;
use std::sync::Mutex;

use perf_event::events::Tracepoint as PerfTracepoint;

use super::Attachment;
use crate::collectors::ebpf::error::SyscallError;
use crate::sysfs::{AttributeReader, SysDir};

pub(super) fn count_with_perf(targets: &[&str]) -> Result<Attachment, SyscallError> {
    let target = targets.first().copied().unwrap_or_default();
    let id = tracepoint_id(target)?;
    let cpus = aya::util::online_cpus().map_err(|(path, err)| SyscallError::OnlineCpus {
        path: path.to_string(),
        err,
    })?;
    let counters = cpus
        .into_iter()
        .map(|cpu| {
            let mut counter = perf_event::Builder::new(PerfTracepoint::with_id(id))
                .one_cpu(cpu as usize)
                .any_pid()
                .include_kernel()
                .build()?;
            counter.enable()?;
            Ok(counter)
        })
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(SyscallError::PerfOpen)?;
    Ok(Attachment::Perf(Mutex::new(counters)))
}

/// A tracepoint's id from tracefs (`events/<category>/<name>/id`).
fn tracepoint_id(target: &str) -> Result<u64, SyscallError> {
    let tracefs = tracefs_dir().ok_or(SyscallError::TracefsNotMounted)?;
    let events = SysDir::open(Path::new(tracefs), "events").map_err(SyscallError::Tracefs)?;
    events
        .read_u64(&format!("{target}/id"), &mut AttributeReader::default())
        .map_err(SyscallError::Tracefs)
}

const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

fn tracefs_dir() -> Option<&'static str> {
    TRACEFS_DIRS
        .into_iter()
        .find(|dir| Path::new(dir).join("events").is_dir())
}

/// Makes tracefs available (the classic tracepoint hooks need it) unless it is mounted
/// already: tracefs at /sys/kernel/tracing, else debugfs at /sys/kernel/debug, whose
/// `tracing` directory is where kernels before 4.1 keep it. Returns what this call mounted.
pub fn ensure_tracefs() -> Result<Option<&'static str>, SyscallError> {
    if tracefs_dir().is_some() {
        return Ok(None);
    }
    let mounts = [
        (
            c"tracefs",
            c"/sys/kernel/tracing",
            "tracefs at /sys/kernel/tracing",
        ),
        (
            c"debugfs",
            c"/sys/kernel/debug",
            "debugfs at /sys/kernel/debug",
        ),
    ];
    let mut failures = Vec::new();
    for (fstype, target, what) in mounts {
        // SAFETY: constant NUL-terminated strings and no mount data.
        let rc = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            failures.push(format!(
                "mounting {what}: {}",
                std::io::Error::last_os_error()
            ));
        } else if tracefs_dir().is_some() {
            return Ok(Some(what));
        }
    }
    failures.push("no tracing directory".into());
    Err(SyscallError::Mount(failures.join("; ")))
}

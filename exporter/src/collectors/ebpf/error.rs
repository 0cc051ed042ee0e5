//! What the syscall layer's failures say: one line each, as the logs and
//! `hpcnode_ebpf_probe_failure_info` show them (aya's errors folded by [`one_line`]).

use std::error::Error;
use std::path::PathBuf;

use crate::sysfs::SysfsError;

/// Why a load, attach or read failed; each says it on one line, as the logs and
/// `hpcnode_ebpf_probe_failure_info` show it.
#[derive(Debug, thiserror::Error)]
pub enum SyscallError {
    /// aya's error and its causes on one line ([`one_line`], [`creation_failure`]).
    #[error("{0}")]
    Refused(String),
    #[error("loading the object: {0}")]
    LoadObject(String),
    #[error("program {0} missing from the object")]
    MissingProgram(String),
    #[error("{0} missing from the object")]
    MissingFromObject(&'static str),
    #[error("map {0} missing")]
    MissingMap(String),
    #[error("program {0} gone")]
    ProgramGone(&'static str),
    #[error("not a BPF program")]
    NotBpf,
    #[error("module names need kernel BTF")]
    NamesNeedBtf,
    #[error("{program}: {reason}")]
    Namer {
        program: &'static str,
        reason: String,
    },
    /// Every target of a hook tried again, `hook(target): reason` each.
    #[error("{0}")]
    Reattach(String),
    #[error("starting a thread: {0}")]
    Thread(std::io::Error),
    #[error("opening /dev/kmsg: {0}")]
    Kmsg(std::io::Error),
    #[error("reading {path}: {err}")]
    OnlineCpus { path: String, err: std::io::Error },
    #[error("perf_event_open: {0}")]
    PerfOpen(std::io::Error),
    #[error("reading perf counter: {0}")]
    PerfRead(std::io::Error),
    #[error("tracefs not mounted")]
    TracefsNotMounted,
    #[error("{0}")]
    Tracefs(SysfsError),
    /// Every mount tried, `mounting WHAT: reason` each, then "no tracing directory".
    #[error("{0}")]
    Mount(String),
    #[error("--collector.ebpf.btf-path {}: {reason}", path.display())]
    BtfFile { path: PathBuf, reason: String },
}

/// An aya error on one line.
pub(super) fn refused(err: &dyn Error) -> SyscallError {
    SyscallError::Refused(one_line(err))
}

/// An error and its causes on one line, whitespace (the verifier log's newlines) collapsed,
/// cut to its last 300 bytes, where the verifier says why it refused.
pub(super) fn one_line(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        // Some errors already print their cause; say it once.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut line = words.join(" ");
    const MAX: usize = 300;
    if line.len() > MAX {
        let cut = line.len() - MAX;
        let cut = (cut..line.len())
            .find(|&i| line.is_char_boundary(i))
            .unwrap_or(0);
        line = format!("...{}", &line[cut..]);
    }
    line
}

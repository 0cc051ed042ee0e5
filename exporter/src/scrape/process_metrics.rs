//! The exporter's own `process_*` metrics, named, typed and described as the Prometheus client
//! libraries do (client_golang's process collector): CPU time, memory, descriptors and start
//! time. Read from `/proc/self`, the process itself and so not rooted in `--path.procfs`, and
//! from its resource limits. What cannot be read is left out, as the client libraries do.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags, RawDir};
use rustix::process::{getrlimit, Resource};
use rustix::time::{clock_gettime, ClockId};

use crate::metrics::{Desc, Samples, Value};

pub(super) const CPU: Desc = Desc::counter(
    "process_cpu",
    "Total user and system CPU time spent in seconds.",
    Some("seconds"),
);
pub(super) const RESIDENT_MEMORY: Desc = Desc::gauge(
    "process_resident_memory",
    "Resident memory size in bytes.",
    Some("bytes"),
);
pub(super) const VIRTUAL_MEMORY: Desc = Desc::gauge(
    "process_virtual_memory",
    "Virtual memory size in bytes.",
    Some("bytes"),
);
pub(super) const VIRTUAL_MEMORY_MAX: Desc = Desc::gauge(
    "process_virtual_memory_max",
    "Maximum amount of virtual memory available in bytes.",
    Some("bytes"),
);
pub(super) const OPEN_FDS: Desc =
    Desc::gauge("process_open_fds", "Number of open file descriptors.", None);
pub(super) const MAX_FDS: Desc = Desc::gauge(
    "process_max_fds",
    "Maximum number of open file descriptors.",
    None,
);
pub(super) const START_TIME: Desc = Desc::gauge(
    "process_start_time",
    "Start time of the process since unix epoch in seconds.",
    Some("seconds"),
);

/// What `/proc/self/stat` says of the process, in its units.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    /// Clock ticks in user and in kernel mode.
    user_ticks: u64,
    system_ticks: u64,
    /// Clock ticks from boot to the process's start.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

/// `/proc/<pid>/stat` (proc(5)). The command name, field 2, is in parentheses and may itself
/// hold spaces and parentheses: fields are counted after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, after_name) = text.rsplit_once(')')?;
    // Field 3 (the state) is the first after the name.
    let mut fields = after_name.split_ascii_whitespace().map(str::parse::<u64>);
    let mut field = |n: usize, after: usize| fields.nth(n - after - 1)?.ok();
    let user_ticks = field(14, 2)?;
    let system_ticks = field(15, 14)?;
    let start_ticks = field(22, 15)?;
    let virtual_bytes = field(23, 22)?;
    let resident_pages = field(24, 23)?;
    Some(Stat {
        user_ticks,
        system_ticks,
        start_ticks,
        virtual_bytes,
        resident_pages,
    })
}

/// A resource limit as the client libraries give it: unlimited is the largest `u64`.
fn limit(resource: Resource) -> Value {
    Value::Int(getrlimit(resource).current.unwrap_or(u64::MAX))
}

/// The descriptors open in this process, the one that counts them included, as the client
/// libraries count them (they list `/proc/self/fd` through a descriptor of its own).
fn open_fds() -> Option<u64> {
    count_fds(open_fd_dir("/proc/self/fd")?)
}

fn open_fd_dir(path: &str) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::open(path, flags, Mode::empty()).ok()
}

/// The descriptors open in the process whose `/proc/<pid>/fd` is `dir`. Since Linux 6.2 its
/// size is their count, taken from the descriptor table at once: listing it looks up a dentry
/// for every descriptor, a tenth of a scrape's CPU for the thousands of sysfs attributes this
/// exporter holds. Before 6.2 the size is 0, which a directory open in the process it counts
/// never is: then it is listed.
fn count_fds(dir: OwnedFd) -> Option<u64> {
    match rustix::fs::fstat(&dir).ok()?.st_size {
        size @ 1.. => u64::try_from(size).ok(),
        _ => listed_fds(dir),
    }
}

/// The entries of a `/proc/<pid>/fd`, listed through a buffer on the stack: a listing that
/// allocated per entry would cost a scrape an allocation per held sysfs descriptor.
fn listed_fds(dir: OwnedFd) -> Option<u64> {
    let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
    let mut entries = RawDir::new(&dir, &mut buffer);
    let mut count = 0;
    while let Some(entry) = entries.next() {
        if !matches!(entry.ok()?.file_name().to_bytes(), b"." | b"..") {
            count += 1;
        }
    }
    Some(count)
}

/// The process's metrics now. A few system calls and two small reads of `/proc/self`, run on
/// the blocking pool like every other read.
pub(super) fn read() -> Samples {
    let mut samples = Samples::default();
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    if let Some(stat) = stat.as_deref().and_then(parse_stat) {
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let cpu = (stat.user_ticks as f64 + stat.system_ticks as f64) / ticks;
        let resident = stat
            .resident_pages
            .saturating_mul(rustix::param::page_size() as u64);
        // The start in ticks since boot, on the wall clock: boot is now less the time since.
        let seconds = |clock| {
            let now = clock_gettime(clock);
            now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
        };
        let booted = seconds(ClockId::Realtime) - seconds(ClockId::Boottime);
        let started = booted + stat.start_ticks as f64 / ticks;
        samples.push(&CPU, Vec::new(), Value::Float(cpu));
        samples.push(&RESIDENT_MEMORY, Vec::new(), Value::Int(resident));
        samples.push(&VIRTUAL_MEMORY, Vec::new(), Value::Int(stat.virtual_bytes));
        samples.push(&START_TIME, Vec::new(), Value::Float(started));
    }
    samples.push(&VIRTUAL_MEMORY_MAX, Vec::new(), limit(Resource::As));
    if let Some(fds) = open_fds() {
        samples.push(&OPEN_FDS, Vec::new(), Value::Int(fds));
    }
    samples.push(&MAX_FDS, Vec::new(), limit(Resource::Nofile));
    samples
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped_whole() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1500 0 0 0 \
                    250 75 0 0 20 0 3 0 123456 52428800 2048 18446744073709551615 1 1 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                user_ticks: 250,
                system_ticks: 75,
                start_ticks: 123456,
                virtual_bytes: 52428800,
                resident_pages: 2048,
            })
        );
        assert_eq!(parse_stat("4242 (short) S 1 2 3"), None);
        assert_eq!(parse_stat("no name at all"), None);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let text = crate::metrics::encode(read(), crate::metrics::Format::PrometheusText).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
    }

    /// A shell counted once it has said it is ready (past the loader's opens, waiting on its
    /// stdin): the same count, at least its stdin, stdout and stderr, whether its directory's
    /// size gives it (Linux 6.2 and later) or its listing does.
    #[test]
    fn a_process_descriptors_are_counted_by_size_and_by_listing_alike() {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new("sh")
            .args(["-c", "echo ready; read line"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready, "ready\n");
        let path = format!("/proc/{}/fd", child.id());
        let by_size = count_fds(open_fd_dir(&path).unwrap());
        let by_listing = listed_fds(open_fd_dir(&path).unwrap());
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(by_listing.is_some_and(|count| count >= 3), "{by_listing:?}");
        assert_eq!(by_size, by_listing);
    }

    proptest! {
        #[test]
        fn any_text_parses_without_panic(text in ".{0,200}") {
            let _ = parse_stat(&text);
        }

        #[test]
        fn written_fields_read_back(
            name in "[ -~]{0,16}",
            user in any::<u64>(),
            system in any::<u64>(),
            start in any::<u64>(),
            vsize in any::<u64>(),
            rss in any::<u64>(),
        ) {
            let line = format!(
                "1 ({name}) R 0 1 1 0 -1 0 0 0 0 0 {user} {system} 0 0 20 0 1 0 {start} {vsize} {rss} 0"
            );
            prop_assert_eq!(
                parse_stat(&line),
                Some(Stat {
                    user_ticks: user,
                    system_ticks: system,
                    start_ticks: start,
                    virtual_bytes: vsize,
                    resident_pages: rss,
                })
            );
        }
    }
}

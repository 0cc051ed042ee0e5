//! Structured log lines on stderr, in logfmt (node_exporter's default) or JSON.
//!
//! Logging never waits for stderr: after `init`, a line goes into a bounded queue that a writer
//! thread of its own drains, so a stalled stderr (a stuck journald or container log pipe) cannot
//! hold up serving. When the queue is full the line is dropped and counted
//! (`hpcnode_log_messages_dropped_total`). At exit, `init`'s guard waits a bounded time for the
//! queue to be written.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::hash::Hash;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::sync::lock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<Level> {
        [Level::Debug, Level::Info, Level::Warn, Level::Error]
            .into_iter()
            .find(|level| level.as_str() == text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Logfmt,
    Json,
}

impl LogFormat {
    pub fn parse(text: &str) -> Option<LogFormat> {
        match text {
            "logfmt" => Some(LogFormat::Logfmt),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// Lines waiting for stderr at most; past it, lines are dropped.
const MAX_QUEUED_LINES: usize = 1024;

/// How long exit waits for queued lines to reach a stalled stderr.
const FLUSH_LIMIT: Duration = Duration::from_secs(1);

struct Logger {
    threshold: Level,
    format: LogFormat,
    /// `None` if the writer thread could not be started: lines are then written directly.
    queue: Option<LineQueue>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets the threshold and format once, at startup, and starts the writer thread. Until then
/// (unit tests, `probe` commands) warnings and errors go out as logfmt, written directly.
/// Keep the guard until exit: dropping it waits, a bounded time, for queued lines.
pub fn init(level: Level, format: LogFormat) -> FlushOnDrop {
    LOGGER.get_or_init(|| Logger {
        threshold: level,
        format,
        queue: LineQueue::start(std::io::stderr(), MAX_QUEUED_LINES, format, level).ok(),
    });
    FlushOnDrop
}

/// Returned by `init`: when dropped, waits until the lines logged so far are written, or
/// [`FLUSH_LIMIT`] has passed (a stalled stderr must not hang exit).
#[must_use = "dropping it at once flushes at once, not at exit"]
pub struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        if let Some(queue) = LOGGER.get().and_then(|logger| logger.queue.as_ref()) {
            queue.flush(FLUSH_LIMIT);
        }
    }
}

/// Lines dropped since start because stderr did not keep up.
pub fn dropped_lines() -> u64 {
    LOGGER
        .get()
        .and_then(|logger| logger.queue.as_ref())
        .map_or(0, LineQueue::dropped)
}

pub fn log(level: Level, msg: &str, fields: &[(&str, &str)]) {
    let logger = LOGGER.get();
    let (threshold, format) = logger.map_or((Level::Warn, LogFormat::Logfmt), |l| {
        (l.threshold, l.format)
    });
    if level < threshold {
        return;
    }
    let line = format_line(format, &timestamp(), level, msg, fields);
    match logger.and_then(|logger| logger.queue.as_ref()) {
        Some(queue) => queue.push(line),
        // A closed stderr must not take the exporter down.
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

/// A bounded queue of lines and the thread that writes them out.
struct LineQueue {
    lines: SyncSender<String>,
    counts: Arc<LineCounts>,
}

#[derive(Default)]
struct LineCounts {
    queued: AtomicU64,
    /// Taken off the queue and written (or failed to write: a closed stderr).
    written: AtomicU64,
    dropped: AtomicU64,
}

/// Bytes the writer gathers into one write at most.
const MAX_BATCH_BYTES: usize = 64 * 1024;

impl LineQueue {
    /// `format` and `threshold` are for the writer's own line about dropped lines.
    fn start(
        out: impl Write + Send + 'static,
        capacity: usize,
        format: LogFormat,
        threshold: Level,
    ) -> std::io::Result<LineQueue> {
        let (lines, pending) = mpsc::sync_channel(capacity);
        let counts = Arc::new(LineCounts::default());
        let shared = counts.clone();
        let report_drops = (Level::Warn >= threshold).then_some(format);
        std::thread::Builder::new()
            .name("hpcnode-log".into())
            .spawn(move || write_lines(&pending, out, &shared, report_drops))?;
        Ok(LineQueue { lines, counts })
    }

    /// Never waits: with the queue full, the line is dropped and counted.
    fn push(&self, line: String) {
        match self.lines.try_send(line) {
            Ok(()) => self.counts.queued.fetch_add(1, Ordering::Release),
            Err(_) => self.counts.dropped.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Waits until the lines queued before the call are written, `limit` at most.
    fn flush(&self, limit: Duration) {
        let queued = self.counts.queued.load(Ordering::Acquire);
        let deadline = Instant::now() + limit;
        while self.counts.written.load(Ordering::Acquire) < queued && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The writer thread: whatever is queued goes out in one write, followed by a warning when
/// lines were dropped since the last one (with `report_drops`, the format to write it in).
fn write_lines(
    pending: &Receiver<String>,
    mut out: impl Write,
    counts: &LineCounts,
    report_drops: Option<LogFormat>,
) {
    let mut reported = 0;
    let mut batch = String::new();
    while let Ok(first) = pending.recv() {
        batch.clear();
        batch.push_str(&first);
        let mut taken = 1;
        while batch.len() < MAX_BATCH_BYTES {
            let Ok(line) = pending.try_recv() else { break };
            batch.push_str(&line);
            taken += 1;
        }
        let dropped = counts.dropped.load(Ordering::Relaxed);
        if let Some(format) = report_drops.filter(|_| dropped > reported) {
            batch.push_str(&format_line(
                format,
                &timestamp(),
                Level::Warn,
                "log lines dropped: stderr did not keep up",
                &[("dropped_total", &dropped.to_string())],
            ));
        }
        reported = dropped;
        // A closed stderr must not take the exporter down: its lines count as written.
        let _ = out.write_all(batch.as_bytes());
        counts.written.fetch_add(taken, Ordering::Release);
    }
}

fn format_line(
    format: LogFormat,
    ts: &str,
    level: Level,
    msg: &str,
    fields: &[(&str, &str)],
) -> String {
    let all = [("ts", ts), ("level", level.as_str()), ("msg", msg)];
    let pairs = all.iter().chain(fields.iter());
    let mut line = String::with_capacity(128);
    match format {
        LogFormat::Logfmt => {
            for (i, (key, value)) in pairs.enumerate() {
                if i > 0 {
                    line.push(' ');
                }
                let needs_quotes = value.is_empty()
                    || value
                        .chars()
                        .any(|c| c == ' ' || c == '"' || c == '=' || c.is_control());
                if needs_quotes {
                    let _ = write!(line, "{key}={value:?}");
                } else {
                    let _ = write!(line, "{key}={value}");
                }
            }
        }
        LogFormat::Json => {
            let object: serde_json::Map<String, serde_json::Value> = pairs
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
                .collect();
            line.push_str(&serde_json::Value::Object(object).to_string());
        }
    }
    line.push('\n');
    line
}

/// RFC 3339 UTC with milliseconds, computed without a calendar crate.
fn timestamp() -> String {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since_epoch.subsec_millis()
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The one log-once-per-cause filter: says whether a cause is new. Memory is bounded without
/// ever going deaf: causes are remembered in two generations of `capacity / 2`; when the current
/// one is full the older is forgotten, so a cause not seen for a while is logged again, a cause
/// that keeps recurring stays remembered (a sighting moves it to the current generation), and a
/// new cause is always logged, however many others churned before it.
#[derive(Debug)]
pub struct OncePerCause<K> {
    per_generation: usize,
    seen: Mutex<Generations<K>>,
}

#[derive(Debug)]
struct Generations<K> {
    current: HashSet<K>,
    previous: HashSet<K>,
}

impl<K: Eq + Hash> OncePerCause<K> {
    pub fn new(capacity: usize) -> Self {
        OncePerCause {
            per_generation: (capacity / 2).max(1),
            seen: Mutex::new(Generations {
                current: HashSet::new(),
                previous: HashSet::new(),
            }),
        }
    }

    /// True the first time `cause` is seen (recently): log it. Decided under the lock; the
    /// caller logs after it.
    pub fn is_new(&self, cause: K) -> bool {
        let mut guard = lock(&self.seen);
        let seen = &mut *guard;
        if seen.current.contains(&cause) {
            return false;
        }
        let remembered = seen.previous.remove(&cause);
        if seen.current.len() >= self.per_generation {
            seen.previous = std::mem::take(&mut seen.current);
        }
        seen.current.insert(cause);
        !remembered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logfmt_quotes_values_with_spaces() {
        let line = format_line(
            LogFormat::Logfmt,
            "T",
            Level::Warn,
            "collector error",
            &[("collector", "rdma"), ("err", "read /x: No such file")],
        );
        assert_eq!(
            line,
            "ts=T level=warn msg=\"collector error\" collector=rdma err=\"read /x: No such file\"\n"
        );
    }

    #[test]
    fn json_is_one_object_per_line() {
        let line = format_line(LogFormat::Json, "T", Level::Info, "a\"b", &[("k", "v")]);
        let value: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(value["msg"], "a\"b");
        assert_eq!(value["level"], "info");
        assert_eq!(value["k"], "v");
    }

    /// A stderr that accepts nothing until the test opens its gate, like a pipe to a stuck
    /// journald; what it accepts after that is kept.
    struct GatedOutput {
        gate: Option<mpsc::Receiver<()>>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for GatedOutput {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Some(gate) = self.gate.take() {
                let _ = gate.recv();
            }
            lock(&self.written).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn stalled_output_drops_and_counts_lines_and_never_holds_up_logging_or_exit() {
        let (open, gate) = mpsc::channel();
        let written = Arc::new(Mutex::new(Vec::new()));
        let output = GatedOutput {
            gate: Some(gate),
            written: written.clone(),
        };
        let queue = LineQueue::start(output, 8, LogFormat::Logfmt, Level::Info).unwrap();

        let started = Instant::now();
        for i in 0..1000 {
            queue.push(format!("line {i}\n"));
        }
        assert!(started.elapsed() < Duration::from_secs(1), "logging waited");
        assert!(queue.dropped() > 0);

        let started = Instant::now();
        queue.flush(Duration::from_millis(100));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "flush not bounded"
        );

        open.send(()).unwrap();
        queue.flush(Duration::from_secs(10));
        queue.push("after\n".to_string());
        queue.flush(Duration::from_secs(10));
        let text = String::from_utf8(lock(&written).clone()).unwrap();
        assert!(text.starts_with("line 0\n"), "{text}");
        let dropped = format!("dropped_total={}", queue.dropped());
        assert!(
            text.contains("msg=\"log lines dropped: stderr did not keep up\"")
                && text.contains(&dropped),
            "{text}"
        );
        assert!(text.ends_with("\nafter\n"), "{text}");
        let kept = text.lines().filter(|l| l.starts_with("line ")).count();
        assert_eq!(kept as u64 + queue.dropped(), 1000, "lines lost uncounted");
    }

    #[test]
    fn a_new_cause_is_logged_however_many_others_churned_before() {
        let filter = OncePerCause::new(64);
        assert!(filter.is_new("recurring".to_string()));
        for i in 0..10_000 {
            assert!(filter.is_new(format!("churn {i}")));
            assert!(
                !filter.is_new("recurring".to_string()),
                "a recurring cause was forgotten"
            );
        }
        assert!(filter.is_new("new fault".to_string()));
        assert!(!filter.is_new("new fault".to_string()));
        // Long unseen: forgotten, and logged again.
        assert!(filter.is_new("churn 0".to_string()));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_787), (2026, 11, 30));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}

//! Structured log lines on stderr, in logfmt (node_exporter's default) or JSON.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::hash::Hash;
use std::io::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

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

static CONFIG: OnceLock<(Level, LogFormat)> = OnceLock::new();

/// Sets the threshold and format once, at startup. Until then (unit tests) warnings and errors
/// go out as logfmt.
pub fn init(level: Level, format: LogFormat) {
    let _ = CONFIG.set((level, format));
}

pub fn log(level: Level, msg: &str, fields: &[(&str, &str)]) {
    let (threshold, format) = *CONFIG.get().unwrap_or(&(Level::Warn, LogFormat::Logfmt));
    if level < threshold {
        return;
    }
    let line = format_line(format, &timestamp(), level, msg, fields);
    // A closed stderr must not take the exporter down.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
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
        let mut guard = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
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

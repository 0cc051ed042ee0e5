//! Keeping the web config in force while its files change, without ever falling open.
//!
//! Requests never read a file: they take the config now in force and wake the reader thread,
//! which looks at the stamps of the config and the files it names (a few `stat` calls)
//! and reads them again only when one changed, once it has stopped changing for [`SETTLE`]
//! (a writer that truncates, then writes, as `cat >` and many editors do, is done by then).
//! The new reading replaces the one in force only when it loads whole and guards at least
//! what the one at start guarded ([`Posture`]); otherwise it is counted by reason, logged once
//! per cause, and the last good config stays. A reading that hangs (a hung NFS mount) holds
//! only the reader thread, and is reported once it passes [`READ_DEADLINE`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::{load, Loaded, Posture, WebConfig, WebConfigError};
use crate::logging::{self, Level, OncePerCause};
use crate::sync::lock;
use crate::sysfs::FileStamp;

/// A changed file is read once its stamp has held this long.
const SETTLE: Duration = Duration::from_millis(100);
/// A file still changing after this many settle periods waits for the next request's look.
const MAX_SETTLE_LOOKS: u32 = 50;
/// A reading not finished in this long is reported (and at start, is an error).
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Distinct reload failures remembered for logging each once.
const MAX_LOGGED_CAUSES: usize = 32;

/// Why a changed config was not taken, the `reason` label of the reload failures.
pub const RELOAD_FAILURE_REASONS: [&str; 5] =
    ["unreadable", "empty", "invalid", "weaker", "timeout"];

/// The web config file, read again off the request path when it or a file it names changes.
pub struct WebConfigFile {
    path: PathBuf,
    /// How long a changed file must hold still before it is read ([`SETTLE`]).
    settle: Duration,
    /// What the config at start guards; no reload may guard less.
    posture: Posture,
    current: Mutex<Arc<WebConfig>>,
    /// Wakes the reader thread; a wake-up already pending is enough.
    look: SyncSender<()>,
    /// The files of the config in force (the config file first) as last seen; only the reader
    /// thread uses it.
    watched: Mutex<Vec<(PathBuf, Option<FileStamp>)>>,
    epoch: Instant,
    /// Milliseconds from `epoch` (plus one) when the reading in progress began; 0: none.
    reading_since: AtomicU64,
    overdue_reported: AtomicBool,
    /// By [`RELOAD_FAILURE_REASONS`].
    failures: [AtomicU64; RELOAD_FAILURE_REASONS.len()],
    failures_logged: OncePerCause<String>,
}

/// Why a changed config was not taken.
enum Refused {
    Load(WebConfigError),
    Weaker(&'static str),
}

impl Refused {
    fn reason(&self) -> &'static str {
        match self {
            Refused::Load(WebConfigError::File(_)) => "unreadable",
            Refused::Load(WebConfigError::Empty { .. }) => "empty",
            Refused::Load(_) => "invalid",
            Refused::Weaker(_) => "weaker",
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Load(err) => err.fmt(f),
            Refused::Weaker(why) => write!(f, "refused: {why}"),
        }
    }
}

impl WebConfigFile {
    /// Reads the file for the first time (an error here is a startup error) and starts the
    /// thread that takes its changes.
    pub fn open(path: &Path) -> Result<Arc<WebConfigFile>, WebConfigError> {
        WebConfigFile::open_settling(path, SETTLE)
    }

    /// As [`WebConfigFile::open`], with changes read once they held still for `settle`.
    pub(crate) fn open_settling(
        path: &Path,
        settle: Duration,
    ) -> Result<Arc<WebConfigFile>, WebConfigError> {
        let loaded = load_within(path, READ_DEADLINE)?;
        let (look, looks) = mpsc::sync_channel(1);
        let file = Arc::new(WebConfigFile {
            path: path.to_path_buf(),
            settle,
            posture: loaded.config.posture(),
            current: Mutex::new(Arc::new(loaded.config)),
            look,
            watched: Mutex::new(watched(loaded.files)),
            epoch: Instant::now(),
            reading_since: AtomicU64::new(0),
            overdue_reported: AtomicBool::new(false),
            failures: Default::default(),
            failures_logged: OncePerCause::new(MAX_LOGGED_CAUSES),
        });
        let reader = Arc::downgrade(&file);
        std::thread::Builder::new()
            .name("web-config".into())
            .spawn(move || take_changes(reader, looks))
            .map_err(WebConfigError::Thread)?;
        Ok(file)
    }

    /// The config now in force; also asks the reader thread to look for changes.
    pub fn current(&self) -> Arc<WebConfig> {
        self.report_overdue_reading();
        // Full: a look is already due, which will see this change too.
        let _ = self.look.try_send(());
        lock(&self.current).clone()
    }

    /// Reloads refused since start, by [`RELOAD_FAILURE_REASONS`].
    pub fn reload_failures(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        RELOAD_FAILURE_REASONS
            .iter()
            .zip(&self.failures)
            .map(|(reason, count)| (*reason, count.load(Ordering::Relaxed)))
    }

    /// One look from the reader thread: a changed file, once settled, read and taken or refused.
    pub(crate) fn look(&self) {
        let mut watched = lock(&self.watched);
        let mut seen = stamps(&watched);
        if watched.iter().map(|(_, id)| *id).eq(seen.iter().copied()) {
            return;
        }
        let mut settled = false;
        for _ in 0..MAX_SETTLE_LOOKS {
            std::thread::sleep(self.settle);
            let again = stamps(&watched);
            settled = again == seen;
            seen = again;
            if settled {
                break;
            }
        }
        if !settled {
            return;
        }
        self.reading_since.store(self.now_ms(), Ordering::Relaxed);
        let loaded = load(&self.path).map_err(Refused::Load).and_then(|loaded| {
            match self.posture.refuses(&loaded.config.posture()) {
                Some(why) => Err(Refused::Weaker(why)),
                None => Ok(loaded),
            }
        });
        self.reading_since.store(0, Ordering::Relaxed);
        self.overdue_reported.store(false, Ordering::Relaxed);
        match loaded {
            Ok(loaded) => {
                *watched = self::watched(loaded.files);
                *lock(&self.current) = Arc::new(loaded.config);
                logging::log(
                    Level::Info,
                    "web config file reloaded",
                    &[("file", &self.path.display().to_string())],
                );
            }
            Err(refused) => {
                // Tried again only when a file changes again.
                for ((_, id), now) in watched.iter_mut().zip(seen) {
                    *id = now;
                }
                self.refused(refused.reason(), &refused.to_string());
            }
        }
    }

    fn refused(&self, reason: &'static str, cause: &str) {
        if let Some(index) = RELOAD_FAILURE_REASONS.iter().position(|r| *r == reason) {
            self.failures[index].fetch_add(1, Ordering::Relaxed);
        }
        if self.failures_logged.is_new(cause.to_string()) {
            logging::log(
                Level::Error,
                "web config file not reloaded; keeping the last good one",
                &[
                    ("file", &self.path.display().to_string()),
                    ("reason", reason),
                    ("err", cause),
                    ("note", "logged once per cause"),
                ],
            );
        }
    }

    /// Counts and logs, once per reading, a reading that has passed its deadline.
    fn report_overdue_reading(&self) {
        let since = self.reading_since.load(Ordering::Relaxed);
        let overdue =
            since != 0 && self.now_ms().saturating_sub(since) > READ_DEADLINE.as_millis() as u64;
        if overdue && !self.overdue_reported.swap(true, Ordering::Relaxed) {
            let cause = format!("not read within {READ_DEADLINE:?}");
            self.refused("timeout", &cause);
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

fn watched(files: Vec<(PathBuf, FileStamp)>) -> Vec<(PathBuf, Option<FileStamp>)> {
    files
        .into_iter()
        .map(|(path, id)| (path, Some(id)))
        .collect()
}

fn stamps(watched: &[(PathBuf, Option<FileStamp>)]) -> Vec<Option<FileStamp>> {
    watched
        .iter()
        .map(|(path, _)| FileStamp::of_path(path))
        .collect()
}

/// The reader thread: a look at each wake-up, until the file's owner is gone.
fn take_changes(file: Weak<WebConfigFile>, looks: Receiver<()>) {
    while looks.recv().is_ok() {
        let Some(file) = file.upgrade() else {
            return;
        };
        file.look();
    }
}

/// [`load`] on a thread of its own, given up after `deadline` (the thread is left to finish).
fn load_within(path: &Path, deadline: Duration) -> Result<Loaded, WebConfigError> {
    let (done, result) = mpsc::sync_channel(1);
    let owned = path.to_path_buf();
    std::thread::Builder::new()
        .name("web-config".into())
        .spawn(move || {
            let _ = done.send(load(&owned));
        })
        .map_err(WebConfigError::Thread)?;
    result
        .recv_timeout(deadline)
        .unwrap_or(Err(WebConfigError::Timeout {
            path: path.to_path_buf(),
        }))
}

#[cfg(test)]
mod tests;

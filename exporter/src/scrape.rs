//! The scrape: every started collector run under one deadline, their listings and units read
//! by one crew of workers (one by default), and the framework's own metrics.
//!
//! Invariants:
//! - a scrape never fails and never waits past the deadline because of a collector;
//! - a collector's units (devices) are read independently: a unit whose read hangs is not read
//!   again until that read returns, so it hides only itself, and stuck threads never pile up
//!   (at most one per hung unit);
//! - a scrape that leaves any of a collector's units unread at the deadline says so: one
//!   `timeout` error and success 0 for that collector, never part of the devices with success 1;
//! - every error is counted in `hpcnode_collector_errors_total` and logged once per distinct cause.

use std::any::Any;
use std::collections::HashMap;
use std::convert::Infallible;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::collector::{CollectError, Erased, ErasedUnit, ErrorKind, Output, Started};
use crate::logging::{self, Level, OncePerCause};
use crate::metrics::{Desc, Samples, Value};
use crate::sync::lock;

const BUILD_INFO: Desc = Desc::gauge(
    "hpcnode_build_info",
    "A metric with a constant '1' value labeled by version and git revision of hpcnode_exporter.",
    None,
);
const COLLECTOR_SUCCESS: Desc = Desc::gauge(
    "hpcnode_scrape_collector_success",
    "Whether a collector finished within the scrape deadline (1) or failed, overran or is still stuck (0).",
    None,
);
const COLLECTOR_DURATION: Desc = Desc::gauge(
    "hpcnode_scrape_collector_duration",
    "How long a collector ran in this scrape; the deadline when it overran.",
    Some("seconds"),
);
const COLLECTOR_ERRORS: Desc = Desc::counter(
    "hpcnode_collector_errors",
    "Errors met by collectors since start, by kind (io, parse, not_regular_file, timeout, still_running, panic).",
    None,
);

const LOG_SUPPRESSED: Desc = Desc::counter(
    "hpcnode_log_messages_suppressed",
    "Collector errors counted but not logged since start, because their cause was logged recently.",
    None,
);
const LOG_DROPPED: Desc = Desc::counter(
    "hpcnode_log_messages_dropped",
    "Log lines dropped since start because stderr did not keep up.",
    None,
);

/// Every metric the framework itself emits (for the METRICS.md check).
pub const FRAMEWORK_METRICS: [Desc; 6] = [
    BUILD_INFO,
    COLLECTOR_SUCCESS,
    COLLECTOR_DURATION,
    COLLECTOR_ERRORS,
    LOG_SUPPRESSED,
    LOG_DROPPED,
];

/// Distinct causes remembered for log deduplication.
const MAX_LOGGED_CAUSES: usize = 4096;

/// Error counters and the once-per-cause log filter, shared by all scrapes.
struct ErrorLog {
    counts: HashMap<(&'static str, ErrorKind), AtomicU64>,
    /// By collector, kind and the error's key (a parse error's path and reason), not the cause
    /// text, which may quote content that changes every scrape.
    logged: OncePerCause<(&'static str, ErrorKind, String)>,
    suppressed: AtomicU64,
}

impl ErrorLog {
    fn new(collectors: &[&'static str]) -> Self {
        let counts = collectors
            .iter()
            .flat_map(|name| ErrorKind::ALL.map(|kind| ((*name, kind), AtomicU64::new(0))))
            .collect();
        ErrorLog {
            counts,
            logged: OncePerCause::new(MAX_LOGGED_CAUSES),
            suppressed: AtomicU64::new(0),
        }
    }

    fn record(&self, collector: &'static str, error: &CollectError) {
        if let Some(count) = self.counts.get(&(collector, error.kind)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if !self
            .logged
            .is_new((collector, error.kind, error.key().to_string()))
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut fields = vec![
            ("collector", collector),
            ("kind", error.kind.as_str()),
            ("err", error.cause.as_str()),
        ];
        fields.extend(error.context.iter().map(|(k, v)| (*k, v.as_str())));
        logging::log(
            Level::Warn,
            "collector error (logged once per cause)",
            &fields,
        );
    }

    fn export(&self, samples: &mut Samples) {
        let mut counts: Vec<_> = self.counts.iter().collect();
        counts.sort_by_key(|((collector, kind), _)| (*collector, kind.as_str()));
        for ((collector, kind), count) in counts {
            samples.push(
                &COLLECTOR_ERRORS,
                vec![
                    ("collector", (*collector).into()),
                    ("kind", kind.as_str().into()),
                ],
                Value::Int(count.load(Ordering::Relaxed)),
            );
        }
        let suppressed = self.suppressed.load(Ordering::Relaxed);
        samples.push(&LOG_SUPPRESSED, Vec::new(), Value::Int(suppressed));
        samples.push(
            &LOG_DROPPED,
            Vec::new(),
            Value::Int(logging::dropped_lines()),
        );
    }
}

struct Slot {
    name: &'static str,
    collector: Started,
    busy: Busy,
}

/// Units (and [`LISTING`]) whose read is in progress, with when it started; including reads
/// abandoned at a deadline.
type Busy = Arc<Mutex<HashMap<String, Instant>>>;

/// The busy-set key of a collector's unit listing (no unit name is empty).
const LISTING: &str = "";

/// How often a read waiting for a concurrent scrape's read of the same unit looks again.
const BUSY_POLL: Duration = Duration::from_millis(2);

/// Marks a unit busy for as long as it lives; released however the read ends (a panic included).
struct BusyGuard {
    busy: Busy,
    unit: String,
}

impl BusyGuard {
    /// Claims `unit` for a read. A read of it that started less than `hung_after` ago belongs
    /// to a concurrent scrape (two Prometheus servers): wait for it, until `deadline` at most.
    /// `None` when the unit stays busy: its read has outlived a scrape's deadline (hung), or
    /// this scrape's deadline came first.
    fn claim(
        busy: &Busy,
        unit: &str,
        hung_after: Duration,
        deadline: Instant,
    ) -> Option<BusyGuard> {
        loop {
            {
                let mut reading = lock(busy);
                match reading.get(unit) {
                    None => {
                        reading.insert(unit.to_string(), Instant::now());
                        return Some(BusyGuard {
                            busy: busy.clone(),
                            unit: unit.to_string(),
                        });
                    }
                    Some(started) if started.elapsed() >= hung_after => return None,
                    Some(_) => {}
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(BUSY_POLL);
        }
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        lock(&self.busy).remove(&self.unit);
    }
}

/// What one collector run has produced; the scrape takes it at the deadline.
#[derive(Default)]
struct RunState {
    /// Finished units' outputs by position in the listing, so output order is stable however
    /// the workers interleave.
    units: Vec<Option<Output>>,
    /// Units done, whichever way: read, panicked, or skipped as still busy.
    done: usize,
    /// Errors of the run itself (units skipped as still busy).
    errors: Vec<CollectError>,
    /// Whether the units were listed before the scrape took this state (a listing that ends
    /// after the deadline is this scrape's listing timeout, not its units').
    listed: bool,
    /// Why the run failed: the listing, a panic.
    failures: Vec<CollectError>,
    /// When each of its pieces (listing, units) that this scrape's workers are in began.
    reading: Vec<Instant>,
    /// How long this scrape's workers spent in its pieces, all together.
    spent: Duration,
}

/// How one collector's part of a scrape ended.
pub(crate) struct RunOutcome {
    output: Output,
    /// Why the run itself failed (the listing, a panic, the deadline); each is counted, and
    /// any makes the collector's success 0.
    failures: Vec<CollectError>,
    duration: Duration,
}

/// Runs the enabled collectors for each scrape.
pub struct Scraper {
    slots: Vec<Slot>,
    deadline: Duration,
    errors: ErrorLog,
    revision: &'static str,
    workers: usize,
    /// How long a worker may be in one piece before it counts as stuck and is replaced.
    stalled_after: Duration,
}

impl Scraper {
    /// The started collectors, by name, in the order their output appears; at most `workers`
    /// threads read them at once while none is stuck.
    pub fn new(
        collectors: Vec<(&'static str, Started)>,
        deadline: Duration,
        workers: usize,
    ) -> Self {
        let names: Vec<_> = collectors.iter().map(|(name, _)| *name).collect();
        Scraper {
            slots: collectors
                .into_iter()
                .map(|(name, collector)| Slot {
                    name,
                    collector,
                    busy: Arc::default(),
                })
                .collect(),
            deadline,
            errors: ErrorLog::new(&names),
            revision: env!("HPCNODE_REVISION"),
            workers: workers.max(1),
            stalled_after: deadline / STALL_LOOKS_PER_DEADLINE,
        }
    }

    pub fn collector_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.slots.iter().map(|slot| slot.name)
    }

    /// Stops every collector (SIGTERM): what their start acquired is released.
    pub fn stop(&self) {
        for slot in &self.slots {
            slot.collector.0.stop();
        }
    }

    /// One scrape: every collector's samples plus the framework's own metrics.
    pub async fn scrape(&self) -> Samples {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.deadline;
        let runs: Vec<_> = self
            .slots
            .iter()
            .map(|slot| {
                let run = Run::new(
                    &slot.collector,
                    &slot.busy,
                    self.deadline,
                    deadline.into_std(),
                );
                Arc::new(run) as Arc<dyn Work>
            })
            .collect();
        let crew = Arc::new(Crew {
            runs: runs.clone(),
            started,
            deadline: deadline.into_std(),
            stalled_after: self.stalled_after,
            workers: self.workers,
            active: AtomicUsize::new(0),
            turn: AtomicUsize::new(0),
            pool: tokio::runtime::Handle::current(),
        });
        let overran = crew.work(deadline).await;

        let mut samples = Samples::default();
        samples.push(
            &BUILD_INFO,
            vec![
                ("version", env!("CARGO_PKG_VERSION").into()),
                ("revision", self.revision.into()),
            ],
            Value::Int(1),
        );
        for (slot, run) in self.slots.iter().zip(runs) {
            let outcome = run.outcome(overran);
            for error in outcome.output.errors.iter().chain(&outcome.failures) {
                self.errors.record(slot.name, error);
            }
            samples.append(outcome.output.samples);
            let success = outcome.failures.is_empty()
                && outcome
                    .output
                    .errors
                    .iter()
                    .all(|e| e.kind != ErrorKind::StillRunning);
            let label = vec![("collector", slot.name.into())];
            samples.push(
                &COLLECTOR_SUCCESS,
                label.clone(),
                Value::Int(u64::from(success)),
            );
            samples.push(
                &COLLECTOR_DURATION,
                label,
                Value::Float(outcome.duration.as_secs_f64()),
            );
        }
        self.errors.export(&mut samples);
        samples
    }
}

/// How often a scrape looks whether its workers are stuck, in parts of the deadline: a worker
/// in one piece (a listing, a unit) for longer than a tenth of the deadline is stuck (hung, or
/// as good as: ten such reads end the scrape), and at each look the scrape starts workers in
/// place of the stuck ones, while work is left. A scrape that ends sooner wakes for none.
const STALL_LOOKS_PER_DEADLINE: u32 = 10;

/// Workers stuck in one collector's pieces after which the others leave it to them: a hung
/// read hides only itself (a second worker reads the collector's other units), and a collector
/// whose every read hangs (a wedged driver) holds two threads, not every worker of the scrape.
const STUCK_PER_COLLECTOR: usize = 2;

/// One collector's part of a scrape, as the crew works on it.
pub(crate) trait Work: Send + Sync {
    /// Takes and does this run's listing: how many units it listed (0 when it failed), or
    /// `None` when another worker has taken it.
    fn list(&self) -> Option<usize>;
    /// Takes and reads (or skips as still running) this run's next unit; `false` when none is
    /// left to take.
    fn read_next(&self) -> bool;
    /// Whether a listing or a unit is left for a worker to take now.
    fn untaken(&self) -> bool;
    /// How many of this scrape's workers have been in one of its pieces for `after` or longer.
    fn stuck(&self, after: Duration) -> usize;
    /// What the run has produced, taken at the scrape's end: a run left unfinished fails as
    /// one timeout.
    fn outcome(&self, overran: bool) -> RunOutcome;
}

/// The workers of one scrape, on the blocking pool. Each takes the collectors' listings first,
/// in collector order, then their units, from a collector that turns with every unit (so one
/// collector with many slow units delays the others, never starves them), until none is left
/// or the deadline. The scrape starts one per collector up to `workers`, and a listing of
/// several units calls more, up to `workers`. The async thread wakes once, when the last
/// worker ends (or at the deadline), not once per collector: each wake is a context switch on
/// a node that runs a job.
struct Crew {
    runs: Vec<Arc<dyn Work>>,
    started: Instant,
    deadline: Instant,
    /// A worker in one piece this long is stuck.
    stalled_after: Duration,
    workers: usize,
    /// Workers still taking work, a stuck one included.
    active: AtomicUsize,
    /// The collector the next unit is looked for from.
    turn: AtomicUsize,
    pool: tokio::runtime::Handle,
}

/// Held by every worker; the scrape's wait ends when the last one is dropped, however its
/// worker ends (or when the pool drops a worker it never ran).
type Ticket = Arc<tokio::sync::oneshot::Sender<Infallible>>;

impl Crew {
    /// Runs the crew until every worker has ended or the deadline; whether the deadline came
    /// first (workers that stopped at it included).
    async fn work(self: &Arc<Self>, deadline: tokio::time::Instant) -> bool {
        let (ticket, mut all_ended) = tokio::sync::oneshot::channel();
        let ticket: Ticket = Arc::new(ticket);
        for _ in 0..self.workers.min(self.runs.len()) {
            self.active.fetch_add(1, Ordering::SeqCst);
            self.spawn(ticket.clone());
        }
        // Only the workers keep the wait open; the scrape keeps a way to send more.
        let more = Arc::downgrade(&ticket);
        drop(ticket);
        loop {
            let look = (tokio::time::Instant::now() + self.stalled_after).min(deadline);
            if tokio::time::timeout_at(look, &mut all_ended).await.is_ok() {
                return Instant::now() >= self.deadline;
            }
            if tokio::time::Instant::now() >= deadline {
                return true;
            }
            let stuck: usize = (self.runs.iter())
                .map(|run| run.stuck(self.stalled_after))
                .sum();
            let free = self.active.load(Ordering::SeqCst).saturating_sub(stuck);
            let open = |run: &Arc<dyn Work>| self.open(&**run) && run.untaken();
            if free < self.workers && self.runs.iter().any(open) {
                for _ in free..self.workers {
                    let Some(ticket) = more.upgrade() else { break };
                    self.active.fetch_add(1, Ordering::SeqCst);
                    self.spawn(ticket);
                }
            }
        }
    }

    /// Whether workers may take `run`'s pieces: not while [`STUCK_PER_COLLECTOR`] are stuck
    /// in it (looked at only once a piece can have been in progress that long).
    fn open(&self, run: &dyn Work) -> bool {
        self.started.elapsed() < self.stalled_after
            || run.stuck(self.stalled_after) < STUCK_PER_COLLECTOR
    }

    /// Starts a worker already counted in `active`.
    fn spawn(self: &Arc<Self>, ticket: Ticket) {
        let crew = self.clone();
        self.pool.spawn_blocking(move || {
            crew.take_work(&ticket);
            crew.active.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// One worker: listings, then units, until none is left or the deadline. A worker freed
    /// from a hung read after the deadline stops too: its scrape has answered, and reading on
    /// would only hold units that a later scrape then reports as still running.
    fn take_work(self: &Arc<Self>, ticket: &Ticket) {
        while Instant::now() < self.deadline {
            if let Some(units) = self.runs.iter().find_map(|run| run.list()) {
                self.call(units.saturating_sub(1), ticket);
                continue;
            }
            let first = self.turn.fetch_add(1, Ordering::Relaxed);
            let runs = self.runs.len();
            let mut turns = (first..first + runs).map(|turn| &self.runs[turn % runs]);
            if !turns.any(|run| self.open(&**run) && run.read_next()) {
                return;
            }
        }
    }

    /// Up to `helpers` more workers, as long as fewer than `workers` are active.
    fn call(self: &Arc<Self>, helpers: usize, ticket: &Ticket) {
        for _ in 0..helpers {
            if Instant::now() >= self.deadline {
                return;
            }
            let active = self
                .active
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |active| {
                    (active < self.workers).then_some(active + 1)
                });
            if active.is_err() {
                return;
            }
            self.spawn(ticket.clone());
        }
    }
}

/// What the crew's workers share of one collector's run.
struct Run {
    collector: Arc<dyn Erased>,
    busy: Busy,
    /// A read older than this is hung; also the scrape's deadline, from its start.
    timeout: Duration,
    deadline: Instant,
    listing_taken: AtomicBool,
    /// The units, once listed.
    units: OnceLock<Vec<Box<dyn ErasedUnit>>>,
    /// The next unit to read, by position in the listing.
    next: AtomicUsize,
    state: Mutex<RunState>,
}

impl Work for Run {
    fn list(&self) -> Option<usize> {
        if self.listing_taken.swap(true, Ordering::SeqCst) {
            return None;
        }
        let listed = self.piece(|| self.guarded(|| self.list_units()));
        Some(listed.unwrap_or(0))
    }

    fn read_next(&self) -> bool {
        let Some(units) = self.units.get() else {
            return false;
        };
        if self.next.load(Ordering::SeqCst) >= units.len() {
            return false;
        }
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        let Some(unit) = units.get(index) else {
            return false;
        };
        self.piece(|| self.guarded(|| self.read(index, &**unit)));
        // Counted however the read ended, a panic outside its own catch included.
        lock(&self.state).done += 1;
        true
    }

    fn untaken(&self) -> bool {
        !self.listing_taken.load(Ordering::SeqCst)
            || (self.units.get())
                .is_some_and(|units| self.next.load(Ordering::SeqCst) < units.len())
    }

    fn stuck(&self, after: Duration) -> usize {
        let state = lock(&self.state);
        state
            .reading
            .iter()
            .filter(|began| began.elapsed() >= after)
            .count()
    }

    fn outcome(&self, overran: bool) -> RunOutcome {
        let RunState {
            units: read,
            done,
            errors,
            listed,
            mut failures,
            spent,
            ..
        } = std::mem::take(&mut *lock(&self.state));
        let Some(units) = self.units.get().filter(|_| listed) else {
            // Without a failure of its own, the listing did not end in time, or every worker
            // ended without taking it (the pool dropped them unrun).
            let duration = if failures.is_empty() {
                self.timeout
            } else {
                spent
            };
            if failures.is_empty() && overran {
                let error = timed_out(&self.busy, "did not finish listing its units in time");
                failures.push(error);
            } else if failures.is_empty() {
                let error = "did not list its units: the blocking pool did not run its worker";
                failures.push(CollectError::new(ErrorKind::Timeout, error));
            }
            return RunOutcome {
                output: Output::default(),
                failures,
                duration,
            };
        };
        // One timeout per scrape, whether units were still being read at the deadline or
        // never taken: what is missing is this scrape's, however many units.
        let mut duration = spent;
        if done < units.len() {
            let finished = read.iter().flatten().count();
            failures.push(
                timed_out(&self.busy, "did not read every unit in time")
                    .with("units_read", format!("{finished} of {}", units.len())),
            );
            duration = self.timeout;
        }
        let mut output = Output::default();
        for unit in read.into_iter().flatten() {
            output.samples.append(unit.samples);
            output.errors.extend(unit.errors);
        }
        output.errors.extend(errors);
        RunOutcome {
            output,
            failures,
            duration,
        }
    }
}

impl Run {
    fn new(collector: &Started, busy: &Busy, timeout: Duration, deadline: Instant) -> Self {
        Run {
            collector: collector.0.clone(),
            busy: busy.clone(),
            timeout,
            deadline,
            listing_taken: AtomicBool::new(false),
            units: OnceLock::new(),
            next: AtomicUsize::new(0),
            state: Mutex::default(),
        }
    }

    /// Does one piece of the run's work, known meanwhile as in progress (for the crew's looks)
    /// and its time added to the run's.
    fn piece<T>(&self, work: impl FnOnce() -> T) -> T {
        let began = Instant::now();
        lock(&self.state).reading.push(began);
        let done = work();
        let mut state = lock(&self.state);
        if let Some(at) = state.reading.iter().position(|&other| other == began) {
            state.reading.swap_remove(at);
        }
        state.spent += began.elapsed();
        done
    }

    /// Runs a piece of work; a panic in it (outside a unit's read and the listing, which catch
    /// their own) is a failure of the run, not a worker gone without a word.
    fn guarded<T>(&self, work: impl FnOnce() -> Option<T>) -> Option<T> {
        catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|payload| {
            lock(&self.state).failures.push(panicked(payload));
            None
        })
    }

    /// Lists the units (skipped while an earlier listing is hung); how many there are, or
    /// `None` when the listing failed (then in the state's failures).
    fn list_units(&self) -> Option<usize> {
        let listed = match BusyGuard::claim(&self.busy, LISTING, self.timeout, self.deadline) {
            None => Err(still_running("listing")),
            Some(_guard) => {
                let units = catch_unwind(AssertUnwindSafe(|| self.collector.clone().list()));
                units.unwrap_or_else(|payload| Err(panicked(payload)))
            }
        };
        let mut state = lock(&self.state);
        match listed {
            Ok(units) => {
                let count = units.len();
                let _ = self.units.set(units);
                state.units = (0..count).map(|_| None).collect();
                state.listed = true;
                Some(count)
            }
            Err(error) => {
                state.failures.push(error);
                None
            }
        }
    }

    /// Reads unit `index`, unless an earlier read of it is still running.
    fn read(&self, index: usize, unit: &dyn ErasedUnit) -> Option<()> {
        let name = unit.to_string();
        let claimed = BusyGuard::claim(&self.busy, &name, self.timeout, self.deadline);
        let read = claimed.map(|_guard| {
            let mut output = Output::default();
            let read = catch_unwind(AssertUnwindSafe(|| unit.collect(&mut output)));
            output.samples.shrink_to_fit();
            read.map(|()| output)
        });
        let mut state = lock(&self.state);
        match read {
            None => state.errors.push(still_running(&name)),
            // After the deadline the scrape has taken the state: a late result is dropped.
            Some(Ok(output)) => {
                if let Some(slot) = state.units.get_mut(index) {
                    *slot = Some(output);
                }
            }
            Some(Err(payload)) => state.failures.push(panicked(payload)),
        }
        Some(())
    }
}

fn still_running(what: &str) -> CollectError {
    CollectError::new(
        ErrorKind::StillRunning,
        format!("{what}: an earlier read has not returned (hung); not read again until it does"),
    )
}

/// A run's timeout. The cause is the same from scrape to scrape, so it is logged once; what
/// was still being read (which changes) goes in the log line's fields.
fn timed_out(busy: &Mutex<HashMap<String, Instant>>, cause: &str) -> CollectError {
    let mut reading: Vec<_> = lock(busy)
        .keys()
        .map(|unit| {
            if unit == LISTING {
                "(listing)".to_string()
            } else {
                unit.clone()
            }
        })
        .collect();
    reading.sort();
    CollectError::new(ErrorKind::Timeout, cause).with("reading", reading.join(", "))
}

/// A panic's message, so one bug is logged once.
fn panicked(payload: Box<dyn Any + Send>) -> CollectError {
    let message = (payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string());
    CollectError::new(ErrorKind::Panic, format!("collector panicked: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::Collector;
    use crate::metrics::{encode, Format};
    use crate::sysfs::SysfsError;
    use std::path::Path;
    use std::sync::mpsc;

    const UP: Desc = Desc::gauge("hpcnode_test_up", "Test.", None);

    /// Units `good` and `hung`; reading `hung` blocks until the test releases it, like a
    /// wedged driver.
    struct OneHungDevice {
        release: Mutex<mpsc::Receiver<()>>,
        hung_reads: AtomicU64,
    }

    impl Collector for OneHungDevice {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok(vec!["good".into(), "hung".into()])
        }

        fn collect_unit(&self, unit: &String, out: &mut Output) {
            if unit == "hung" {
                self.hung_reads.fetch_add(1, Ordering::SeqCst);
                let _ = lock(&self.release).recv();
            }
            out.samples.push(
                &UP,
                vec![("device", unit.to_string().into())],
                Value::Int(1),
            );
        }
    }

    struct Broken;

    impl Collector for Broken {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Err(CollectError::new(ErrorKind::Io, "root unreadable"))
        }

        fn collect_unit(&self, _unit: &String, _out: &mut Output) {}
    }

    /// A listing that panics, or (`hang`) waits until the test releases it.
    struct ListingFails {
        hang: Option<Mutex<mpsc::Receiver<()>>>,
    }

    impl Collector for ListingFails {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            match &self.hang {
                Some(release) => {
                    let _ = lock(release).recv();
                    Ok(vec!["a".into()])
                }
                None => panic!("listing bug"),
            }
        }

        fn collect_unit(&self, unit: &String, out: &mut Output) {
            out.samples
                .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
        }
    }

    /// A listing that hangs past the deadline is this scrape's timeout, and one that panics is a
    /// panic: either way the collector fails and nothing of it is exported.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_or_panicking_listing_fails_the_collector() {
        let (release, wait) = mpsc::channel();
        let hangs = ListingFails {
            hang: Some(Mutex::new(wait)),
        };
        let hangs = Scraper::new(
            vec![("hangs", Started::new(hangs))],
            Duration::from_millis(200),
            2,
        );
        // A panic's hook may print a backtrace first: a deadline it cannot reach.
        let panics = ListingFails { hang: None };
        let panics = Scraper::new(
            vec![("panics", Started::new(panics))],
            Duration::from_secs(5),
            2,
        );
        for (scraper, collector, kind) in
            [(&hangs, "hangs", "timeout"), (&panics, "panics", "panic")]
        {
            let out = text(scraper.scrape().await);
            assert!(!out.contains("hpcnode_test_up"), "{out}");
            let success =
                format!("hpcnode_scrape_collector_success{{collector=\"{collector}\"}} 0");
            assert!(out.contains(&success), "{out}");
            let error = format!(
                "hpcnode_collector_errors_total{{collector=\"{collector}\",kind=\"{kind}\"}} 1"
            );
            assert!(out.contains(&error), "{out}");
        }
        // Released (the hung listing, then the next one), the next scrape lists and reads.
        release.send(()).unwrap();
        release.send(()).unwrap();
        // Until the released listing has left: still there, it is a read still running.
        let busy = hangs.slots[0].busy.clone();
        for _ in 0..500 {
            if lock(&busy).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            lock(&busy).is_empty(),
            "the released listing still runs after 5 s"
        );
        let again = text(hangs.scrape().await);
        assert!(again.contains("hpcnode_test_up{device=\"a\"} 1"), "{again}");
        assert!(again.contains("hpcnode_scrape_collector_success{collector=\"hangs\"} 1"));
    }

    /// Unit `a`'s read panics; `b`'s does not.
    struct Panics;

    impl Collector for Panics {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok(vec!["a".into(), "b".into()])
        }

        fn collect_unit(&self, unit: &String, out: &mut Output) {
            if unit == "a" {
                panic!("bug")
            }
            out.samples
                .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
        }
    }

    fn text(samples: Samples) -> String {
        encode(samples, Format::PrometheusText).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hung_unit_hides_only_itself_and_is_not_read_again() {
        let (release, wait) = mpsc::channel();
        let collector = Arc::new(OneHungDevice {
            release: Mutex::new(wait),
            hung_reads: AtomicU64::new(0),
        });
        struct Shared(Arc<OneHungDevice>);
        impl Collector for Shared {
            type Unit = String;

            fn units(&self) -> Result<Vec<String>, CollectError> {
                self.0.units()
            }
            fn collect_unit(&self, unit: &String, out: &mut Output) {
                self.0.collect_unit(unit, out)
            }
        }
        let scraper = Scraper::new(
            vec![("test", Started::new(Shared(collector.clone())))],
            Duration::from_millis(200),
            2,
        );

        let first = text(scraper.scrape().await);
        assert!(
            first.contains("hpcnode_test_up{device=\"good\"} 1"),
            "{first}"
        );
        assert!(first.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));
        assert!(
            first.contains("hpcnode_collector_errors_total{collector=\"test\",kind=\"timeout\"} 1")
        );

        for _ in 0..5 {
            let again = text(scraper.scrape().await);
            assert!(
                again.contains("hpcnode_test_up{device=\"good\"} 1"),
                "{again}"
            );
            assert!(!again.contains("device=\"hung\""));
            assert!(again.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));
        }
        assert_eq!(
            collector.hung_reads.load(Ordering::SeqCst),
            1,
            "a hung unit was read again"
        );
        let counted = text(scraper.scrape().await);
        assert!(counted.contains(
            "hpcnode_collector_errors_total{collector=\"test\",kind=\"still_running\"} 6"
        ));

        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&scraper.slots[0].busy).contains_key("hung") {
            assert!(Instant::now() < deadline, "released read never finished");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        release.send(()).unwrap();
        let recovered = text(scraper.scrape().await);
        assert!(recovered.contains("hpcnode_test_up{device=\"hung\"} 1"));
        assert!(recovered.contains("hpcnode_scrape_collector_success{collector=\"test\"} 1"));
        assert_eq!(collector.hung_reads.load(Ordering::SeqCst), 2);
    }

    /// Units `hung` then `after`; counts the reads of `after`.
    struct HungThenAfter {
        release: Mutex<mpsc::Receiver<()>>,
        after_reads: AtomicU64,
    }

    impl Collector for Arc<HungThenAfter> {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok(vec!["hung".into(), "after".into()])
        }

        fn collect_unit(&self, unit: &String, _out: &mut Output) {
            if unit == "hung" {
                let _ = lock(&self.release).recv();
            } else {
                self.after_reads.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// A scraper of one worker over [`HungThenAfter`], whose worker stuck for `stalled_after`
    /// is replaced; and what releases the hung read.
    fn hung_then_after(
        deadline: Duration,
        stalled_after: Duration,
    ) -> (mpsc::Sender<()>, Arc<HungThenAfter>, Scraper) {
        let (release, wait) = mpsc::channel();
        let collector = Arc::new(HungThenAfter {
            release: Mutex::new(wait),
            after_reads: AtomicU64::new(0),
        });
        let mut scraper =
            Scraper::new(vec![("test", Started::new(collector.clone()))], deadline, 1);
        scraper.stalled_after = stalled_after;
        (release, collector, scraper)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn worker_freed_after_the_deadline_reads_no_further_unit() {
        // No helper: `after` is left for the worker stuck on `hung`.
        let (release, collector, scraper) =
            hung_then_after(Duration::from_millis(100), Duration::from_secs(3600));
        let first = text(scraper.scrape().await);
        assert!(first.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));

        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&scraper.slots[0].busy).contains_key("hung") {
            assert!(Instant::now() < deadline, "released read never finished");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            collector.after_reads.load(Ordering::SeqCst),
            0,
            "a worker of a finished scrape read on"
        );
    }

    /// With its one worker stuck on a hung unit, the crew is sent another, which reads the
    /// unit after it within the scrape.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crew_with_every_worker_stuck_is_sent_another() {
        let (release, collector, scraper) =
            hung_then_after(Duration::from_millis(500), Duration::from_millis(20));
        let first = text(scraper.scrape().await);
        assert_eq!(collector.after_reads.load(Ordering::SeqCst), 1, "{first}");
        assert!(first.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));
        let timeout = "hpcnode_collector_errors_total{collector=\"test\",kind=\"timeout\"} 1";
        assert!(first.contains(timeout), "{first}");
        release.send(()).unwrap();
    }

    /// Twenty units whose every read hangs until the test releases them all (a wedged driver).
    #[derive(Default)]
    struct Wedged {
        released: Mutex<bool>,
        release: std::sync::Condvar,
        reads: AtomicU64,
    }

    impl Collector for Arc<Wedged> {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok((0..20).map(|unit| format!("w{unit}")).collect())
        }

        fn collect_unit(&self, _unit: &String, _out: &mut Output) {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let released = lock(&self.released);
            let _released = self.release.wait_while(released, |released| !*released);
        }
    }

    /// Fifty units, read at once.
    struct Healthy;

    impl Collector for Healthy {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok((0..50).map(|unit| format!("h{unit}")).collect())
        }

        fn collect_unit(&self, unit: &String, out: &mut Output) {
            out.samples
                .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
        }
    }

    /// A collector whose every read hangs holds two threads, and the scrape's one worker is
    /// replaced: the other collector is read whole, with success 1.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_collector_whose_every_read_hangs_holds_two_threads_not_the_scrape() {
        let wedged = Arc::new(Wedged::default());
        let scraper = Scraper::new(
            vec![
                ("wedged", Started::new(wedged.clone())),
                ("healthy", Started::new(Healthy)),
            ],
            Duration::from_secs(1),
            1,
        );
        let out = text(scraper.scrape().await);
        *lock(&wedged.released) = true;
        wedged.release.notify_all();
        let healthy = out
            .lines()
            .filter(|l| l.starts_with("hpcnode_test_up{"))
            .count();
        assert_eq!(healthy, 50, "{out}");
        assert!(out.contains("hpcnode_scrape_collector_success{collector=\"healthy\"} 1"));
        assert!(out.contains("hpcnode_scrape_collector_success{collector=\"wedged\"} 0"));
        let reads = wedged.reads.load(Ordering::SeqCst);
        assert_eq!(
            reads, STUCK_PER_COLLECTOR as u64,
            "threads stuck in the wedged collector"
        );
    }

    /// One unit whose read takes a while (slow, not hung).
    struct Slow;

    impl Collector for Slow {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok(vec!["slow".into()])
        }

        fn collect_unit(&self, unit: &String, out: &mut Output) {
            std::thread::sleep(Duration::from_millis(150));
            out.samples.push(
                &UP,
                vec![("device", unit.to_string().into())],
                Value::Int(1),
            );
        }
    }

    /// Two Prometheus servers scraping at once: a unit that one scrape is reading within its
    /// deadline is not hung, so the other waits for it and reads it too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_scrapes_both_read_a_slow_unit() {
        let scraper = Scraper::new(
            vec![("test", Started::new(Slow))],
            Duration::from_secs(2),
            2,
        );
        let (first, second) = tokio::join!(scraper.scrape(), scraper.scrape());
        for out in [text(first), text(second)] {
            assert!(out.contains("hpcnode_test_up{device=\"slow\"} 1"), "{out}");
            assert!(
                out.contains("hpcnode_scrape_collector_success{collector=\"test\"} 1"),
                "{out}"
            );
        }
    }

    /// The exported `hpcnode_log_messages_suppressed_total`.
    fn suppressed(errors: &ErrorLog) -> usize {
        let mut samples = Samples::default();
        errors.export(&mut samples);
        let text = text(samples);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("hpcnode_log_messages_suppressed_total "));
        line.unwrap().parse().unwrap()
    }

    #[test]
    fn a_file_whose_content_changes_every_scrape_does_not_silence_later_faults() {
        let errors = ErrorLog::new(&["test"]);
        let counter = Path::new("/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error");
        let scrapes = 2 * MAX_LOGGED_CAUSES;
        for scrape in 0..scrapes {
            let garbage = format!("garbage {scrape}");
            let error = SysfsError::parse(counter, "not an unsigned integer", &garbage);
            errors.record("test", &error.into());
        }
        let before = suppressed(&errors);
        errors.record(
            "test",
            &CollectError::new(ErrorKind::Io, "read /sys/class/x: Input/output error"),
        );
        assert_eq!(suppressed(&errors), before, "a new fault was not logged");
        // The changing file is one cause: logged once, then suppressed.
        assert_eq!(before, scrapes - 1);
    }

    /// Far more quick units than one scrape's deadline allows.
    struct ManyUnits;

    const MANY_UNITS: usize = 20_000;

    impl Collector for ManyUnits {
        type Unit = usize;

        fn units(&self) -> Result<Vec<usize>, CollectError> {
            Ok((0..MANY_UNITS).collect())
        }

        fn collect_unit(&self, unit: &usize, out: &mut Output) {
            std::thread::sleep(Duration::from_micros(100));
            out.samples.push(
                &UP,
                vec![("device", unit.to_string().into())],
                Value::Int(1),
            );
        }
    }

    fn value_of(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
            .parse()
            .unwrap()
    }

    /// Workers stop at the deadline between two units as well as in the middle of one: either
    /// way the units left make the scrape one timeout with success 0. Whatever the machine's
    /// speed, a scrape is complete with success 1, or flagged; never partial with success 1.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn units_left_at_the_deadline_are_one_timeout_and_success_0() {
        let scraper = Scraper::new(
            vec![("test", Started::new(ManyUnits))],
            Duration::from_millis(20),
            2,
        );
        let mut counted = 0;
        for _ in 0..10 {
            let text = text(scraper.scrape().await);
            let read = text
                .lines()
                .filter(|l| l.starts_with("hpcnode_test_up{"))
                .count();
            let success = value_of(
                &text,
                "hpcnode_scrape_collector_success{collector=\"test\"}",
            );
            let now = value_of(
                &text,
                "hpcnode_collector_errors_total{collector=\"test\",kind=\"timeout\"}",
            );
            if read < MANY_UNITS {
                assert_eq!(success, 0, "{read} of {MANY_UNITS} units with success 1");
                assert_eq!(now, counted + 1, "one timeout per cut-short scrape");
            } else {
                // All read: success 1, or 0 with a timeout when a worker was still returning
                // from its last unit at the deadline.
                assert_eq!(now, counted + 1 - success);
            }
            counted = now;
        }
    }

    /// One unit, read at once.
    struct Quick;

    impl Collector for Quick {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            Ok(vec!["quick".into()])
        }

        fn collect_unit(&self, unit: &String, out: &mut Output) {
            out.samples
                .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
        }
    }

    /// A collector with more slow units than the deadline allows delays the collector after
    /// it, which the crew's worker reaches in turn: it finishes, with success 1.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_collector_of_many_units_does_not_starve_the_next() {
        let scraper = Scraper::new(
            vec![
                ("many", Started::new(ManyUnits)),
                ("quick", Started::new(Quick)),
            ],
            Duration::from_secs(1),
            // One worker, which lists both before it reads either.
            1,
        );
        let out = text(scraper.scrape().await);
        assert!(out.contains("hpcnode_test_up{device=\"quick\"} 1"), "{out}");
        assert!(out.contains("hpcnode_scrape_collector_success{collector=\"quick\"} 1"));
        assert!(out.contains("hpcnode_scrape_collector_success{collector=\"many\"} 0"));
    }

    #[tokio::test]
    async fn failure_and_panic_are_reported_not_propagated() {
        let scraper = Scraper::new(
            vec![
                ("broken", Started::new(Broken)),
                ("panics", Started::new(Panics)),
            ],
            Duration::from_secs(5),
            // One worker: the unit after the one that panicked is read by the same worker.
            1,
        );
        let out = text(scraper.scrape().await);
        assert!(out.contains("hpcnode_test_up{device=\"b\"} 1"), "{out}");
        assert!(out.contains("hpcnode_scrape_collector_success{collector=\"broken\"} 0"));
        assert!(out.contains("hpcnode_collector_errors_total{collector=\"broken\",kind=\"io\"} 1"));
        assert!(out.contains("hpcnode_scrape_collector_success{collector=\"panics\"} 0"));
        assert!(
            out.contains("hpcnode_collector_errors_total{collector=\"panics\",kind=\"panic\"} 1")
        );
        // The panicking read released its unit: the next scrape reads it (and panics) again.
        let again = text(scraper.scrape().await);
        assert!(
            again.contains("hpcnode_collector_errors_total{collector=\"panics\",kind=\"panic\"} 2")
        );
    }
}

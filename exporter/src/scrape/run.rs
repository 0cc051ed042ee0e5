//! One collector's run in a scrape, and the [`Work`] the crew asks of it (here, so the crew
//! only looks down at runs): its listing and units taken by the crew's workers, each read
//! claimed in the busy set and guarded against panics, and what it produced by the deadline
//! (a run left unfinished is one timeout).

use std::any::Any;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::busy::{Busy, BusyGuard, LISTING};
use crate::collector::{CollectError, Erased, ErasedUnit, ErrorKind, Output, Started};
use crate::sync::lock;

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
pub(super) struct RunOutcome {
    pub(super) output: Output,
    /// Why the run itself failed (the listing, a panic, the deadline); each is counted, and
    /// any makes the collector's success 0.
    pub(super) failures: Vec<CollectError>,
    pub(super) duration: Duration,
}

/// One collector's part of a scrape, as the crew works on it.
pub(super) trait Work: Send + Sync {
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

/// What the crew's workers share of one collector's run.
pub(super) struct Run {
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
    pub(super) fn new(
        collector: &Started,
        busy: &Busy,
        timeout: Duration,
        deadline: Instant,
    ) -> Self {
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

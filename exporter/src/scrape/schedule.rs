//! The schedule of a scrape's work: a crew of workers on the blocking pool takes the runs'
//! listings, then their units in turn, and is sent more workers in place of stuck ones.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::run::Work;

/// How often a scrape looks whether its workers are stuck, in parts of the deadline: a worker
/// in one piece (a listing, a unit) for longer than a tenth of the deadline is stuck (hung, or
/// as good as: ten such reads end the scrape), and at each look the scrape starts workers in
/// place of the stuck ones, while work is left. A scrape that ends sooner wakes for none.
pub(super) const STALL_LOOKS_PER_DEADLINE: u32 = 10;

/// Workers stuck in one collector's pieces after which the others leave it to them: a hung
/// read hides only itself (a second worker reads the collector's other units), and a collector
/// whose every read hangs (a wedged driver) holds two threads, not every worker of the scrape.
pub(super) const STUCK_PER_COLLECTOR: usize = 2;

/// The workers of one scrape, on the blocking pool. Each takes the collectors' listings first,
/// in collector order, then their units, from a collector that turns with every unit (so one
/// collector with many slow units delays the others, never starves them), until none is left
/// or the deadline. The scrape starts one per collector up to `workers`, and a listing of
/// several units calls more, up to `workers`. The async thread wakes once, when the last
/// worker ends (or at the deadline), not once per collector: each wake is a context switch on
/// a node that runs a job.
pub(super) struct Crew {
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
    /// A crew for `runs`, none of its workers started yet.
    pub(super) fn new(
        runs: Vec<Arc<dyn Work>>,
        started: Instant,
        deadline: Instant,
        stalled_after: Duration,
        workers: usize,
    ) -> Self {
        Crew {
            runs,
            started,
            deadline,
            stalled_after,
            workers,
            active: AtomicUsize::new(0),
            turn: AtomicUsize::new(0),
            pool: tokio::runtime::Handle::current(),
        }
    }

    /// Runs the crew until every worker has ended or the deadline; whether the deadline came
    /// first (workers that stopped at it included).
    pub(super) async fn work(self: &Arc<Self>, deadline: tokio::time::Instant) -> bool {
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

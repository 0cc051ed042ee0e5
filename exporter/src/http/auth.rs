//! Basic auth that wrong passwords cannot starve.
//!
//! A bcrypt check costs tens of milliseconds of CPU, so a client trying passwords could keep
//! the one core they run on busy and make a client with the right ones wait behind it. Bounds:
//! - verdicts are cached by a digest of user, hash and password, least recently used first out,
//!   right ones apart from wrong ones: wrong passwords can never evict Prometheus' verdict, and
//!   a scrape with a cached verdict costs no bcrypt at all;
//! - one bcrypt check runs at a time (one core at most), and those waiting are served by lane:
//!   sources that have authenticated before, then sources with no recent failure, then the
//!   others, so a client that authenticated before waits for at most the check running;
//! - a source (an IPv4 address, or an IPv6 /64) has at most one check pending, and after
//!   [`FREE_FAILURES`] wrong passwords in a row none for a backoff that doubles from
//!   [`FIRST_BACKOFF`] to [`MAX_BACKOFF`]; requests beyond that are refused at once, without
//!   bcrypt (`throttled`).
//!
//! A client that shares its address with an attacker shares its backoff too: only its cached
//! verdict keeps it in.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use indexmap::IndexMap;
use tokio::sync::oneshot;

use crate::sync::lock;
use crate::web_config::UNKNOWN_USER_HASH;

/// Right verdicts remembered: one per user and password in use, a handful on a real site.
const MAX_RIGHT_VERDICTS: usize = 64;
/// Wrong verdicts remembered, so that a client retrying one wrong password costs nothing.
const MAX_WRONG_VERDICTS: usize = 1024;
/// Sources remembered for their lane and backoff.
const MAX_SOURCES: usize = 4096;
/// Wrong passwords in a row a source may send before it backs off: a person mistyping one.
const FREE_FAILURES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What a request's credentials got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// No or malformed basic-auth credentials.
    Missing,
    /// A wrong user or password.
    Wrong,
    /// Not checked: its source has a check pending or is in its backoff.
    Throttled,
}

pub struct Authenticator {
    verdicts: Mutex<Verdicts>,
    sources: Mutex<IndexMap<Source, SourceState>>,
    gate: Gate,
}

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator {
            verdicts: Mutex::new(Verdicts {
                right: Lru::new(MAX_RIGHT_VERDICTS),
                wrong: Lru::new(MAX_WRONG_VERDICTS),
            }),
            sources: Mutex::default(),
            gate: Gate::default(),
        }
    }
}

impl Authenticator {
    /// Checks an `Authorization` header from `address` against `users` (user name to bcrypt
    /// hash). An unknown user costs the same bcrypt work as a known one.
    pub async fn check(
        self: &Arc<Self>,
        users: &BTreeMap<String, String>,
        address: IpAddr,
        authorization: &str,
    ) -> Verdict {
        let Some((user, password)) = basic_credentials(authorization) else {
            return Verdict::Missing;
        };
        let (hash, known) = match users.get(&user) {
            Some(hash) => (hash.clone(), true),
            None => (UNKNOWN_USER_HASH.to_string(), false),
        };
        let key = credentials_digest(&user, &hash, &password);
        let cached = lock(&self.verdicts).get(&key);
        let matches = match cached {
            Some(matches) => matches,
            None => {
                let Some(mut turn) = self.turn(Source::of(address)) else {
                    return Verdict::Throttled;
                };
                // A task of its own: a client that goes away neither frees the gate while its
                // check still runs nor escapes its backoff.
                let check = tokio::spawn(async move {
                    let authenticator = turn.authenticator.clone();
                    let _permit = authenticator.gate.acquire(turn.lane).await;
                    let verify = move || bcrypt::verify(password, &hash).unwrap_or(false);
                    let matches = tokio::task::spawn_blocking(verify).await.unwrap_or(false);
                    lock(&authenticator.verdicts).insert(key, matches);
                    turn.record(known && matches);
                    matches
                });
                check.await.unwrap_or(false)
            }
        };
        match known && matches {
            true => Verdict::Accepted,
            false => Verdict::Wrong,
        }
    }

    /// The source's turn for a bcrypt check, `None` while it has one pending or is in its
    /// backoff.
    fn turn(self: &Arc<Self>, source: Source) -> Option<Turn> {
        let now = Instant::now();
        let mut sources = lock(&self.sources);
        let index = match sources.get_index_of(&source) {
            Some(index) => index,
            None => {
                if sources.len() >= MAX_SOURCES {
                    // The least recently seen source with nothing pending.
                    let idle = sources.values().position(|state| !state.pending)?;
                    sources.shift_remove_index(idle);
                }
                sources.insert_full(source, SourceState::default()).0
            }
        };
        let last = sources.len() - 1;
        sources.move_index(index, last);
        let state = &mut sources[last];
        if state.pending || state.retry_at.is_some_and(|at| at > now) {
            return None;
        }
        state.pending = true;
        let lane = match (state.trusted, state.failures) {
            (true, _) => Lane::Trusted,
            (false, 0) => Lane::Unknown,
            (false, _) => Lane::Failed,
        };
        Some(Turn {
            authenticator: self.clone(),
            source,
            lane,
            accepted: None,
        })
    }
}

/// Where a request comes from, as far as throttling goes: an IPv6 host usually has a /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(u32),
    V6Prefix(u64),
}

impl Source {
    fn of(address: IpAddr) -> Source {
        match address {
            IpAddr::V4(v4) => Source::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.into()),
                None => Source::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[derive(Debug, Default)]
struct SourceState {
    pending: bool,
    /// Authenticated since it was last forgotten.
    trusted: bool,
    /// Wrong passwords since its last right one.
    failures: u32,
    retry_at: Option<Instant>,
}

/// A source's pending check; its verdict (none: the check failed to run) updates the source
/// when dropped.
struct Turn {
    authenticator: Arc<Authenticator>,
    source: Source,
    lane: Lane,
    accepted: Option<bool>,
}

impl Turn {
    fn record(&mut self, accepted: bool) {
        self.accepted = Some(accepted);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut sources = lock(&self.authenticator.sources);
        let Some(state) = sources.get_mut(&self.source) else {
            return;
        };
        state.pending = false;
        match self.accepted {
            Some(true) => {
                *state = SourceState {
                    trusted: true,
                    ..SourceState::default()
                }
            }
            Some(false) => {
                state.failures = state.failures.saturating_add(1);
                if let Some(beyond) = state.failures.checked_sub(FREE_FAILURES) {
                    let backoff = FIRST_BACKOFF
                        .saturating_mul(1 << beyond.min(16))
                        .min(MAX_BACKOFF);
                    state.retry_at = Some(Instant::now() + backoff);
                }
            }
            None => {}
        }
    }
}

/// Verdicts by credentials digest.
struct Verdicts {
    right: Lru,
    wrong: Lru,
}

impl Verdicts {
    fn get(&mut self, key: &[u8; 32]) -> Option<bool> {
        if self.right.touch(key) {
            return Some(true);
        }
        self.wrong.touch(key).then_some(false)
    }

    fn insert(&mut self, key: [u8; 32], matches: bool) {
        match matches {
            true => self.right.insert(key),
            false => self.wrong.insert(key),
        }
    }
}

/// A set of digests that forgets the least recently used one when full.
struct Lru {
    recent_last: IndexMap<[u8; 32], ()>,
    capacity: usize,
}

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru {
            recent_last: IndexMap::with_capacity(capacity),
            capacity,
        }
    }

    /// Whether `key` is here; it becomes the most recently used.
    fn touch(&mut self, key: &[u8; 32]) -> bool {
        let Some(index) = self.recent_last.get_index_of(key) else {
            return false;
        };
        let last = self.recent_last.len() - 1;
        self.recent_last.move_index(index, last);
        true
    }

    fn insert(&mut self, key: [u8; 32]) {
        if self.touch(&key) {
            return;
        }
        if self.recent_last.len() >= self.capacity {
            self.recent_last.shift_remove_index(0);
        }
        self.recent_last.insert(key, ());
    }
}

/// The order in which waiting checks run.
#[derive(Debug, Clone, Copy)]
enum Lane {
    /// Sources that have authenticated before.
    Trusted = 0,
    /// Sources with no wrong password since they were last forgotten.
    Unknown = 1,
    Failed = 2,
}

/// One bcrypt check at a time, the waiting ones served lane by lane, first come first served
/// within a lane.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    busy: bool,
    waiting: [VecDeque<oneshot::Sender<()>>; 3],
}

/// The right to run a check; handed to the next waiter when dropped.
struct Permit<'a>(&'a Gate);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.pass_on();
    }
}

/// A waiter's place; a waiter that goes away after it was handed the permit passes it on.
struct Waiting<'a> {
    gate: &'a Gate,
    handed: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut handed) = self.handed.take() {
            handed.close();
            if handed.try_recv().is_ok() {
                self.gate.pass_on();
            }
        }
    }
}

impl Gate {
    async fn acquire(&self, lane: Lane) -> Permit<'_> {
        let handed = {
            let mut state = lock(&self.state);
            if !state.busy {
                state.busy = true;
                return Permit(self);
            }
            let (hand, handed) = oneshot::channel();
            state.waiting[lane as usize].push_back(hand);
            handed
        };
        let mut waiting = Waiting {
            gate: self,
            handed: Some(handed),
        };
        if let Some(handed) = waiting.handed.as_mut() {
            // Its sender is dropped only with the gate: the permit is ours either way.
            let _ = handed.await;
        }
        waiting.handed = None;
        Permit(self)
    }

    /// The permit to the first waiter still there, or the gate free.
    fn pass_on(&self) {
        let mut state = lock(&self.state);
        for lane in &mut state.waiting {
            while let Some(hand) = lane.pop_front() {
                if hand.send(()).is_ok() {
                    return;
                }
            }
        }
        state.busy = false;
    }
}

/// User and password of an `Authorization: Basic` header.
fn basic_credentials(authorization: &str) -> Option<(String, String)> {
    let (scheme, encoded) = authorization.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// What the verdicts are keyed by: never the password itself.
fn credentials_digest(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, password] {
        context.update(&(part.len() as u64).to_le_bytes());
        context.update(part.as_bytes());
    }
    let mut digest = [0u8; 32];
    digest.copy_from_slice(context.finish().as_ref());
    digest
}

#[cfg(test)]
mod tests;

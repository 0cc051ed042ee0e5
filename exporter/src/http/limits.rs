//! What clients may hold at once: open connections under the cap, the one idle the longest
//! displaced by a new one, and which have a request in progress.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::sync::lock;

/// The open connections, oldest first, under the cap.
pub(super) struct Connections {
    limit: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    by_age: BTreeMap<u64, Arc<Connection>>,
}

/// One open connection as the cap sees it.
#[derive(Default)]
pub(super) struct Connection {
    /// Requests in progress, from the request head until the response body is dropped.
    requests: AtomicUsize,
    /// Closes the connection: a newer one took its place.
    pub(super) displaced: Notify,
}

impl Connections {
    pub(super) fn new(limit: usize) -> Connections {
        Connections {
            limit,
            open: Mutex::default(),
        }
    }

    /// A place for a new connection: a free one, or at the cap the place of the connection idle
    /// the longest, which is closed. `None` when every connection has a request in progress.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Place> {
        let mut open = lock(&self.open);
        if open.by_age.len() >= self.limit {
            let idle = open
                .by_age
                .iter()
                .find(|(_, connection)| connection.requests.load(Ordering::SeqCst) == 0)
                .map(|(id, _)| *id)?;
            if let Some(displaced) = open.by_age.remove(&idle) {
                displaced.displaced.notify_one();
            }
        }
        let id = open.next_id;
        open.next_id += 1;
        let connection = Arc::new(Connection::default());
        open.by_age.insert(id, connection.clone());
        Some(Place {
            id,
            connection,
            connections: self.clone(),
        })
    }
}

/// A connection's place under the cap, given back when the connection ends.
pub(super) struct Place {
    id: u64,
    pub(super) connection: Arc<Connection>,
    connections: Arc<Connections>,
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.connections.open).by_age.remove(&self.id);
    }
}

/// Marks its connection as having a request in progress (not to be displaced) while it lives.
pub(super) struct Busy(Arc<Connection>);

impl Busy {
    pub(super) fn new(connection: Arc<Connection>) -> Busy {
        connection.requests.fetch_add(1, Ordering::SeqCst);
        Busy(connection)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

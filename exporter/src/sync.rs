//! Locks that outlive a panic: every std `Mutex` of the crate is locked here, and every
//! `Condvar` waited on here. What a panicked holder leaves behind is plain data (sets, counts,
//! caches, flags) that the next holder can use, so the lock is taken over rather than the panic
//! spread to every thread that shares it. Imports nothing of the crate: any module may use it.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

/// Locks `mutex`, taking it over when poisoned.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `mutex` if no one holds it (taking it over when poisoned); `None` when someone does.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Waits on `changed` while `condition` holds, `limit` at most; the guard back either way.
pub(crate) fn wait_while<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    limit: Duration,
    condition: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    let (guard, _) = changed
        .wait_timeout_while(guard, limit, condition)
        .unwrap_or_else(PoisonError::into_inner);
    guard
}

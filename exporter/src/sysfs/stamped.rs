//! A value made from files, kept while their stamps stay what they were.

use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// A value made from files (`modules.alias`, the modprobe.d rules, `modules.dep`), kept while the files'
/// stamps (`key`) stay what they were: scrapes need it, and reading and parsing
/// megabytes again for each would cost more than the rest of the scrape.
pub struct Stamped<K, T> {
    kept: Mutex<Option<(K, Arc<T>)>>,
}

impl<K, T> Default for Stamped<K, T> {
    fn default() -> Self {
        Stamped {
            kept: Mutex::new(None),
        }
    }
}

impl<K: PartialEq, T> Stamped<K, T> {
    /// The value kept under `key`, if that is the key it was kept under.
    pub fn get(&self, key: &K) -> Option<Arc<T>> {
        let kept = lock(&self.kept);
        (kept.as_ref()).and_then(|(kept_key, value)| (kept_key == key).then(|| value.clone()))
    }

    /// Keeps `value`, made from the files as `key` stamped them (before they were read).
    pub fn keep(&self, key: K, value: T) -> Arc<T> {
        let value = Arc::new(value);
        let mut kept = lock(&self.kept);
        *kept = Some((key, value.clone()));
        value
    }
}

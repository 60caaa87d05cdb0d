//! A value a reload may replace while every connection or worker keeps
//! using the one it holds: the routing table ([`crate::routing::live`],
//! RFC 6733 §2.7) and the `[doic]` section of the DOIC cores
//! ([`crate::overload`]). A reload publishes a new value here
//! ([`Live::publish`]) and bumps a generation; a holder compares that
//! generation with its own at a point of its choosing (one relaxed load of
//! a line written only by a reload) and takes the new value when it moved:
//! the request path takes no lock, and a value is never swapped under a
//! request. The lock here is taken by the reload and by a holder once per
//! reload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The current value and its generation.
#[derive(Debug)]
pub struct Live<T> {
    generation: AtomicU64,
    current: Mutex<(u64, Arc<T>)>,
}

/// The value one holder uses, and its generation.
#[derive(Debug)]
pub struct Held<T> {
    generation: u64,
    value: Arc<T>,
}

impl<T> Clone for Held<T> {
    fn clone(&self) -> Self {
        Self {
            generation: self.generation,
            value: self.value.clone(),
        }
    }
}

impl<T> Held<T> {
    /// The value.
    #[must_use]
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The generation it was published with (0: the first value).
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl<T> Live<T> {
    /// `value` as the first value, generation 0.
    #[must_use]
    pub fn new(value: T) -> Self {
        Self {
            generation: AtomicU64::new(0),
            current: Mutex::new((0, Arc::new(value))),
        }
    }

    /// The current value.
    #[must_use]
    pub fn held(&self) -> Held<T> {
        let (generation, value) = &*self.current.lock().unwrap_or_else(PoisonError::into_inner);
        Held {
            generation: *generation,
            value: value.clone(),
        }
    }

    /// The current value alone.
    #[must_use]
    pub fn current(&self) -> Arc<T> {
        self.held().value
    }

    /// The generation of the current value: one relaxed load.
    #[inline]
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Replaces the value; every holder takes it at its next refresh.
    pub fn publish(&self, value: T) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = current.0 + 1;
        *current = (generation, Arc::new(value));
        self.generation.store(generation, Ordering::Release);
    }

    /// Brings `held` up to date when a newer value was published; true
    /// when it moved.
    #[inline]
    pub fn refresh(&self, held: &mut Held<T>) -> bool {
        if self.generation() == held.generation {
            return false;
        }
        *held = self.held();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_value_follows_a_publish_at_its_next_refresh() {
        let live = Live::new(1);
        let mut held = live.held();
        live.publish(2);
        assert_eq!(*held.get(), 1, "not swapped under a request");
        assert!(live.refresh(&mut held));
        assert_eq!((*held.get(), held.generation()), (2, 1));
        let before = Arc::as_ptr(&held.value);
        assert!(!live.refresh(&mut held));
        assert_eq!(
            before,
            Arc::as_ptr(&held.value),
            "no new copy without a publish"
        );
    }
}

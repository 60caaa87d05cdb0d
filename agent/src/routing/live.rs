//! The routing table as the connections hold it while a reload may replace
//! it (RFC 6733 §2.7). Each connection keeps its own [`Held`] table and
//! relays with it; a reload publishes a new table here
//! ([`LiveRoutes::publish`]) and bumps a generation. A connection compares
//! that generation with its own once per wake-up (one relaxed load of a
//! line written only by a reload) and takes the new table when it moved:
//! the request path takes no lock, and a table is never swapped under a
//! request being routed. The lock here is taken by the reload and by a
//! connection once per reload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::Router;

/// The current routing table and its generation.
#[derive(Debug)]
pub struct LiveRoutes {
    generation: AtomicU64,
    current: Mutex<(u64, Arc<Router>)>,
}

/// The table one connection relays with, and its generation.
#[derive(Debug, Clone)]
pub struct Held {
    generation: u64,
    router: Arc<Router>,
}

impl Held {
    /// The table.
    #[must_use]
    pub fn router(&self) -> &Router {
        &self.router
    }
}

impl LiveRoutes {
    /// `router` as the first table.
    #[must_use]
    pub fn new(router: Router) -> Self {
        Self {
            generation: AtomicU64::new(0),
            current: Mutex::new((0, Arc::new(router))),
        }
    }

    /// The current table.
    #[must_use]
    pub fn held(&self) -> Held {
        let (generation, router) = &*self.current.lock().unwrap_or_else(PoisonError::into_inner);
        Held {
            generation: *generation,
            router: router.clone(),
        }
    }

    /// Replaces the table; every connection takes it at its next wake-up.
    pub fn publish(&self, router: Router) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = current.0 + 1;
        *current = (generation, Arc::new(router));
        self.generation.store(generation, Ordering::Release);
    }

    /// Brings `held` up to date when a newer table was published.
    #[inline]
    pub fn refresh(&self, held: &mut Held) {
        if self.generation.load(Ordering::Relaxed) != held.generation {
            *held = self.held();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::Candidate;

    #[test]
    fn a_held_table_follows_a_publish_at_its_next_refresh() {
        let live = LiveRoutes::new(Router::new());
        let mut held = live.held();
        assert!(!held.router().has_route("example.net", 4));
        let mut r = Router::new();
        let c = Candidate {
            peer: 0,
            priority: 0,
            weight: 1,
        };
        r.add_route("example.net", None, vec![c]);
        live.publish(r);
        assert!(
            !held.router().has_route("example.net", 4),
            "not swapped under a request"
        );
        live.refresh(&mut held);
        assert!(held.router().has_route("example.net", 4));
        let before = Arc::as_ptr(&held.router);
        live.refresh(&mut held);
        assert_eq!(
            before,
            Arc::as_ptr(&held.router),
            "no new copy without a publish"
        );
    }
}

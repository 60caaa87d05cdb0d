//! The routing table as the connections hold it while a reload may replace
//! it (RFC 6733 §2.7): a [`crate::live::Live`] table. Each connection keeps
//! its own [`Held`] table and relays with it; a reload publishes a new
//! table ([`LiveRoutes::publish`]), and a connection compares the
//! generation with its own once per wake-up and takes the new table when
//! it moved: the request path takes no lock, and a table is never swapped
//! under a request being routed.

use super::Router;

/// The current routing table and its generation.
pub type LiveRoutes = crate::live::Live<Router>;

/// The table one connection relays with, and its generation.
pub type Held = crate::live::Held<Router>;

impl Held {
    /// The table.
    #[must_use]
    pub fn router(&self) -> &Router {
        self.get()
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
    }
}

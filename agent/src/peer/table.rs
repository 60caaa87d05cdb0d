//! The peer table of RFC 6733 §2.6, shared by every worker: one slot per
//! peer (configured `[[peer]]` entries first, then inbound peers accepted
//! by name pattern), with the live connection's channel, its state for the
//! router, the outstanding count and per-peer counters. The §5.6.4 election
//! happens here, where both connections to a peer are visible (one peer's
//! slot: [`PeerSlot`], in `slot`).
//!
//! # A second connection from a registered peer
//!
//! RFC 6733 §5.6 has one state machine, and so one connection, per peer:
//! R-Conn-CER in I-Open or R-Open is R-Reject (CEA 4003), and the election
//! of §5.6.4 applies only to simultaneous *opening* (Wait-I-CEA: our CER is
//! out while the peer's arrives). A peer that closes its connection and
//! dials again at once is neither: its old connection has ended on the wire
//! (its state machine went back to Closed, the only state with Start), but
//! the task that owns that connection on another worker may not have seen
//! the FIN or RST yet. Taking the events in wire order, R-Peer-Disc of the
//! old connection comes before R-Conn-CER of the new one, so the new CER
//! meets a Closed machine and is accepted (§5.6: "any implementation that
//! produces equivalent results is considered compliant"). [`PeerSlot::try_open`]
//! therefore asks the registered connection's [`Liveness`] (its socket, read
//! without waiting for its task): ended (peer closed or reset), or closing
//! after DPR/DPA, it is retired ([`ToConn::Replaced`]) and the new connection
//! opens; open and alive, the new one is refused 4003 as the RFC says.
//!
//! # Queues between connections
//!
//! A connection is reached through its [`Link`] (the tokio edge implements
//! it): a bounded queue of requests for its peer, which refuses a request
//! when full ([`Undelivered::Full`]: the relay answers it 3004 at once, RFC
//! 6733 §7.1.3, counted in [`PeerStats::queue_full`]), and a queue of answers
//! and notices for the connection itself, sized so that it cannot fill: at
//! most as many answers are on their way to a connection as it has requests
//! pending (`node.max_pending_per_connection`), plus one notice
//! ([`ToConn::Close`] or [`ToConn::Replaced`], sent once, under the lock
//! that then forgets the connection). A connection's task closes its
//! request queue before it drains it for the last time: a request queued
//! before is drained (rerouted), one offered after is refused
//! ([`Undelivered::Gone`]) and goes elsewhere; none is left behind.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::config::Config;
use crate::routing::{PeerId, PeerView};

mod by_code;
mod slot;

pub use by_code::ByCode;
pub use slot::{PeerSlot, PeerStats, state};

/// An answer or a notice for a connection task (requests go on their own
/// queue, [`Link::request`]).
#[derive(Debug)]
pub enum ToConn {
    /// Write this answer to the connection's peer with its original
    /// Hop-by-Hop Identifier.
    Answer {
        /// The answer as received upstream (or built by the agent).
        msg: Bytes,
        /// The Hop-by-Hop Identifier the downstream peer used.
        hbh: u32,
        /// Its Result-Code (or Experimental-Result-Code; 0 when absent),
        /// for the counters.
        code: u32,
    },
    /// [`ToConn::Answer`] with the agent's OC-Supported-Features toward a
    /// DOIC client at its end, written without copying the answer first.
    AnswerWith {
        /// The answer as received upstream.
        msg: Bytes,
        /// Which of the agent's encoded OC-Supported-Features
        /// ([`crate::overload::Overload::answer_features_avp`]).
        features: doic::AnswerFeatures,
        /// The Hop-by-Hop Identifier the downstream peer used.
        hbh: u32,
        /// As in [`ToConn::Answer`].
        code: u32,
    },
    /// Close the connection now (it lost the §5.6.4 election).
    Close,
    /// Close the connection now: its transport already ended and a new
    /// connection of the same peer replaced it (see the module docs).
    Replaced,
    /// The peer was removed from the configuration (a reload): DPR
    /// (DO_NOT_WANT_TO_TALK_TO_YOU, RFC 6733 §5.4), then close once the
    /// pending requests are answered or the drain ends
    /// ([`PeerSlot::retire`]).
    Retire,
}

/// Whether a registered connection's transport has already ended (the peer
/// closed or reset it), answered at once from any thread, before the task
/// owning the connection has seen it. The tokio edge implements it on the
/// socket.
pub trait Liveness: Send + Sync + std::fmt::Debug {
    /// True when the peer has closed or reset the connection.
    fn ended(&self) -> bool;
}

/// Why a request could not be queued for a connection ([`Link::request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undelivered {
    /// The connection's request queue is full (`node.upstream_queue`).
    Full,
    /// The connection has ended (or its peer has none open).
    Gone,
}

/// A connection's queues as the relay and the table see them, from any
/// worker (module docs). Neither call waits.
pub trait Link: Send + Sync + std::fmt::Debug {
    /// Queues a request for the connection's peer.
    ///
    /// # Errors
    /// The request back and why, when the queue is full or the connection
    /// gone.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    fn request(&self, r: Relayed) -> Result<(), (Relayed, Undelivered)>;

    /// Queues an answer or a notice for the connection; when the connection
    /// has ended it is dropped (there is no one left to write it to).
    fn send(&self, m: ToConn);
}

/// A shared handle of a connection's queues.
pub type LinkRef = Arc<dyn Link>;

/// A request on its way upstream, with what is needed to answer it.
#[derive(Debug)]
pub struct Relayed {
    /// The request as received from downstream (without the agent's
    /// Route-Record, which is added on the way out).
    pub msg: Bytes,
    /// The downstream Hop-by-Hop Identifier, restored on the answer.
    pub hbh: u32,
    /// Where the answer goes: the downstream connection.
    pub reply: LinkRef,
    /// Pinned to its peer by Destination-Host: never failed over.
    pub pinned: bool,
    /// Peers already tried (for failover and TOO_BUSY retries).
    pub tried: Vec<PeerId>,
    /// Send with the T flag (RFC 6733 §5.5.4).
    pub retransmit: bool,
    /// Destination-Realm and Application-Id, for re-routing.
    pub realm: Bytes,
    /// Application-Id of the request.
    pub app: u32,
    /// Identity of the downstream peer, recorded in the Route-Record added
    /// upstream (RFC 6733 §6.1.9).
    pub from: Arc<str>,
    /// DOIC transaction state, when overload control treated the request
    /// (given back to the core with the answer); the agent's
    /// OC-Supported-Features ([`crate::overload::Overload::features_avp`])
    /// then follow the Route-Record on the way out (RFC 7683 §5.1.3).
    pub doic: Option<doic::TxState>,
    /// Bytes of `msg` left out on the way upstream: the client's
    /// OC-Supported-Features (start, end), replaced by the agent's (RFC 7683
    /// §5.1.3, RFC 8581 §6.1.1) without copying the request first.
    pub cut: Option<(u32, u32)>,
    /// When the request was read from its downstream socket, on the
    /// overload control's clock ([`crate::overload::Overload::now_ns`]); 0:
    /// not stamped. Its age when the upstream connection takes it is the
    /// agent's own queue delay (`overload::own::note_queue_delay`).
    pub read_ns: u64,
}

/// The peer table.
#[derive(Debug, Default)]
pub struct PeerTable {
    slots: RwLock<Vec<Arc<PeerSlot>>>,
}

impl PeerTable {
    /// The table of a configuration: one slot per `[[peer]]`, in order.
    #[must_use]
    pub fn from_config(config: &Config) -> Self {
        let slots = config
            .peers
            .iter()
            .map(|p| Arc::new(PeerSlot::configured(&p.host, &p.realm, p.connect)))
            .collect();
        Self {
            slots: RwLock::new(slots),
        }
    }

    /// The slot of a peer.
    #[must_use]
    pub fn get(&self, id: PeerId) -> Option<Arc<PeerSlot>> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Every slot with its id, but those of peers a reload removed
    /// ([`PeerSlot::retire`]: their series leave `/metrics`, and a peer
    /// configured again under the same name is listed once, by its new
    /// slot).
    #[must_use]
    pub fn all(&self) -> Vec<(PeerId, Arc<PeerSlot>)> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .enumerate()
            .filter(|(_, s)| !s.is_retired())
            .collect()
    }

    /// Every slot with its id, but accepted peers that are gone
    /// ([`PeerSlot::is_gone`]): what `/metrics` and `GET /peers` show.
    #[must_use]
    pub fn present(&self) -> Vec<(PeerId, Arc<PeerSlot>)> {
        let mut all = self.all();
        all.retain(|(_, s)| !s.is_gone());
        all
    }

    /// The id of `host`, adding a slot for an inbound peer accepted by
    /// pattern when `add_realm` is given.
    pub fn lookup_or_add(&self, host: &str, add_realm: Option<&str>) -> Option<PeerId> {
        if let Some(id) = self.by_host(host) {
            return Some(id);
        }
        let realm = add_realm?;
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(id) = position(&slots, host) {
            return Some(id);
        }
        slots.push(Arc::new(PeerSlot::new(host, realm, None)));
        Some(slots.len() - 1)
    }

    /// A `[[peer]]` entry a reload added: a new slot at the end (ids of the
    /// others do not move). Its id.
    pub fn add_configured(&self, peer: &crate::config::PeerConfig) -> PeerId {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.push(Arc::new(PeerSlot::configured(
            &peer.host,
            &peer.realm,
            peer.connect,
        )));
        slots.len() - 1
    }
}

/// The slot of `host` among those not retired.
fn position(slots: &[Arc<PeerSlot>], host: &str) -> Option<PeerId> {
    slots
        .iter()
        .position(|s| s.host.eq_ignore_ascii_case(host) && !s.is_retired())
}

impl PeerTable {
    /// The peers of `peers` that cannot take requests, each with why it
    /// was last down: `peer a.example down: connection refused; peer b...`
    /// (empty when every one is up). Cold path: the agent's 3002
    /// Error-Message and the warning that a route has no peer up.
    #[must_use]
    pub fn describe_down(&self, peers: &[PeerId]) -> String {
        let mut out = String::new();
        for slot in peers.iter().filter_map(|&p| self.get(p)) {
            if slot.state() == state::OKAY {
                continue;
            }
            if !out.is_empty() {
                out.push_str("; ");
            }
            out.push_str("peer ");
            out.push_str(&slot.host);
            out.push_str(" down");
            if let Some(cause) = slot.down_cause() {
                out.push_str(": ");
                out.push_str(&cause);
            }
        }
        out
    }
}

impl PeerView for PeerTable {
    fn by_host(&self, host: &str) -> Option<PeerId> {
        position(
            &self
                .slots
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            host,
        )
    }

    fn usable(&self, id: PeerId) -> bool {
        self.get(id).is_some_and(|s| s.state() == state::OKAY)
    }

    fn outstanding(&self, id: PeerId) -> u32 {
        self.get(id)
            .map_or(u32::MAX, |s| s.outstanding.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::test_link::Queue;

    #[test]
    fn pattern_accepted_peers_get_a_slot_once() {
        let t = PeerTable::default();
        assert_eq!(t.lookup_or_add("c.example.org", None), None);
        let id = t
            .lookup_or_add("c.example.org", Some("example.org"))
            .unwrap();
        assert_eq!(
            t.lookup_or_add("C.EXAMPLE.ORG", Some("example.org")),
            Some(id)
        );
        assert_eq!(t.all().len(), 1);
        assert!(!t.usable(id));
        t.get(id).unwrap().set_state(state::OKAY);
        assert!(t.usable(id));
    }

    #[test]
    fn a_retired_peer_is_told_once_and_its_name_goes_to_the_new_slot() {
        let t = PeerTable::default();
        let old = t
            .lookup_or_add("b.example.net", Some("example.net"))
            .unwrap();
        let rx = Queue::new();
        let slot = t.get(old).unwrap();
        assert!(slot.try_open(1, rx.link(), true, "agent.example.com", None));
        slot.retire();
        slot.retire();
        assert!(matches!(rx.try_recv(), Some(ToConn::Retire)));
        assert!(rx.try_recv().is_none(), "one notice");
        assert_eq!(t.by_host("b.example.net"), None, "gone by name");
        let cfg = crate::config::PeerConfig {
            host: "B.example.net".into(),
            realm: "example.net".into(),
            connect: "127.0.0.1:3870".parse().ok(),
            trusted: false,
            doic: doic::protect::Mode::Auto,
            tls: None,
        };
        let new = t.add_configured(&cfg);
        assert_ne!(new, old);
        assert_eq!(t.by_host("b.example.net"), Some(new));
        let listed: Vec<PeerId> = t.all().into_iter().map(|(id, _)| id).collect();
        assert_eq!(listed, [new], "listed once, by its new slot");
        assert!(slot.is_open(), "the old connection drains on its own");
    }
}

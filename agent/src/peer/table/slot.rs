//! One peer's slot in the table of RFC 6733 §2.6: its connection as the
//! table knows it (connecting, open), the §5.6.4 election between two
//! connections to it, the replacement of an ended connection (see the table's
//! docs), its router-visible state (open, watchdog OKAY or SUSPECT of RFC 3539
//! §3.4.1, closing), its outstanding count and its counters.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::by_code::ByCode;
use super::{LinkRef, Liveness, Relayed, ToConn, Undelivered};
use diameter::peer::capx::local_wins_election;
use diameter::peer::watchdog::{Watchdog, WatchdogState};

/// What the table knows of a peer's connection.
#[derive(Debug, Clone)]
enum ConnReg {
    Idle,
    Connecting(u64, LinkRef),
    Open(u64, LinkRef, Option<Arc<dyn Liveness>>),
}

/// Router-visible state of a peer.
pub mod state {
    /// No connection.
    pub const CLOSED: u8 = 0;
    /// Capabilities exchange in progress.
    pub const CONNECTING: u8 = 1;
    /// Open and watchdog OKAY: takes requests.
    pub const OKAY: u8 = 2;
    /// Open but watchdog SUSPECT or REOPEN: takes no new requests.
    pub const SUSPECT: u8 = 3;
    /// DPR sent or received.
    pub const CLOSING: u8 = 4;
}

/// Counters of one peer (monotonic).
#[derive(Debug, Default)]
pub struct PeerStats {
    /// Requests received from this peer.
    pub requests_in: AtomicU64,
    /// Bytes read from this peer's connections (one add per read).
    pub bytes_in: AtomicU64,
    /// Requests relayed to this peer (including failovers).
    pub requests_out: AtomicU64,
    /// Answers received from this peer, by Result-Code (0: none found).
    pub answers_in: ByCode,
    /// Answers written to this peer, by Result-Code (including the agent's).
    pub answers_out: ByCode,
    /// Malformed answers received from this peer (not forwarded), by the
    /// Result-Code of their defect.
    pub answers_malformed: ByCode,
    /// Requests moved from this peer to an alternate one.
    pub failovers: AtomicU64,
    /// DWRs sent to the peer.
    pub dwr_sent: AtomicU64,
    /// DWAs received from the peer.
    pub dwa_received: AtomicU64,
    /// DPRs sent to the peer.
    pub dpr_sent: AtomicU64,
    /// DPAs received from the peer.
    pub dpa_received: AtomicU64,
    /// Requests left unanswered when a connection closed: read after the
    /// agent's FIN, or behind the message that ended the connection.
    pub requests_discarded: AtomicU64,
    /// Answers from this peer matching no pending request (late after the
    /// request's 3002 timeout, after a failover, or never asked for):
    /// dropped.
    pub answers_unmatched: AtomicU64,
    /// Requests for this peer that found its connection's request queue
    /// full: answered 3004 at once.
    pub queue_full: AtomicU64,
}

/// Clears what `slot` holds of connection `conn`, if it is that one's.
fn forget<T: Copy>(slot: &Mutex<Option<(u64, T)>>, conn: u64) {
    let mut held = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if held.is_some_and(|(id, _)| id == conn) {
        *held = None;
    }
}

/// One peer of the table.
#[derive(Debug)]
pub struct PeerSlot {
    /// Its DiameterIdentity.
    pub host: String,
    host_arc: Arc<str>,
    /// Its realm (from the configuration, or from its CER).
    pub realm: String,
    /// Where the agent dials it, if anywhere.
    pub connect: Option<SocketAddr>,
    state: AtomicU8,
    /// Requests sent and not yet answered.
    pub outstanding: AtomicU32,
    reg: Mutex<ConnReg>,
    watchdog: Mutex<Option<Watchdog>>,
    /// Counters.
    pub stats: PeerStats,
    /// What the relay senses of its answers, for its protection.
    pub sensed: crate::peer::sensed::Sensed,
    /// The open connection's id and remote transport address (for the
    /// kernel's per-address arrival rates).
    remote: Mutex<Option<(u64, SocketAddr)>>,
    /// The open connection's id and socket descriptor: its unread bytes,
    /// read by the control thread ([`PeerSlot::unread`]).
    socket: Mutex<Option<(u64, RawFd)>>,
    /// The rate the agent holds it to while overloaded
    /// ([`crate::peer::limit::ClientLimit`], enforced by `overload::own`).
    pub own_limit: crate::peer::limit::ClientLimit,
    /// Why the peer was last not reachable (a failed dial, a closed
    /// connection), for the agent's 3002 Error-Message: written and read
    /// off the relay's path only.
    down_cause: Mutex<Option<String>>,
    /// Removed from the configuration by a reload: not found by name, not
    /// dialled, its connection told to close ([`PeerSlot::retire`]).
    retired: AtomicBool,
    /// What `GET /peers` shows besides the counters ([`super::status`]),
    /// written when the state changes, never per message.
    pub(crate) shown: crate::peer::status::Shown,
}

impl PeerSlot {
    pub(crate) fn new(host: &str, realm: &str, connect: Option<SocketAddr>) -> Self {
        Self::made(host, realm, connect, false)
    }

    /// The slot of a `[[peer]]` entry (its series stay in `/metrics` while
    /// it is down).
    pub(crate) fn configured(host: &str, realm: &str, connect: Option<SocketAddr>) -> Self {
        Self::made(host, realm, connect, true)
    }

    fn made(host: &str, realm: &str, connect: Option<SocketAddr>, configured: bool) -> Self {
        Self {
            host: host.to_owned(),
            host_arc: Arc::from(host),
            realm: realm.to_owned(),
            connect,
            state: AtomicU8::new(state::CLOSED),
            outstanding: AtomicU32::new(0),
            reg: Mutex::new(ConnReg::Idle),
            watchdog: Mutex::new(None),
            stats: PeerStats::default(),
            sensed: crate::peer::sensed::Sensed::new(),
            remote: Mutex::new(None),
            socket: Mutex::new(None),
            own_limit: crate::peer::limit::ClientLimit::default(),
            down_cause: Mutex::new(None),
            retired: AtomicBool::new(false),
            shown: crate::peer::status::Shown::new(configured),
        }
    }

    /// The peer leaves the configuration (a reload, RFC 6733 §5.4): from
    /// now on it is not found by name ([`PeerView::by_host`]) nor dialled,
    /// and its connection, if any, is told once ([`ToConn::Retire`]) to
    /// send DPR, answer or drain what is pending, and close. The slot
    /// stays (peer ids do not move); a peer of the same name configured
    /// again gets a new one.
    pub fn retire(&self) {
        if self.retired.swap(true, Ordering::AcqRel) {
            return;
        }
        let reg = self.reg.lock().unwrap_or_else(PoisonError::into_inner);
        match &*reg {
            ConnReg::Connecting(_, link) | ConnReg::Open(_, link, _) => link.send(ToConn::Retire),
            ConnReg::Idle => {}
        }
    }

    /// True once the peer has left the configuration ([`PeerSlot::retire`]).
    #[must_use]
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Records why the peer is not reachable (cold path: a dial failed, a
    /// connection ended).
    pub fn note_down(&self, cause: &dyn std::fmt::Display) {
        *self
            .down_cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cause.to_string());
    }

    /// Why the peer was last not reachable, if it ever was not.
    #[must_use]
    pub fn down_cause(&self) -> Option<String> {
        self.down_cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The DiameterIdentity, shared (for Route-Record).
    #[must_use]
    pub fn host_arc(&self) -> Arc<str> {
        self.host_arc.clone()
    }

    /// The router-visible state (see [`state`]).
    #[must_use]
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    /// Sets the router-visible state (a load and nothing else when it is
    /// unchanged, as on almost every message).
    pub fn set_state(&self, s: u8) {
        if self.state.load(Ordering::Relaxed) != s {
            self.state.store(s, Ordering::Relaxed);
            self.shown.changed();
        }
    }

    /// Publishes the RFC 3539 watchdog state for `GET /peers` (a load
    /// when it is unchanged).
    pub fn set_watchdog_state(&self, w: WatchdogState) {
        let w = w.as_metric();
        if self.shown.watchdog.load(Ordering::Relaxed) != w {
            self.shown.watchdog.store(w, Ordering::Relaxed);
            self.shown.changed();
        }
    }

    /// True for an accepted peer (not a `[[peer]]`), or one a reload
    /// removed, with no connection: its series are left out of `/metrics`
    /// and `GET /peers` (until it connects again).
    #[must_use]
    pub fn is_gone(&self) -> bool {
        (!self.shown.configured || self.is_retired()) && self.state() == state::CLOSED
    }

    /// True while a connection is open.
    #[must_use]
    pub fn is_open(&self) -> bool {
        matches!(
            *self
                .reg
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            ConnReg::Open(..)
        )
    }

    /// Queues `r` for the open connection (outside the slot's lock: the
    /// queue wakes the connection's worker), counted outstanding there; a
    /// full queue is counted in [`PeerStats::queue_full`].
    ///
    /// # Errors
    /// The request back and why, when there is no open connection or its
    /// queue is full.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    pub fn send_request(&self, r: Relayed) -> Result<(), (Relayed, Undelivered)> {
        let link = match &*self
            .reg
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            ConnReg::Open(_, link, _) => link.clone(),
            _ => return Err((r, Undelivered::Gone)),
        };
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        link.request(r).map_err(|(r, why)| {
            self.outstanding.fetch_sub(1, Ordering::Relaxed);
            if why == Undelivered::Full {
                self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
            }
            (r, why)
        })
    }

    /// True while a connection is registered (connecting or open).
    #[must_use]
    pub fn has_connection(&self) -> bool {
        !matches!(
            *self
                .reg
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            ConnReg::Idle
        )
    }

    /// An initiator connection starts its capabilities exchange. Returns
    /// false when another connection is already registered (do not dial).
    pub fn begin_connecting(&self, conn: u64, tx: LinkRef) -> bool {
        let mut reg = self
            .reg
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if matches!(*reg, ConnReg::Idle) {
            *reg = ConnReg::Connecting(conn, tx);
            self.shown.responder.store(false, Ordering::Relaxed);
            self.set_state(state::CONNECTING);
            true
        } else {
            false
        }
    }

    /// A connection finished its capabilities exchange and wants to open;
    /// `live` tells later connections of this peer whether it has ended.
    ///
    /// RFC 6733 §5.6.4: when the agent is dialling this peer at the same
    /// time (Wait-I-CEA, R-Conn-CER), the node with the higher Origin-Host
    /// wins and closes the connection it initiated: the responder connection
    /// survives when the local Origin-Host is higher, the initiator one
    /// otherwise. An open connection that has ended on the wire, or is
    /// closing, is retired for the new one (module docs). Returns false when
    /// this connection must be refused (election lost, or another connection
    /// is open and alive).
    pub fn try_open(
        &self,
        conn: u64,
        tx: LinkRef,
        responder: bool,
        local_host: &str,
        live: Option<Arc<dyn Liveness>>,
    ) -> bool {
        let mut reg = self
            .reg
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*reg {
            ConnReg::Open(id, other, old) if *id != conn => {
                let ended = old.as_ref().is_some_and(|l| l.ended());
                if !ended && self.state() != state::CLOSING {
                    // I-Open/R-Open  R-Conn-CER  R-Reject
                    return false;
                }
                tracing::info!(peer = %self.host, old = *id, new = conn, "peer reconnected: its ended connection is replaced");
                other.send(ToConn::Replaced);
            }
            // Wait-I-CEA  R-Conn-CER  Elect: Win-Election  I-Disc, R-Snd-CEA
            ConnReg::Connecting(id, other) if *id != conn && responder => {
                if !local_wins_election(local_host, &self.host) {
                    return false;
                }
                other.send(ToConn::Close);
            }
            _ => {}
        }
        *reg = ConnReg::Open(conn, tx, live);
        self.shown.responder.store(responder, Ordering::Relaxed);
        true
    }

    /// The connection `conn` ended: the slot becomes idle if it was its.
    pub fn release(&self, conn: u64) {
        let mut reg = self
            .reg
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mine = match &*reg {
            ConnReg::Connecting(id, _) | ConnReg::Open(id, _, _) => *id == conn,
            ConnReg::Idle => false,
        };
        if mine {
            *reg = ConnReg::Idle;
            self.set_state(state::CLOSED);
        }
        drop(reg);
        forget(&self.remote, conn);
        forget(&self.socket, conn);
    }

    /// Records the remote address of connection `conn`, which just opened,
    /// and the worker it runs on, if it runs on one (called on its task).
    pub fn note_remote(&self, conn: u64, addr: Option<SocketAddr>, worker: Option<usize>) {
        if let Some(w) = worker {
            self.shown.worker.store(w, Ordering::Relaxed);
        }
        *self
            .remote
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = addr.map(|a| (conn, a));
    }

    /// Records the socket of connection `conn`, which just opened (called
    /// on its task; forgotten when it unregisters).
    pub fn note_socket(&self, conn: u64, fd: RawFd) {
        *self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((conn, fd));
    }

    /// Bytes the peer sent on the open connection that wait unread in its
    /// socket (`None`: no open connection, or the kernel would not say).
    #[must_use]
    pub fn unread(&self) -> Option<usize> {
        let fd = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map(|(_, fd)| fd)?;
        crate::host::socket::unread(fd).ok()
    }

    /// The remote transport address of the open connection, as
    /// `TcpStream::peer_addr` gave it.
    #[must_use]
    pub fn remote(&self) -> Option<SocketAddr> {
        self.remote
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map(|(_, a)| a)
    }

    /// Takes the peer's watchdog (it outlives connections, RFC 3539
    /// Appendix A), creating it on first use.
    pub fn take_watchdog(&self, make: impl FnOnce() -> Watchdog) -> Watchdog {
        self.watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_else(make)
    }

    /// Gives the watchdog back when the connection ends.
    pub fn put_watchdog(&self, w: Watchdog) {
        self.set_watchdog_state(w.state());
        *self
            .watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::test_link::Queue;

    /// A connection whose end the test decides.
    #[derive(Debug, Default)]
    struct Wire(std::sync::atomic::AtomicBool);
    impl Liveness for Wire {
        fn ended(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn election_winner_closes_the_connection_it_initiated() {
        // RFC 6733 §5.6.4: local "b..." succeeds remote "a...": the local
        // node wins, closes its initiator connection and keeps the responder.
        let slot = PeerSlot::new("a.example.net", "example.net", None);
        let rx1 = Queue::new();
        let tx1 = rx1.link();
        assert!(slot.begin_connecting(1, tx1.clone()));
        let tx2 = Queue::new().link();
        assert!(slot.try_open(2, tx2, true, "b.example.com", None));
        assert!(matches!(rx1.try_recv(), Some(ToConn::Close)));
        assert!(
            !slot.try_open(1, tx1, false, "b.example.com", None),
            "the initiator's late CEA does not open it"
        );
        slot.release(1);
        assert!(slot.is_open(), "releasing the loser keeps the winner");

        // Local "a..." < remote "Z..." (case-insensitive): the peer wins; the
        // incoming connection is refused 4003 and the initiator opens.
        let slot = PeerSlot::new("Z.example.net", "example.net", None);
        let rx1 = Queue::new();
        let tx1 = rx1.link();
        assert!(slot.begin_connecting(1, tx1.clone()));
        let tx2 = Queue::new().link();
        assert!(!slot.try_open(2, tx2, true, "a.example.com", None));
        assert!(slot.try_open(1, tx1, false, "a.example.com", None));
        assert!(rx1.try_recv().is_none());
        let tx3 = Queue::new().link();
        assert!(
            !slot.try_open(3, tx3, true, "a.example.com", None),
            "one open connection per peer"
        );
        slot.release(1);
        assert!(!slot.is_open());
    }

    #[test]
    fn a_reconnect_replaces_an_ended_connection_and_only_that() {
        let slot = PeerSlot::new("c.example.org", "example.org", None);
        let wire = Arc::new(Wire::default());
        let rx1 = Queue::new();
        let tx1 = rx1.link();
        let live: Arc<dyn Liveness> = wire.clone();
        assert!(slot.try_open(1, tx1, true, "agent.example.com", Some(live)));
        slot.set_state(state::OKAY);
        // open and alive: R-Conn-CER in R-Open is R-Reject
        let tx2 = Queue::new().link();
        assert!(!slot.try_open(2, tx2, true, "agent.example.com", None));
        assert!(rx1.try_recv().is_none(), "the live connection stays");
        // the peer closed it; its task has not noticed yet
        wire.0.store(true, Ordering::Relaxed);
        let rx3 = Queue::new();
        let tx3 = rx3.link();
        assert!(slot.try_open(3, tx3, true, "agent.example.com", None));
        assert!(matches!(rx1.try_recv(), Some(ToConn::Replaced)));
        slot.release(1);
        assert!(slot.is_open(), "the old one's end keeps the new");
        // closing after DPR: replaced too
        slot.set_state(state::CLOSING);
        let tx4 = Queue::new().link();
        assert!(slot.try_open(4, tx4, true, "agent.example.com", None));
        assert!(matches!(rx3.try_recv(), Some(ToConn::Replaced)));
    }

    #[test]
    fn the_remote_address_is_the_open_connections() {
        let slot = PeerSlot::new("a.example.net", "example.net", None);
        let addr: SocketAddr = "127.0.0.2:40000".parse().unwrap();
        let tx = Queue::new().link();
        assert!(slot.try_open(1, tx, true, "b.example.com", None));
        slot.note_remote(1, Some(addr), None);
        assert_eq!(slot.remote(), Some(addr));
        slot.release(7);
        assert_eq!(slot.remote(), Some(addr), "another connection's end");
        slot.release(1);
        assert_eq!(slot.remote(), None);
    }
}

//! The relay of RFC 6733 §6.1-§6.2, sans-io: `Relay` checks a request
//! (§6.1.1, loop detection §6.1.3, local requests §6.1.4), routes it to the
//! next hop the [`crate::routing::Router`] picks (§6.1.5-6.1.7), moves the
//! requests of a peer that failed to an alternate with the T flag (§5.5.4),
//! retries after TOO_BUSY within the retry budget ([`budget`]), and builds
//! the answers the agent gives itself when a request cannot be delivered
//! (3002), every candidate refused it (3004), it looped (3005) or was for
//! the agent (3007); `pending::Upstream` is the hop-by-hop table of one
//! upstream connection (§6.1.8, §6.2.2: fresh identifiers, Route-Record
//! §6.1.9, deadlines, 3002 on timeout). Experimental-Result 5198
//! (DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY) is never retried elsewhere.
//!
//! No socket, no runtime, no clock: `now` is an argument, requests go to a
//! peer's connection through its [`crate::peer::table::Link`] in the
//! [`PeerTable`], answers to the downstream connection through the
//! request's reply link. A request that finds its next hop's queue full is
//! answered 3004 at once (RFC 6733 §7.1.3: the agent is too busy for that
//! peer; the downstream SHOULD try an alternate), not queued elsewhere.
//! `net::conn` drives it: bytes in, `Relay`, bytes out. DOIC treatment
//! reaches the relay only through the `Treat` seam.
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`budget`] | the retry budget of 3004 retries and failovers |
//! | `pending` | the hop-by-hop table of one upstream connection |

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::peer::table::{PeerSlot, PeerTable, Relayed, ToConn, Undelivered};
use crate::routing::{self, PeerId, RouteError, Router};
use budget::RetryGate;
use diameter::codec::Routing;
use diameter::codec::answer::put_error_answer;
use diameter::codec::avp::empty_avp;
use diameter::codec::header::Header;
use diameter::dictionary::code;
use doic::TxState;
use pending::Upstream;

pub mod budget;
pub(crate) mod pending;

/// The Result-Codes the relay answers with itself (RFC 6733 §7.1), and
/// the vendor Experimental-Result-Code 5198, from the dictionary.
pub use diameter::dictionary::result::{
    APPLICATION_UNSUPPORTED, LOOP_DETECTED, MISSING_AVP, OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY,
    TOO_BUSY, UNABLE_TO_DELIVER,
};

/// Why the agent answers a request itself instead of relaying it (or its
/// answer); the message is the answer's Error-Message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The request has no P bit (RFC 6733 §6.1.4): 3007.
    #[error("non-proxiable request for an agent without local applications")]
    NotProxiable,
    /// A Route-Record names the agent (§6.1.3): 3005.
    #[error("route-record loop")]
    Looped,
    /// Destination-Host names the agent (§6.1.4): 3007.
    #[error("request for the agent itself, which has no local application")]
    ForTheAgent,
    /// No Destination-Realm (§6.1.5): 5005 with Failed-AVP.
    #[error("missing Destination-Realm")]
    MissingRealm,
    /// The agent sent its DPR (§5.4): 3002.
    #[error("agent is shutting down")]
    ShuttingDown,
    /// The downstream peer sent DPR or the connection is going: 3002.
    #[error("connection closing")]
    ConnectionClosing,
    /// Nothing routes there (§6.1.5, every candidate excluded by §6.1.7):
    /// 3002.
    #[error("no route")]
    NoRoute,
    /// Every candidate refused the request: 3004.
    #[error("every candidate refused")]
    AllBusy,
    /// The request was pinned to a peer that failed: 3002.
    #[error("destination host unavailable")]
    DestinationUnavailable,
    /// The request's peer failed and no other takes it: 3002.
    #[error("no alternate peer")]
    NoAlternate,
    /// The chosen connection is not open: 3002.
    #[error("peer not open")]
    PeerNotOpen,
    /// The chosen peer cannot take requests and no other can: 3002.
    #[error("peer not available")]
    PeerNotAvailable,
    /// The peer's connection ended with the request queued or pending: 3002.
    #[error("peer connection lost")]
    ConnectionLost,
    /// The peer did not answer within the request timeout: 3002.
    #[error("upstream answer timed out")]
    Timeout,
    /// 2^32 identifiers later the request was still pending: 3002.
    #[error("hop-by-hop identifier reused")]
    HopByHopReused,
    /// The next hop's request queue is full (`node.upstream_queue`): the
    /// agent is too busy for that peer, 3004 (RFC 6733 §7.1.3).
    #[error("agent too busy: the peer's request queue is full")]
    QueueFull,
    /// The downstream connection has `node.max_pending_per_connection`
    /// requests in flight already: 3004.
    #[error("agent too busy: too many requests pending on this connection")]
    TooManyPending,
}

impl Error {
    /// The Result-Code of the agent's answer.
    #[must_use]
    pub fn result_code(self) -> u32 {
        match self {
            Error::NotProxiable | Error::ForTheAgent => APPLICATION_UNSUPPORTED,
            Error::Looped => LOOP_DETECTED,
            Error::MissingRealm => MISSING_AVP,
            Error::AllBusy | Error::QueueFull | Error::TooManyPending => TOO_BUSY,
            _ => UNABLE_TO_DELIVER,
        }
    }

    /// The Failed-AVP of the agent's answer (RFC 6733 §7.5), when the
    /// defect names one.
    #[must_use]
    pub fn failed_avp(self) -> Option<Bytes> {
        (self == Error::MissingRealm).then(|| empty_avp(code::DESTINATION_REALM))
    }
}

/// What the relay does with a request after the DOIC treatment.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Send `msg` (rewritten) to `peer`, keeping `tx` with it.
    Forward {
        /// The next hop.
        peer: PeerId,
        /// Its slot, when at hand (saves the relay a table lookup).
        slot: Option<Arc<PeerSlot>>,
        /// Whether it is pinned by Destination-Host.
        pinned: bool,
        /// The request without the OC-Supported-Features it came with, when
        /// it had several (`None`: send it as received, less `cut`).
        msg: Option<Bytes>,
        /// The bytes of the client's one OC-Supported-Features, left out on
        /// the way upstream ([`Relayed::cut`]).
        cut: Option<(u32, u32)>,
        /// Transaction state for the answer.
        tx: TxState,
    },
    /// Answer with this message (throttled); nothing goes upstream.
    Answer {
        /// The answer.
        msg: Bytes,
        /// Its Result-Code or Experimental-Result-Code.
        code: u32,
    },
    /// Not for the core (no candidate, DOIC off): the relay routes as usual.
    Relay,
    /// No overload state: the relay routes as usual, keeping `tx` (the
    /// agent's features go up, the answer is looked at).
    Plain {
        /// Transaction state for the answer.
        tx: TxState,
        /// As [`Decision::Forward`]'s `cut`.
        cut: Option<(u32, u32)>,
    },
}

/// The seam to overload control: a request it treated before (a failover,
/// a retry after 3004, a chosen connection gone) is treated again for its
/// new next hop (RFC 8581 §5) before the relay routes it.
pub(crate) trait Treat {
    /// The decision for `r` on its way to a new next hop.
    fn retreat(
        &self,
        router: &Router,
        r: &Relayed,
        destination_host: Option<&str>,
        rotate: usize,
    ) -> Decision;
}

/// The relay of one agent, as a connection sees it: the agent's identity,
/// the routing table, the peers, the retry budget and the DOIC seam. A
/// handful of references, made where it is used; every method is sans-io.
///
/// A request from downstream: [`Relay::check_request`], then
/// [`Relay::route`] (or [`Relay::dispatch_to`] after the DOIC treatment
/// chose its next hop); on its upstream connection [`Relay::send_upstream`]
/// into the [`Upstream`] table; its answer back through
/// [`Upstream::handle_answer`], [`answer_fate`] and
/// [`Relay::retry_too_busy`]; no answer: [`Relay::handle_timeout`]; its peer
/// fails: [`Relay::fail_over_all`].
#[derive(Clone, Copy)]
pub(crate) struct Relay<'a> {
    /// The agent's Origin-Host and Origin-Realm.
    pub(crate) origin: (&'a str, &'a str),
    /// The realm routing table.
    pub(crate) router: &'a Router,
    /// The peers and their connections' channels.
    pub(crate) table: &'a PeerTable,
    /// The retry budget.
    pub(crate) retry: &'a RetryGate,
    /// Bytes of output an upstream connection holds, not yet taken by its
    /// peer, past which a request for that peer is answered 3004 at once
    /// instead of queued behind them (`node.upstream_backlog_bytes`).
    pub(crate) upstream_backlog: usize,
    /// Overload control, when it is on.
    pub(crate) treat: Option<&'a dyn Treat>,
}

impl std::fmt::Debug for Relay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("origin", &self.origin)
            .field("doic", &self.treat.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> Relay<'a> {
    /// Checks a request the relay scan accepted before it is routed: the P
    /// bit (§6.1.4; the agent has no local application: 3007), the loop
    /// check (§6.1.3: a Route-Record holding the agent's identity is 3005),
    /// a Destination-Host naming the agent (§6.1.4: local, 3007), and
    /// Destination-Realm (§6.1.5: missing is 5005). Reads only what the scan
    /// recorded.
    ///
    /// # Errors
    /// Why the agent answers the request itself.
    pub(crate) fn check_request<'m>(
        &self,
        head: Header,
        routing: &Routing<'m>,
    ) -> Result<&'m [u8], Error> {
        if !head.flags.is_proxiable() {
            return Err(Error::NotProxiable);
        }
        let own = self.origin.0;
        if routing::has_looped(own, routing.route_records()) {
            return Err(Error::Looped);
        }
        if routing
            .destination_host()
            .is_some_and(|h| h.eq_ignore_ascii_case(own.as_bytes()))
        {
            return Err(Error::ForTheAgent);
        }
        routing.destination_realm().ok_or(Error::MissingRealm)
    }

    /// Why a request could not be routed: every candidate eliminated by
    /// §6.1.7 (`excluded`, the peers in its Route-Records and its sender)
    /// is 3002, not 3004.
    #[must_use]
    pub(crate) fn refusal(r: &Relayed, e: RouteError, excluded: usize) -> Error {
        if r.tried.len() == excluded || e == RouteError::NoRoute {
            Error::NoRoute
        } else {
            Error::AllBusy
        }
    }

    /// The Error-Message (RFC 6733 §7.3) of the agent's 3002 (§7.1.3
    /// DIAMETER_UNABLE_TO_DELIVER) for a request to `realm` the router found
    /// no next hop for: no route at all, or the route's peers that are down
    /// and why (`no peer up for realm X (peer Y down: connection refused)`).
    #[cold]
    #[must_use]
    pub(crate) fn no_route_why(&self, realm: &[u8], application: u32) -> String {
        let realm = String::from_utf8_lossy(realm);
        let Some(peers) = self.router.route_peers(&realm, application) else {
            return format!("no route for realm {realm}");
        };
        let down = self.table.describe_down(&peers);
        if down.is_empty() {
            format!(
                "no next hop for realm {realm}: its peers are excluded (Route-Record, sender) or the Destination-Host peer is down"
            )
        } else if down.matches("; ").count() + 1 == peers.len() {
            format!("no peer up for realm {realm} ({down})")
        } else {
            format!("no usable peer for realm {realm} ({down}; the others excluded)")
        }
    }

    /// Sends `r` to the next hop the router picks, skipping `r.tried`.
    /// `destination_host` is consulted only on the first attempt. A request
    /// overload control treated before (a failover, a retry after 3004, a
    /// chosen connection gone) is treated again for its new next hop, and
    /// may be answered by the agent instead (through `r.reply`; `Ok` all the
    /// same).
    ///
    /// # Errors
    /// The request back with the reason it could not be dispatched.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    pub(crate) fn dispatch(
        &self,
        mut r: Relayed,
        destination_host: Option<&str>,
        rotate: usize,
    ) -> Result<(), (Relayed, RouteError)> {
        // A request overload control treated is treated again for its new
        // next hop (RFC 8581 §5): it may be throttled there, or sent
        // elsewhere.
        if let Some(treat) = self.treat
            && r.doic.is_some()
        {
            match treat.retreat(self.router, &r, destination_host, rotate) {
                Decision::Forward {
                    peer,
                    slot,
                    pinned,
                    msg,
                    cut,
                    tx,
                } => {
                    if let Some(m) = msg {
                        // The client's features are already out of it.
                        r.msg = m;
                        r.cut = None;
                    } else {
                        // Left out as it is written (the same bytes as before).
                        r.cut = cut;
                    }
                    // The client's features stay those first recorded.
                    if let Some(prev) = r.doic.as_mut() {
                        prev.app_id = tx.app_id;
                    }
                    return self.dispatch_to(r, (peer, slot), pinned, rotate);
                }
                Decision::Answer { msg, code } => {
                    tracing::trace!(code, "doic throttled a rerouted request");
                    r.reply.send(ToConn::Answer {
                        msg,
                        hbh: r.hbh,
                        code,
                    });
                    return Ok(());
                }
                Decision::Relay | Decision::Plain { .. } => {}
            }
        }
        self.route(r, destination_host, rotate)
    }

    /// Sends `r` to the next hop the router picks, skipping `r.tried`, as the
    /// relay does without overload control ([`Relay::dispatch`] without the
    /// second treatment). `destination_host` is consulted only on the first
    /// attempt.
    ///
    /// # Errors
    /// The request back with the reason it could not be dispatched.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    pub(crate) fn route(
        &self,
        mut r: Relayed,
        destination_host: Option<&str>,
        rotate: usize,
    ) -> Result<(), (Relayed, RouteError)> {
        let realm_bytes = r.realm.clone();
        let lossy;
        let realm = match std::str::from_utf8(&realm_bytes) {
            Ok(s) => s,
            Err(_) => {
                lossy = String::from_utf8_lossy(&realm_bytes).into_owned();
                lossy.as_str()
            }
        };
        let mut host = destination_host;
        loop {
            let choice = match self
                .router
                .choose(self.table, host, realm, r.app, &r.tried, rotate)
            {
                Ok(c) => c,
                Err(e) => return Err((r, e)),
            };
            host = None;
            let Some(slot) = self.table.get(choice.peer) else {
                return Err((r, RouteError::NoRoute));
            };
            r.pinned = choice.pinned;
            match self.deliver(&slot, r) {
                Ok(()) => return Ok(()),
                Err(back) => {
                    r = back;
                    r.tried.push(choice.peer);
                    if choice.pinned {
                        return Err((r, RouteError::NoRoute));
                    }
                }
            }
        }
    }

    /// Sends `r` to `peer`, the next hop overload control chose among the
    /// router's candidates (RFC 8581 §5: possibly a diversion), with its
    /// slot when the caller has it. When that peer cannot take it any more,
    /// the router picks another one.
    ///
    /// # Errors
    /// The request back with the reason it could not be dispatched.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    pub(crate) fn dispatch_to(
        &self,
        mut r: Relayed,
        (peer, slot): (PeerId, Option<Arc<PeerSlot>>),
        pinned: bool,
        rotate: usize,
    ) -> Result<(), (Relayed, RouteError)> {
        if let Some(slot) = slot.or_else(|| self.table.get(peer)) {
            r.pinned = pinned;
            match self.deliver(&slot, r) {
                Ok(()) => return Ok(()),
                Err(back) => r = back,
            }
        }
        if pinned {
            return Err((r, RouteError::NoRoute));
        }
        r.tried.push(peer);
        self.dispatch(r, None, rotate)
    }

    /// Hands `r` to the open connection of `slot`, counted outstanding
    /// there. When its queue is full, `r` is answered 3004 at once
    /// ([`Error::QueueFull`]) and delivered all the same: it has its answer.
    ///
    /// # Errors
    /// The request back when the peer has no open connection or it is gone.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    fn deliver(&self, slot: &PeerSlot, r: Relayed) -> Result<(), Relayed> {
        match slot.send_request(r) {
            Ok(()) => Ok(()),
            Err((r, Undelivered::Full)) => {
                self.queue_full(slot, r);
                Ok(())
            }
            Err((r, Undelivered::Gone)) => Err(r),
        }
    }

    /// [`Self::deliver`] found the queue of `slot`'s connection full.
    #[cold]
    #[inline(never)]
    fn queue_full(&self, slot: &PeerSlot, r: Relayed) {
        tracing::debug!(peer = %slot.host, cause = "request queue full", "request answered 3004");
        self.answer_locally(r, Error::QueueFull);
    }

    /// Builds the agent's own answer to `msg` with `result_code`.
    #[must_use]
    pub(crate) fn local_answer(&self, msg: &[u8], result_code: u32, why: &str) -> Bytes {
        let mut out = BytesMut::with_capacity(256);
        put_error_answer(&mut out, msg, self.origin, result_code, None, why);
        out.freeze()
    }

    /// Answers a relayed request on behalf of the agent, through its reply
    /// channel, with the Result-Code of `why` and `why` as Error-Message.
    pub(crate) fn answer_locally(&self, r: Relayed, why: Error) {
        self.answer_locally_with(r, why.result_code(), &why.to_string());
    }

    /// [`Relay::answer_locally`] with a Result-Code and Error-Message of the
    /// caller's.
    pub(crate) fn answer_locally_with(&self, r: Relayed, result_code: u32, why: &str) {
        let msg = self.local_answer(&r.msg, result_code, why);
        r.reply.send(ToConn::Answer {
            msg,
            hbh: r.hbh,
            code: result_code,
        });
    }

    /// A request routed to the connection of `peer`, whose state machines
    /// say whether it takes requests (`usable`: open, watchdog OKAY): written
    /// to `out` and recorded in `up` at `now` ([`Upstream::send`], with the
    /// agent's OC-Supported-Features `features` when given). Not usable, it
    /// goes to another peer, or is answered 3002. When `out` already holds
    /// [`Relay::upstream_backlog`] bytes the peer does not take in, `r` is answered
    /// 3004 at once ([`Error::QueueFull`], counted as a full queue): the
    /// agent is too busy for that peer.
    #[expect(
        clippy::too_many_arguments,
        reason = "the driver's state, passed by parts so that no lock or copy is added"
    )]
    pub(crate) fn send_upstream(
        &self,
        up: &mut Upstream,
        peer: Option<(PeerId, &PeerSlot)>,
        usable: bool,
        (now, rotate): (Instant, &mut usize),
        r: Relayed,
        out: &mut BytesMut,
        features: Option<&[u8]>,
    ) {
        let Some((id, slot)) = peer else {
            return self.answer_locally(r, Error::PeerNotOpen);
        };
        if !usable {
            *rotate = rotate.wrapping_add(1);
            return self.reroute(Some((id, slot)), r, *rotate, Error::PeerNotAvailable);
        }
        if out.len() >= self.upstream_backlog {
            done(Some(slot));
            slot.stats.queue_full.fetch_add(1, Ordering::Relaxed);
            return self.queue_full(slot, r);
        }
        slot.stats.requests_out.fetch_add(1, Ordering::Relaxed);
        let (_, old) = up.send(now, r, out, features);
        if let Some(old) = old {
            slot.outstanding.fetch_sub(1, Ordering::Relaxed);
            self.answer_locally(old, Error::HopByHopReused);
        }
    }

    /// A request queued for the connection of `from` that will not go
    /// there (not usable, or the connection ended): to another peer, or
    /// answered 3002 with `why`.
    pub(crate) fn reroute(
        &self,
        from: Option<(PeerId, &PeerSlot)>,
        mut r: Relayed,
        rotate: usize,
        why: Error,
    ) {
        if let Some((id, slot)) = from {
            slot.outstanding.fetch_sub(1, Ordering::Relaxed);
            r.tried.push(id);
        }
        if let Err((r, _)) = self.dispatch(r, None, rotate) {
            self.answer_locally(r, why);
        }
    }

    /// Requests of `up` whose upstream answer is overdue at `now` get the
    /// agent's 3002 (the request timeout); returns how many.
    pub(crate) fn handle_timeout(
        &self,
        up: &mut Upstream,
        slot: Option<&PeerSlot>,
        now: Instant,
    ) -> usize {
        let mut expired = 0;
        for r in up.handle_timeout(now) {
            done(slot);
            if let Some(s) = slot {
                // What the peer's protection senses (docs/protect.md).
                s.sensed
                    .record(up.timeout(), doic::protect::Outcome::Timeout, false, r.app);
            }
            self.answer_locally(r, Error::Timeout);
            expired += 1;
        }
        expired
    }

    /// Every request pending in `up` is answered 3002 with `why`.
    pub(crate) fn answer_all(&self, up: &mut Upstream, slot: Option<&PeerSlot>, why: Error) {
        for r in up.drain() {
            done(slot);
            self.answer_locally(r, why);
        }
    }

    /// The peer `from` of `up` went SUSPECT or DOWN (RFC 3539 Failover()):
    /// each of its pending requests moves ([`Relay::fail_over`]); without a
    /// peer, each is answered 3002.
    pub(crate) fn fail_over_all(
        &self,
        up: &mut Upstream,
        from: Option<(PeerId, &PeerSlot)>,
        now: Instant,
        rotate: &mut usize,
    ) {
        let Some((id, slot)) = from else {
            return self.answer_all(up, None, Error::ConnectionLost);
        };
        for r in up.drain() {
            done(Some(slot));
            *rotate = rotate.wrapping_add(1);
            self.fail_over(id, slot, r, (now, *rotate));
        }
    }

    /// A request pending at `from` must move (its peer went SUSPECT or DOWN,
    /// RFC 3539 Failover()): pinned requests are answered 3002, others are
    /// re-sent to an alternate peer with the T flag (§5.5.4), or answered
    /// 3002 when there is none. Never refused by the retry budget, but
    /// counted in it ([`budget::RetryBudget::note_failover`]).
    pub(crate) fn fail_over(
        &self,
        from: PeerId,
        slot: &PeerSlot,
        mut r: Relayed,
        (now, rotate): (Instant, usize),
    ) {
        if r.pinned {
            return self.answer_locally(r, Error::DestinationUnavailable);
        }
        slot.stats.failovers.fetch_add(1, Ordering::Relaxed);
        self.retry.note_failover(now);
        if !r.tried.contains(&from) {
            r.tried.push(from);
        }
        r.retransmit = true;
        if let Err((r, _)) = self.dispatch(r, None, rotate) {
            self.answer_locally(r, Error::NoAlternate);
        }
    }

    /// A realm-routed request `r` was answered 3004 TOO_BUSY by `from` at
    /// `now` (RFC 7683 §8): it goes to the next candidate when the retry
    /// budget allows it, and never to a peer that answered 3004 lately. With
    /// DOIC, [`Relay::dispatch`] treats the retry again for its new next hop
    /// (RFC 8581 §5): an OCS in force there abates retries as it abates
    /// every request.
    ///
    /// # Errors
    /// The request back when it is not retried: its 3004 goes to the client
    /// as it came.
    #[expect(
        clippy::result_large_err,
        reason = "the request comes back by value on the cold path; boxing would allocate on it"
    )]
    pub(crate) fn retry_too_busy(
        &self,
        mut r: Relayed,
        from: PeerId,
        (now, rotate): (Instant, usize),
    ) -> Result<(), Relayed> {
        let gate = self.retry;
        r.tried.push(from);
        if gate.try_retry(now).is_err() {
            gate.stats.refused_budget.fetch_add(1, Ordering::Relaxed);
            tracing::trace!(hop_by_hop = r.hbh, "retry budget spent, 3004 forwarded");
            return Err(r);
        }
        let excluded = gate.overloaded_into(now, &mut r.tried);
        match self.dispatch(r, None, rotate) {
            Ok(()) => {
                gate.stats.too_busy.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err((r, _)) => {
                gate.refund(now);
                let why = if excluded > 0 {
                    &gate.stats.refused_overloaded
                } else {
                    &gate.stats.refused_no_alternate
                };
                why.fetch_add(1, Ordering::Relaxed);
                Err(r)
            }
        }
    }
}

/// A request left the table of `slot`'s connection.
fn done(slot: Option<&PeerSlot>) {
    if let Some(slot) = slot {
        slot.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What to do with an answer received from upstream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AnswerFate {
    /// Pass it on to the downstream peer.
    Forward,
    /// Try the next candidate (the upstream peer answered 3004 TOO_BUSY and
    /// the request is not pinned).
    Retry,
}

/// Decides an answer's fate from its Result-Code, Experimental-Result-Code
/// and whether its request is pinned. 5198 is always forwarded.
#[must_use]
pub(crate) fn answer_fate(
    result_code: Option<u32>,
    experimental: Option<u32>,
    pinned: bool,
) -> AnswerFate {
    if experimental == Some(OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY) || pinned {
        return AnswerFate::Forward;
    }
    if result_code == Some(TOO_BUSY) {
        AnswerFate::Retry
    } else {
        AnswerFate::Forward
    }
}

#[cfg(test)]
mod tests;

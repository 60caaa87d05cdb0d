//! The tokio edge of one transport connection (RFC 6733 §2.1 over TCP): it
//! owns the socket and drives the sans-io [`Fsm`], [`Watchdog`] and
//! `relay::Relay`: frames messages, hands requests and answers to the relay, and
//! owns the hop-by-hop table of the requests it sent upstream
//! (`relay::pending::Upstream`, §6.1.8 / §6.2), which the relay fills and empties.
//!
//! | module | what it implements |
//! | --- | --- |
//! | `exchange` | the wait for CER (§5.6.1), the capabilities exchange (§5.3), the FSM's transmissions |
//! | `relaying` | requests and answers of an open connection through the `relay::Relay` (§6.1, §6.2) |
//! | `lifecycle` | the open connection's watchdog (RFC 3539 §3.4, RFC 6733 §5.5), timers and 3002 timeouts, DPR and drain (§5.4), failover (§5.5.4) |
//! | `close` | [`CloseReason`] (side and cause), the end of a connection and the close of §5.4 ([`CLOSE_LINGER`]) |
//!
//! Reads and writes are batched: one read takes up to [`READ_CHUNK`] bytes
//! and every complete message in it is handled; everything to send in one
//! wake-up is appended to one buffer and written with as few `write`
//! syscalls as the socket allows.
//!
//! Until the capabilities exchange completes (§5.3) a connection costs
//! little: reads take [`PRE_OPEN_READ`] bytes (a buffer grows past that only
//! to hold a longer message being received, up to [`PRE_OPEN_MAX_MESSAGE`]),
//! the output buffer starts at [`PRE_OPEN_WRITE`]; both grow to their full
//! size when the peer is open. An accepted connection has neither
//! until its first bytes arrive, and holds a [`crate::admission`] ticket
//! until the exchange is over.
//!
//! A connection ends the way §5.4 has the receiver of a DPA end it, whatever
//! the reason: everything queued is written, then a FIN, then the input is
//! read to the peer's end of stream ([`CLOSE_LINGER`]), so the kernel never
//! resets the connection over answers still queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::Interest;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::net::ConnCtx;
use crate::net::link::{ConnLink, Inbox, link};
use crate::net::stream::Stream;
use crate::peer::table::{LinkRef, PeerSlot, PeerStats, Relayed, ToConn};
use crate::relay::{self, pending::Upstream};
use crate::routing::PeerId;
use crate::routing::live::Held;
use diameter::codec::Capabilities;
use diameter::codec::answer::put_base;
use diameter::codec::header::{HEADER_LEN, Header, finish, frame_len_max, set_hop_by_hop};
use diameter::dictionary::cmd;
use diameter::peer::fsm::{Fsm, Role, State};
use diameter::peer::watchdog::{Delivery, Watchdog};

/// The longest message the agent accepts once a peer is open (its policy;
/// the codec's own limit is the 24-bit field, 16 MiB). Longer is a framing
/// error (5015).
pub const MAX_ACCEPTED_MESSAGE_LEN: usize = 1 << 20;
/// Bytes asked of the kernel per read once the peer is open.
pub const READ_CHUNK: usize = 256 * 1024;
/// Bytes asked of the kernel per read before the capabilities exchange.
pub const PRE_OPEN_READ: usize = 4 * 1024;
/// The longest message accepted before the capabilities exchange: a CER is
/// a few hundred bytes, rarely a few KiB. Longer is a framing error (5015),
/// so a connection not yet open never holds more than this.
pub const PRE_OPEN_MAX_MESSAGE: usize = 64 * 1024;
/// Messages taken off a queue per wake-up, at most (the batch's buffer is
/// kept per connection, so this also bounds what it holds after a burst).
const BATCH: usize = 256;
/// Output buffer of an open connection.
const WRITE_CAPACITY: usize = 64 * 1024;
/// Output buffer before the capabilities exchange (a CER or CEA).
pub const PRE_OPEN_WRITE: usize = 1024;
/// A peer that lets this much output pile up is dropped.
const MAX_BACKLOG: usize = 64 << 20;
/// How long a closing connection may take to flush what is queued,
/// half-close and read to the peer's end of stream ([`Conn::linger`]).
pub const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Bytes asked of the kernel per read while a closing connection reads to
/// the end.
const DISCARD_CHUNK: usize = 16 * 1024;

mod close;
mod exchange;
mod lifecycle;
mod relaying;

pub(crate) use exchange::{TlsListener, accept};
use exchange::{evicted, note_evicted};

pub use close::{Cause, CloseReason, Side};

/// An accepted connection's place among those waiting for CER, and what
/// wakes its task when it is evicted ([`crate::admission`]).
pub(crate) struct Waiting {
    pub(crate) ticket: crate::admission::Ticket,
    pub(crate) evict: Arc<Notify>,
}

/// The state of one connection task.
struct Conn {
    ctx: Arc<ConnCtx>,
    id: u64,
    stream: Stream,
    fsm: Fsm,
    peer: Option<(PeerId, Arc<PeerSlot>)>,
    watchdog: Option<Watchdog>,
    /// This connection's queues as others reach them (`net::link`).
    tx: Arc<ConnLink>,
    rx: Inbox,
    /// What one wake-up takes off each queue (kept for its capacity).
    batch: (Vec<Relayed>, Vec<ToConn>),
    inbuf: BytesMut,
    /// When the last read returned bytes, on the overload control's clock
    /// (0 without overload control): the requests in it carry it upstream
    /// ([`Relayed::read_ns`]).
    read_ns: u64,
    /// Requests relayed upstream on this connection, for sampling their
    /// age in the agent (one clock read in `relaying::AGE_SAMPLE`).
    relayed: u32,
    out: BytesMut,
    /// Requests relayed to this connection's peer, by Hop-by-Hop Identifier.
    upstream: Upstream,
    /// Requests from this peer relayed upstream, not yet answered back.
    inflight_down: usize,
    rotate: usize,
    closing_since: Option<Instant>,
    flushed_pending: bool,
    close: Option<CloseReason>,
    /// Header of the CER being answered.
    cer_head: Option<Header>,
    /// Header of the DPR being answered.
    last_dpr: Option<Header>,
    /// Set until the capabilities exchange is over (inbound connections).
    waiting: Option<Waiting>,
    /// Rate limit of the malformed-answer warning.
    malformed_warn: relaying::WarnLimit,
    /// Rate limit of the warning that a request was answered 3002.
    undeliverable_warn: relaying::WarnLimit,
    /// The routing table this connection relays with, brought up to date
    /// at each wake-up ([`crate::routing::live`]).
    routes: Held,
    /// Its peer left the configuration ([`ToConn::Retire`]): what is
    /// pending at the end of the drain fails over instead of 3002.
    retired: bool,
    /// The client's last OC-Supported-Features as the DOIC idle path read
    /// them ([`crate::overload::Offers`]).
    offers: crate::overload::Offers,
}

/// Runs one connection to the end. `expect` is the peer an initiator
/// dialled; `waiting` the admission of an accepted one; `since` when the
/// connection was made (its CER timeout counts from then).
pub(crate) async fn run(
    ctx: Arc<ConnCtx>,
    stream: Stream,
    role: Role,
    expect: Option<PeerId>,
    waiting: Option<Waiting>,
    since: Instant,
) {
    let accepted = since;
    let _ = stream.tcp().set_nodelay(true);
    let local_ip = stream
        .tcp()
        .local_addr()
        .map_or(std::net::IpAddr::from([127, 0, 0, 1]), |a| a.ip());
    let remote = stream.peer_addr().ok();
    if let Some(remote) = remote {
        ctx.kernel.note_open(remote);
    }
    let id = ctx.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = link(
        ctx.config.node.upstream_queue,
        ctx.config.node.max_pending_per_connection,
        ctx.io.clone(),
    );
    let local = ctx.config.capabilities(local_ip);
    let timeout = ctx.config.cer_timeout();
    let fsm = Fsm::with_exchange_timeout(accepted.into_std(), role, local, timeout);
    let peer = expect.and_then(|p| ctx.relay.table.get(p).map(|s| (p, s)));
    if role == Role::Initiator
        && let Some((_, slot)) = &peer
        && !slot.begin_connecting(id, tx.clone() as LinkRef)
    {
        return;
    }
    let span = tracing::debug_span!("conn", id, remote = %crate::net::OrNone(remote), ?role);
    let request_timeout = ctx.config.request_timeout();
    let ctx_routes = ctx.relay.routes.held();
    let mut c = Conn {
        ctx,
        id,
        stream,
        fsm,
        peer,
        watchdog: None,
        tx,
        rx,
        batch: (Vec::new(), Vec::new()),
        inbuf: BytesMut::with_capacity(PRE_OPEN_READ),
        read_ns: 0,
        relayed: 0,
        out: BytesMut::with_capacity(PRE_OPEN_WRITE),
        upstream: Upstream::new(
            (id as u32).wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995,
            request_timeout,
        ),
        inflight_down: 0,
        rotate: id as usize,
        closing_since: None,
        flushed_pending: false,
        close: None,
        cer_head: None,
        last_dpr: None,
        waiting,
        malformed_warn: relaying::WarnLimit::default(),
        undeliverable_warn: relaying::WarnLimit::default(),
        routes: ctx_routes,
        retired: false,
        offers: crate::overload::Offers::default(),
    };
    async move {
        c.pump_fsm();
        c.main_loop().await;
        c.finish().await;
        if let Some(remote) = remote {
            c.ctx.kernel.note_closed(remote);
        }
    }
    .instrument(span)
    .await;
}

impl Conn {
    fn origin(&self) -> (&str, &str) {
        (
            &self.ctx.relay.origin_host,
            &self.ctx.config.node.origin_realm,
        )
    }

    /// Writes this node's DWR (`answer_to` None, with a fresh Hop-by-Hop
    /// Identifier) or its DWA to the DWR with header `answer_to` (RFC 6733
    /// §5.5.1, §5.5.2).
    fn put_watchdog(&mut self, answer_to: Option<Header>) {
        let hbh = if answer_to.is_none() {
            self.alloc_hbh()
        } else {
            0
        };
        let origin = (
            self.ctx.relay.origin_host.as_str(),
            self.ctx.config.node.origin_realm.as_str(),
        );
        put_base(
            &mut self.out,
            cmd::DEVICE_WATCHDOG,
            origin,
            answer_to,
            hbh,
            None,
        );
    }

    async fn main_loop(&mut self) {
        let mut shutdown = self.ctx.stop.receiver();
        if *shutdown.borrow() {
            self.stop();
        }
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // One timer, reset only when the state machines' deadline moves.
        let mut armed = self.next_deadline();
        let sleep = tokio::time::sleep_until(armed);
        tokio::pin!(sleep);
        while self.close.is_none() {
            self.flush_some();
            if self.out.len() > MAX_BACKLOG {
                self.close_by_peer(Cause::PeerDoesNotRead);
                break;
            }
            let interest = if self.out.is_empty() {
                Interest::READABLE
            } else {
                Interest::READABLE | Interest::WRITABLE
            };
            let deadline = self.next_deadline();
            if deadline != armed {
                armed = deadline;
                sleep.as_mut().reset(armed);
            }
            tokio::select! {
                ready = self.stream.ready(interest) => match ready {
                    Ok(r) => {
                        if r.is_readable() {
                            self.ctx.relay.routes.refresh(&mut self.routes);
                            self.read_and_handle();
                        }
                    }
                    Err(_) => self.close_by_peer(Cause::SocketError),
                },
                // What is queued, in one go: one write for all.
                // The Conn holds senders of both, so neither ends with 0.
                _ = self.rx.msgs.recv_many(&mut self.batch.1, BATCH) => {
                    self.take_batch(|c| &mut c.batch.1, Self::handle_to_conn);
                }
                _ = self.rx.requests.recv_many(&mut self.batch.0, BATCH) => {
                    self.take_batch(|c| &mut c.batch.0, Self::send_upstream);
                }
                () = &mut sleep => {
                    self.handle_timers();
                    // Re-arm even if the deadline did not move.
                    armed = self.next_deadline();
                    sleep.as_mut().reset(armed);
                }
                _ = tick.tick() => self.handle_timers(),
                () = evicted(self.waiting.as_ref()) => {
                    note_evicted();
                    self.close_internal(Cause::Evicted);
                }
                // Resolves at once when the stop was announced while this task
                // was busy elsewhere (the receiver has not seen that version).
                changed = shutdown.changed(), if self.closing_since.is_none() => {
                    if changed.is_err() || *shutdown.borrow_and_update() {
                        self.stop();
                    }
                }
            }
            self.pump_fsm();
        }
    }

    /// Hands each message of the batch `slot` (kept for its capacity) to
    /// `handle`.
    fn take_batch<T>(&mut self, slot: fn(&mut Self) -> &mut Vec<T>, handle: fn(&mut Self, T)) {
        self.ctx.relay.routes.refresh(&mut self.routes);
        let mut batch = std::mem::take(slot(self));
        for m in batch.drain(..) {
            handle(self, m);
        }
        *slot(self) = batch;
    }

    fn next_deadline(&self) -> Instant {
        let far = Instant::now() + Duration::from_secs(3600);
        [
            self.fsm.poll_timeout(),
            self.watchdog.as_ref().and_then(Watchdog::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .map(Instant::from_std)
        .min()
        .unwrap_or(far)
    }

    /// Writes as much of `out` as the socket takes without blocking.
    fn flush_some(&mut self) {
        match self.stream.flush_some() {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => {
                self.close_by_peer(Cause::WriteError);
                return;
            }
        }
        while !self.out.is_empty() {
            match self.stream.try_write(&self.out) {
                Ok(0) => {
                    self.close_by_peer(Cause::PeerClosed);
                    return;
                }
                Ok(n) => {
                    self.out.advance(n);
                    let io = &self.ctx.io;
                    io.writes.fetch_add(1, Ordering::Relaxed);
                    io.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.close_by_peer(Cause::WriteError);
                    return;
                }
            }
        }
    }

    fn read_and_handle(&mut self) {
        let (chunk, max_len) = match self.fsm.state() {
            State::WaitCer | State::WaitCea => (PRE_OPEN_READ, PRE_OPEN_MAX_MESSAGE),
            State::Open | State::Closing | State::Closed => (READ_CHUNK, MAX_ACCEPTED_MESSAGE_LEN),
        };
        // Messages handed on keep their part of the buffer alive, so a new
        // buffer is taken only when the spare room runs low (not per read).
        if self.inbuf.capacity() - self.inbuf.len() < chunk / 8 {
            self.inbuf.reserve(chunk);
        }
        match self.stream.try_read_buf(&mut self.inbuf) {
            Ok(0) => {
                self.close_by_peer(Cause::EndOfStream);
                return;
            }
            Ok(n) => {
                if let Some((_, slot)) = &self.peer {
                    slot.stats.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => {
                self.close_by_peer(Cause::ReadError);
                return;
            }
        }
        if let Some(ov) = &self.ctx.relay.overload {
            self.read_ns = ov.now_ns();
        }
        self.ctx.io.reads.fetch_add(1, Ordering::Relaxed);
        let mut messages = 0u64;
        loop {
            match frame_len_max(&self.inbuf, max_len) {
                Ok(Some(n)) => {
                    let msg = self.inbuf.split_to(n).freeze();
                    messages += 1;
                    self.handle_message(msg);
                    if self.close.is_some() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    // The stream cannot be framed any more (§3): answer what
                    // can be answered, then close.
                    if self.inbuf.len() >= HEADER_LEN {
                        let head = Header::read(&self.inbuf);
                        if head.is_request() {
                            let req = self.inbuf.split_to(HEADER_LEN);
                            let why = e.to_string();
                            self.answer_error(&req, e.result_code(), None, &why);
                        }
                    }
                    self.close_by_peer(Cause::FramingError);
                    break;
                }
            }
        }
        self.ctx
            .io
            .messages_read
            .fetch_add(messages, Ordering::Relaxed);
    }

    fn handle_message(&mut self, msg: Bytes) {
        let head = Header::read(&msg);
        tracing::trace!(
            hop_by_hop = head.hop_by_hop,
            end_to_end = head.end_to_end,
            cmd_code = head.command_code,
            app_id = head.application_id,
            "message"
        );
        let now = Instant::now().into_std();
        match self.fsm.state() {
            State::WaitCer | State::WaitCea => return self.handle_exchange(msg, head),
            State::Closed => {
                // Behind a DPR in the same read, say: the connection is
                // going, but the request still gets its one answer.
                if head.is_request() {
                    self.refuse(&msg, relay::Error::ConnectionClosing);
                }
                return;
            }
            State::Open | State::Closing => {}
        }
        let is_dwa = !head.is_request() && head.command_code == cmd::DEVICE_WATCHDOG;
        // RFC 3539 REOPEN throws received traffic away; the agent instead
        // answers every request it receives (it never drops one) and applies
        // REOPEN to what it sends: no requests are routed to the peer until
        // three DWAs came back.
        if let Some(w) = self.watchdog.as_mut() {
            let _: Delivery = w.handle_receive(now, is_dwa);
        }
        self.pump_watchdog();
        if head.is_request() {
            match head.command_code {
                cmd::DEVICE_WATCHDOG => self.put_watchdog(Some(head)),
                cmd::DISCONNECT_PEER => {
                    self.last_dpr = Some(head);
                    // Answers to the peer's own requests still on their way
                    // come first; each is bounded by the request timeout.
                    let bound = self.ctx.config.request_timeout() + Duration::from_secs(1);
                    self.fsm.handle_dpr(now, self.inflight_down > 0, bound);
                }
                cmd::CAPABILITIES_EXCHANGE => {
                    // A CER on an open connection: answered 5012, kept open.
                    self.cer_head = Some(head);
                    self.fsm.handle_cer(Capabilities::default(), true, false);
                }
                _ => {
                    self.fsm.handle_request();
                    self.relay_request(msg, head);
                }
            }
        } else {
            match head.command_code {
                cmd::DEVICE_WATCHDOG => self.count(|st| &st.dwa_received),
                cmd::CAPABILITIES_EXCHANGE => {}
                cmd::DISCONNECT_PEER => {
                    self.count(|st| &st.dpa_received);
                    self.fsm.handle_dpa();
                    self.check_drained();
                }
                _ => self.relay_answer(msg, head),
            }
        }
    }
}

impl Conn {
    fn count(&self, which: impl Fn(&PeerStats) -> &AtomicU64) {
        self.count_n(which, 1);
    }

    fn count_n(&self, which: impl Fn(&PeerStats) -> &AtomicU64, n: u64) {
        if let Some((_, slot)) = &self.peer {
            which(&slot.stats).fetch_add(n, Ordering::Relaxed);
        }
    }

    fn peer_host(&self) -> String {
        self.peer
            .as_ref()
            .map(|(_, s)| s.host.clone())
            .unwrap_or_default()
    }

    /// This connection's socket as later connections of its peer see it
    /// (the reconnect race, [`crate::peer::table`]).
    fn liveness(&self) -> Option<Arc<dyn crate::peer::table::Liveness>> {
        super::liveness::SocketLiveness::of(self.stream.tcp())
            .map(|l| Arc::new(l) as Arc<dyn crate::peer::table::Liveness>)
    }

    fn alloc_hbh(&mut self) -> u32 {
        self.upstream.alloc_hbh()
    }

    /// [`ToConn::AnswerWith`]: the answer with the agent's encoded
    /// OC-Supported-Features `features` appended as it is written. Out of
    /// line, away from the path of every other answer.
    #[inline(never)]
    fn write_answer_with(
        &mut self,
        msg: &[u8],
        features: doic::AnswerFeatures,
        hbh: u32,
        code: u32,
    ) {
        let start = self.out.len();
        self.out.extend_from_slice(msg);
        if let Some(ov) = &self.ctx.relay.overload {
            self.out.extend_from_slice(ov.answer_features_avp(features));
        }
        finish(&mut self.out, start);
        set_hop_by_hop(&mut self.out[start..], hbh);
        self.inflight_down = self.inflight_down.saturating_sub(1);
        if let Some((_, slot)) = &self.peer {
            slot.stats.answers_out.add(code);
        }
        self.check_drained();
    }

    fn check_drained(&mut self) {
        if self.inflight_down == 0 {
            self.fsm.handle_answered();
        }
        if self.closing_since.is_some() && self.upstream.is_empty() && self.inflight_down == 0 {
            self.fsm.handle_drained();
        }
    }

    fn handle_to_conn(&mut self, m: ToConn) {
        match m {
            ToConn::Answer { msg, hbh, code } => {
                let start = self.out.len();
                self.out.extend_from_slice(&msg);
                set_hop_by_hop(&mut self.out[start..], hbh);
                self.inflight_down = self.inflight_down.saturating_sub(1);
                if let Some((_, slot)) = &self.peer {
                    slot.stats.answers_out.add(code);
                }
                self.check_drained();
            }
            ToConn::AnswerWith {
                msg,
                features,
                hbh,
                code,
            } => self.write_answer_with(&msg, features, hbh, code),
            ToConn::Close => self.close_internal(Cause::ElectionLost),
            ToConn::Replaced => self.close_internal(Cause::Replaced),
            ToConn::Retire => self.retire(),
        }
    }
}

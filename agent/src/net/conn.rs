//! The tokio edge of one transport connection (RFC 6733 §2.1 over TCP): it
//! owns the socket and drives the sans-io [`Fsm`] and [`Watchdog`], frames
//! messages, relays requests and answers, and keeps the table of requests
//! it sent upstream (new Hop-by-Hop Identifiers, §6.1.8 / §6.2).
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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;
use tracing::Instrument;

use crate::agent::Shared;
use crate::peer::table::{PeerSlot, PeerStats, Relayed, ToConn, state};
use crate::relay;
use crate::routing::{PeerId, PeerView};
use diameter::codec::Capabilities;
use diameter::codec::answer::{put_base, put_capabilities};
use diameter::codec::header::{HEADER_LEN, Header, finish, frame_len_max, set_hop_by_hop};
use diameter::dictionary::cmd;
use diameter::peer::capx::{self, CerVerdict, put_refused_cea};
use diameter::peer::fsm::{DisconnectCause, Event, Fsm, Role, State, Transmit};
use diameter::peer::watchdog::{Delivery, Watchdog, WatchdogAction, WatchdogState};

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

mod relaying;

/// A request this connection relayed to its peer, waiting for the answer.
struct Pending {
    r: Relayed,
    deadline: Instant,
}

/// An accepted connection's place among those waiting for CER, and what
/// wakes its task when it is evicted ([`crate::admission`]).
pub(crate) struct Waiting {
    pub(crate) ticket: crate::admission::Ticket,
    pub(crate) evict: Arc<Notify>,
}

/// The state of one connection task.
struct Conn {
    shared: Arc<Shared>,
    id: u64,
    stream: TcpStream,
    fsm: Fsm,
    peer: Option<(PeerId, Arc<PeerSlot>)>,
    watchdog: Option<Watchdog>,
    tx: UnboundedSender<ToConn>,
    rx: UnboundedReceiver<ToConn>,
    inbuf: BytesMut,
    out: BytesMut,
    pending: HashMap<u32, Pending>,
    next_hbh: u32,
    /// Requests from this peer relayed upstream, not yet answered back.
    inflight_down: usize,
    rotate: usize,
    closing_since: Option<Instant>,
    flushed_pending: bool,
    close: Option<&'static str>,
    /// Header of the CER being answered.
    cer_head: Option<Header>,
    /// Header of the DPR being answered.
    last_dpr: Option<Header>,
    /// Set until the capabilities exchange is over (inbound connections).
    waiting: Option<Waiting>,
    /// Rate limit of the malformed-answer warning.
    malformed_warn: relaying::WarnLimit,
}

/// Runs one connection to the end. `expect` is the peer an initiator
/// dialled; `waiting` the admission of an accepted one.
pub(crate) async fn run(
    shared: Arc<Shared>,
    stream: TcpStream,
    role: Role,
    expect: Option<PeerId>,
    waiting: Option<Waiting>,
) {
    let accepted = Instant::now();
    if let Some(w) = &waiting
        && !first_bytes(&shared, &stream, w, accepted + shared.config.cer_timeout()).await
    {
        shared.admission.release(&w.ticket);
        return;
    }
    let _ = stream.set_nodelay(true);
    let local_ip = stream
        .local_addr()
        .map_or(std::net::IpAddr::from([127, 0, 0, 1]), |a| a.ip());
    let remote = stream.peer_addr().ok();
    if let Some(remote) = remote {
        shared.kernel.note_open(remote);
    }
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = unbounded_channel();
    let local = shared.config.capabilities(local_ip);
    let timeout = shared.config.cer_timeout();
    let fsm = Fsm::with_exchange_timeout(accepted.into_std(), role, local, timeout);
    let peer = expect.and_then(|p| shared.table.get(p).map(|s| (p, s)));
    if role == Role::Initiator
        && let Some((_, slot)) = &peer
        && !slot.begin_connecting(id, tx.clone())
    {
        return;
    }
    let span = tracing::debug_span!("conn", id, ?remote, ?role);
    let mut c = Conn {
        shared,
        id,
        stream,
        fsm,
        peer,
        watchdog: None,
        tx,
        rx,
        inbuf: BytesMut::with_capacity(PRE_OPEN_READ),
        out: BytesMut::with_capacity(PRE_OPEN_WRITE),
        pending: HashMap::new(),
        next_hbh: (id as u32).wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995,
        inflight_down: 0,
        rotate: id as usize,
        closing_since: None,
        flushed_pending: false,
        close: None,
        cer_head: None,
        last_dpr: None,
        waiting,
        malformed_warn: relaying::WarnLimit::default(),
    };
    async move {
        c.pump_fsm();
        c.main_loop().await;
        c.finish().await;
        if let Some(remote) = remote {
            c.shared.kernel.note_closed(remote);
        }
    }
    .instrument(span)
    .await;
}

impl Conn {
    fn origin(&self) -> (&str, &str) {
        (
            &self.shared.config.node.origin_host,
            &self.shared.config.node.origin_realm,
        )
    }

    async fn main_loop(&mut self) {
        let mut shutdown = self.shared.shutdown.clone();
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
                self.close = Some("peer does not read");
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
                            self.read_and_handle();
                        }
                    }
                    Err(_) => self.close = Some("socket error"),
                },
                msg = self.rx.recv() => {
                    if let Some(m) = msg {
                        self.handle_to_conn(m);
                        // Drain what else is queued: one write for all.
                        for _ in 0..4096 {
                            match self.rx.try_recv() {
                                Ok(m) => self.handle_to_conn(m),
                                Err(_) => break,
                            }
                        }
                    }
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
                    self.close = Some("evicted before capabilities exchange");
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
        while !self.out.is_empty() {
            match self.stream.try_write(&self.out) {
                Ok(0) => {
                    self.close = Some("peer closed");
                    return;
                }
                Ok(n) => {
                    self.out.advance(n);
                    let io = &self.shared.io;
                    io.writes.fetch_add(1, Ordering::Relaxed);
                    io.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.close = Some("write error");
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
                self.close = Some("peer closed the connection");
                return;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => {
                self.close = Some("read error");
                return;
            }
        }
        self.shared.io.reads.fetch_add(1, Ordering::Relaxed);
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
                    self.close = Some("framing error");
                    break;
                }
            }
        }
        self.shared
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
                    self.answer_error(&msg, relay::UNABLE_TO_DELIVER, None, "connection closing");
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
                cmd::DEVICE_WATCHDOG => {
                    let o = self.origin();
                    let (h, r) = (o.0.to_owned(), o.1.to_owned());
                    put_base(
                        &mut self.out,
                        cmd::DEVICE_WATCHDOG,
                        (&h, &r),
                        Some(head),
                        0,
                        None,
                    );
                }
                cmd::DISCONNECT_PEER => {
                    self.last_dpr = Some(head);
                    // Answers to the peer's own requests still on their way
                    // come first; each is bounded by the request timeout.
                    let bound = self.shared.config.request_timeout() + Duration::from_secs(1);
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

    /// CER/CEA before the connection is open.
    fn handle_exchange(&mut self, msg: Bytes, head: Header) {
        if head.command_code != cmd::CAPABILITIES_EXCHANGE
            || head.is_request() != (self.fsm.state() == State::WaitCer)
        {
            self.close = Some("message before capabilities exchange");
            return;
        }
        // RFC 6733 §5.3.1/§5.3.2 grammar, strictly: one Origin-Host, one
        // Origin-Realm, ... (5009/5005 with Failed-AVP), then close.
        let (caps, rc) = match capx::read_exchange(&msg) {
            Ok(x) => x,
            Err(e) => {
                let remote = self.stream.peer_addr().ok();
                if head.is_request() {
                    tracing::info!(?remote, result_code = e.result_code(), cause = %e, "malformed CER refused, closing");
                    self.cer_head = Some(head);
                    self.fsm.handle_bad_cer(e);
                } else {
                    tracing::warn!(peer = %self.peer_host(), ?remote, cause = %e, "malformed CEA, closing; redial after Tc");
                    self.fsm.handle_bad_cea();
                }
                return;
            }
        };
        if head.is_request() {
            self.handle_cer(head, caps);
        } else {
            let expected = self.peer.as_ref().map(|(_, s)| s.host.clone());
            if expected.is_some_and(|h| !h.eq_ignore_ascii_case(&caps.origin_host)) {
                self.close = Some("CEA from an unexpected Origin-Host");
                return;
            }
            self.fsm.handle_cea(caps, rc.unwrap_or(0));
            if self.fsm.state() == State::Open {
                let local_host = self.shared.config.node.origin_host.clone();
                let live = self.liveness();
                let opened = self.peer.as_ref().is_some_and(|(_, slot)| {
                    slot.try_open(self.id, self.tx.clone(), false, &local_host, live)
                });
                if opened && let Some((_, slot)) = &self.peer {
                    slot.note_remote(self.id, self.stream.peer_addr().ok());
                }
                if !opened {
                    self.close = Some("another connection to this peer is open");
                }
            }
        }
        self.cer_head = Some(head);
    }

    fn handle_cer(&mut self, head: Header, caps: Capabilities) {
        let cfg = &self.shared.config;
        let host = caps.origin_host.clone();
        let configured = self.shared.table.by_host(&host);
        let id = match configured {
            Some(id) => Some(id),
            None if cfg.accept.matches(&host) => self
                .shared
                .table
                .lookup_or_add(&host, Some(&caps.origin_realm)),
            None => None,
        };
        let known = id.is_some();
        let mut election_lost = false;
        if let Some(id) = id
            && matches!(
                capx::judge_cer(self.fsm.local(), &caps, true),
                CerVerdict::Accept(_)
            )
        {
            let local_host = cfg.node.origin_host.clone();
            let live = self.liveness();
            match self.shared.table.get(id) {
                Some(slot) if slot.try_open(self.id, self.tx.clone(), true, &local_host, live) => {
                    slot.note_remote(self.id, self.stream.peer_addr().ok());
                    self.peer = Some((id, slot));
                }
                _ => election_lost = true,
            }
        }
        if !known {
            tracing::info!(origin_host = %host, "unknown peer refused");
        }
        self.cer_head = Some(head);
        self.fsm.handle_cer(caps, known, election_lost);
    }

    /// Drains the FSM's transmissions and events.
    fn pump_fsm(&mut self) {
        while let Some(t) = self.fsm.poll_transmit() {
            let local = self.fsm.local().clone();
            let o = (local.origin_host.as_str(), local.origin_realm.as_str());
            match t {
                Transmit::Cer => {
                    let hbh = self.alloc_hbh();
                    put_capabilities(&mut self.out, &local, None, hbh);
                }
                Transmit::Cea { result_code } => {
                    if let Some(h) = self.cer_head {
                        put_capabilities(&mut self.out, &local, Some((h, result_code)), 0);
                    }
                }
                Transmit::CeaRefused(e) => {
                    if let Some(h) = self.cer_head {
                        put_refused_cea(&mut self.out, &local, &h, &e);
                    }
                }
                Transmit::Dpr(cause) => {
                    self.count(|st| &st.dpr_sent);
                    let hbh = self.alloc_hbh();
                    put_base(
                        &mut self.out,
                        cmd::DISCONNECT_PEER,
                        o,
                        None,
                        hbh,
                        Some(cause as u32),
                    );
                }
                Transmit::Dpa => {
                    if let Some(h) = self.last_dpr {
                        put_base(&mut self.out, cmd::DISCONNECT_PEER, o, Some(h), 0, None);
                    }
                }
            }
        }
        while let Some(e) = self.fsm.poll_event() {
            match e {
                Event::Open {
                    common_applications,
                } => {
                    tracing::info!(peer = %self.peer_host(), ?common_applications, "peer open");
                    self.on_open();
                }
                Event::PeerDisconnecting => {
                    if let Some((_, s)) = &self.peer {
                        s.set_state(state::CLOSING);
                    }
                }
                Event::Close(why) => {
                    self.close.get_or_insert(why);
                }
            }
        }
        if self.fsm.state() != State::WaitCer {
            self.leave_waiting();
        }
    }

    /// The capabilities exchange is over (or the connection is): give the
    /// admission ticket back.
    fn leave_waiting(&mut self) {
        if let Some(w) = self.waiting.take() {
            self.shared.admission.release(&w.ticket);
        }
    }
}

/// Resolves when the waiting connection is evicted; never without one.
async fn evicted(waiting: Option<&Waiting>) {
    match waiting {
        Some(w) => w.evict.notified().await,
        None => std::future::pending().await,
    }
}

/// Until its peer sends something, an accepted connection costs only its
/// socket and this task: no buffers, no channel. Waits for the first bytes
/// (true), or the CER timeout (RFC 6733 §5.6.1: the logic that handles
/// incoming connections "SHOULD close and discard the connection if ... an
/// implementation-defined timeout occurs prior to receipt of CER"), an
/// eviction, the agent's stop (false).
async fn first_bytes(shared: &Shared, stream: &TcpStream, w: &Waiting, deadline: Instant) -> bool {
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        r = stream.readable() => return r.is_ok(),
        () = tokio::time::sleep_until(deadline) => cer_timed_out(shared),
        () = evicted(Some(w)) => note_evicted(),
        () = crate::agent::stopped(&mut shutdown) => {}
    }
    false
}

/// A connection waited longer than the CER timeout.
fn cer_timed_out(shared: &Shared) {
    let stats = &shared.admission.stats;
    stats.cer_timeouts.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(
        cause = "no CER in time",
        timeout = ?shared.config.cer_timeout(),
        "closing connection"
    );
}

/// A connection waiting for CER was evicted (the listener counted it).
fn note_evicted() {
    tracing::debug!(
        cause = "a lighter source needed the place",
        "closing connection waiting for CER"
    );
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
        super::liveness::SocketLiveness::of(&self.stream)
            .map(|l| Arc::new(l) as Arc<dyn crate::peer::table::Liveness>)
    }

    fn alloc_hbh(&mut self) -> u32 {
        self.next_hbh = self.next_hbh.wrapping_add(1);
        self.next_hbh
    }

    fn on_open(&mut self) {
        // Full-size buffers from now on.
        self.inbuf.reserve(READ_CHUNK);
        self.out.reserve(WRITE_CAPACITY);
        let Some((_, slot)) = &self.peer else {
            return;
        };
        let tw = self.shared.config.tw();
        let seed = self.id ^ 0x2545_f491_4f6c_dd1d;
        let mut w = slot.take_watchdog(|| Watchdog::new(tw, seed));
        w.handle_connection_up(Instant::now().into_std());
        self.watchdog = Some(w);
        self.pump_watchdog();
        if *self.shared.shutdown.borrow() {
            self.stop();
        }
    }

    /// Publishes the watchdog state and performs its actions.
    fn pump_watchdog(&mut self) {
        let Some(w) = self.watchdog.as_mut() else {
            return;
        };
        let mut actions = Vec::new();
        while let Some(a) = w.poll_action() {
            actions.push(a);
        }
        let ws = w.state();
        if let Some((_, slot)) = &self.peer
            && self.fsm.state() == State::Open
        {
            slot.set_state(if ws == WatchdogState::Okay {
                state::OKAY
            } else {
                state::SUSPECT
            });
        }
        for a in actions {
            match a {
                WatchdogAction::SendDwr => {
                    self.count(|st| &st.dwr_sent);
                    let hbh = self.alloc_hbh();
                    let o = self.origin();
                    let (h, r) = (o.0.to_owned(), o.1.to_owned());
                    put_base(
                        &mut self.out,
                        cmd::DEVICE_WATCHDOG,
                        (&h, &r),
                        None,
                        hbh,
                        None,
                    );
                }
                WatchdogAction::Failover => {
                    tracing::info!(peer = %self.peer_host(), "peer suspect: failing over pending requests");
                    self.fail_over_all();
                }
                WatchdogAction::CloseConnection => {
                    self.close.get_or_insert("watchdog: peer down");
                }
                WatchdogAction::Failback | WatchdogAction::AttemptOpen => {}
            }
        }
    }

    /// The agent is stopping: DPR, then drain (RFC 6733 §5.4).
    fn stop(&mut self) {
        if self.closing_since.is_some() {
            return;
        }
        let now = Instant::now();
        self.closing_since = Some(now);
        if let Some((_, slot)) = &self.peer
            && self.fsm.state() == State::Open
        {
            slot.set_state(state::CLOSING);
        }
        self.fsm.handle_stop(
            now.into_std(),
            DisconnectCause::Rebooting,
            self.shared.config.drain(),
        );
        self.check_drained();
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
        if let Some(ov) = &self.shared.overload {
            self.out.extend_from_slice(ov.answer_features_avp(features));
        }
        finish(&mut self.out, start);
        set_hop_by_hop(&mut self.out[start..], hbh);
        self.inflight_down = self.inflight_down.saturating_sub(1);
        if let Some((_, slot)) = &self.peer {
            PeerSlot::count(&slot.stats.answers_out, code);
        }
        self.check_drained();
    }

    fn check_drained(&mut self) {
        if self.inflight_down == 0 {
            self.fsm.handle_answered();
        }
        if self.closing_since.is_some() && self.pending.is_empty() && self.inflight_down == 0 {
            self.fsm.handle_drained();
        }
    }

    fn handle_timers(&mut self) {
        let now = Instant::now();
        let waiting_cer = self.fsm.state() == State::WaitCer;
        self.fsm.handle_timeout(now.into_std());
        if waiting_cer && self.fsm.state() == State::Closed {
            cer_timed_out(&self.shared);
        }
        if let Some(w) = self.watchdog.as_mut() {
            w.handle_timeout(now.into_std());
        }
        self.pump_watchdog();
        // Requests whose upstream answer is overdue get the agent's 3002.
        if !self.pending.is_empty() {
            let late: Vec<u32> = self
                .pending
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(h, _)| *h)
                .collect();
            for h in late {
                if let Some(p) = self.pending.remove(&h) {
                    self.upstream_done();
                    relay::answer_locally(
                        &self.shared,
                        p.r,
                        relay::UNABLE_TO_DELIVER,
                        "upstream answer timed out",
                    );
                }
            }
        }
        // Near the end of the drain, pending requests are answered locally
        // so that downstream peers still receive them before closing.
        if let Some(since) = self.closing_since
            && !self.flushed_pending
            && now >= since + self.shared.config.drain().mul_f64(0.8)
        {
            self.flushed_pending = true;
            self.answer_all_pending("agent is shutting down");
        }
        self.check_drained();
    }

    fn upstream_done(&self) {
        if let Some((_, slot)) = &self.peer {
            slot.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn answer_all_pending(&mut self, why: &str) {
        for (_, p) in std::mem::take(&mut self.pending) {
            self.upstream_done();
            relay::answer_locally(&self.shared, p.r, relay::UNABLE_TO_DELIVER, why);
        }
    }

    fn fail_over_all(&mut self) {
        let Some((id, slot)) = self.peer.clone() else {
            return self.answer_all_pending("peer connection lost");
        };
        for (_, p) in std::mem::take(&mut self.pending) {
            self.upstream_done();
            self.rotate = self.rotate.wrapping_add(1);
            let now = Instant::now().into_std();
            relay::fail_over(&self.shared, id, &slot, p.r, (now, self.rotate));
        }
    }

    fn handle_to_conn(&mut self, m: ToConn) {
        match m {
            ToConn::Request(r) => self.send_upstream(r),
            ToConn::Answer { msg, hbh, code } => {
                let start = self.out.len();
                self.out.extend_from_slice(&msg);
                set_hop_by_hop(&mut self.out[start..], hbh);
                self.inflight_down = self.inflight_down.saturating_sub(1);
                if let Some((_, slot)) = &self.peer {
                    PeerSlot::count(&slot.stats.answers_out, code);
                }
                self.check_drained();
            }
            ToConn::AnswerWith {
                msg,
                features,
                hbh,
                code,
            } => self.write_answer_with(&msg, features, hbh, code),
            ToConn::Close => {
                self.close.get_or_insert("election lost");
            }
            ToConn::Replaced => {
                self.close
                    .get_or_insert("replaced by the peer's new connection");
            }
        }
    }

    /// Ends the connection: flush, fail over what is pending, release the
    /// peer slot, give the watchdog back.
    async fn finish(&mut self) {
        tracing::debug!(peer = %self.peer_host(), why = self.close.unwrap_or("done"), "connection closing");
        self.leave_waiting();
        let now = Instant::now();
        if let Some(w) = self.watchdog.as_mut() {
            w.handle_connection_down(now.into_std());
            while w.poll_action().is_some() {}
        }
        if let Some((_, slot)) = &self.peer {
            slot.release(self.id);
            if let Some(w) = self.watchdog.take() {
                slot.put_watchdog(w);
            }
        }
        if self.closing_since.is_some() {
            self.answer_all_pending("agent is shutting down");
        } else {
            self.fail_over_all();
        }
        // Queued requests for this connection go elsewhere too.
        self.rx.close();
        while let Ok(m) = self.rx.try_recv() {
            match m {
                ToConn::Request(mut r) => {
                    if let Some((id, slot)) = &self.peer {
                        slot.outstanding.fetch_sub(1, Ordering::Relaxed);
                        r.tried.push(*id);
                    }
                    if let Err((r, _)) = relay::dispatch(&self.shared, r, None, self.rotate) {
                        relay::answer_locally(
                            &self.shared,
                            r,
                            relay::UNABLE_TO_DELIVER,
                            "peer connection lost",
                        );
                    }
                }
                other => self.handle_to_conn(other),
            }
        }
        self.linger().await;
    }

    /// Closes the transport without losing what is queued (RFC 6733 §5.4:
    /// the receiver of the DPA initiates the disconnect): everything in
    /// `out` is written, then a FIN (half-close), then the agent reads to
    /// the peer's end of stream, all within [`CLOSE_LINGER`]. Closing a
    /// socket with unread input makes the kernel send a reset instead and
    /// throw away the answers queued in front of it. Requests read after
    /// the FIN (or left behind the message that ended the connection)
    /// cannot be answered any more: they are counted
    /// (`doic_peer_requests_discarded_total`) and logged.
    async fn linger(&mut self) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let deadline = Instant::now() + CLOSE_LINGER;
        let mut discarded = 0u64;
        let out = std::mem::take(&mut self.out);
        let (stream, inbuf) = (&mut self.stream, &mut self.inbuf);
        let ended = tokio::time::timeout_at(deadline, async {
            stream.write_all(&out).await?;
            stream.shutdown().await?;
            let mut framed = true;
            loop {
                while framed {
                    match frame_len_max(inbuf, MAX_ACCEPTED_MESSAGE_LEN) {
                        Ok(Some(n)) => {
                            discarded += u64::from(Header::read(inbuf).is_request());
                            inbuf.advance(n);
                        }
                        Ok(None) => break,
                        Err(_) => framed = false,
                    }
                }
                if !framed {
                    inbuf.clear();
                }
                // Only counted, not kept: a small buffer does.
                if inbuf.capacity() - inbuf.len() < DISCARD_CHUNK / 4 {
                    inbuf.reserve(DISCARD_CHUNK);
                }
                if stream.read_buf(inbuf).await? == 0 {
                    return Ok::<(), std::io::Error>(());
                }
            }
        })
        .await;
        let peer = self.peer_host();
        if discarded > 0 {
            self.count_n(|st| &st.requests_discarded, discarded);
            tracing::warn!(
                peer = %peer,
                discarded,
                cause = "requests left unanswered at close",
                "requests discarded at close; the peer must fail them over"
            );
        }
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(peer = %peer, cause = %e, "connection ended with an error")
            }
            Err(_) => tracing::debug!(
                peer = %peer,
                linger = ?CLOSE_LINGER,
                "peer did not close in time; closing"
            ),
        }
    }
}

//! The connection before and around its relaying (RFC 6733 §5.3, §5.6):
//! the wait for an accepted connection's first bytes, its TLS handshake on
//! a TLS listener (§13.1) and its CER within the CER timeout (§5.6.1,
//! [`crate::admission`]), the check of a TLS peer's certificate names
//! against the Origin-Host of its CER or CEA (§13), the capabilities exchange and
//! its §5.6.4 election in the peer table, and the transmissions of the peer
//! state machine (CER, CEA, DPR, DPA).

use std::os::fd::AsRawFd as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::time::Instant;

use std::sync::Arc;

use super::{Cause, Conn, Waiting};
use crate::net::ConnCtx;
use crate::net::stream::Stream;
use crate::peer::table::state;
use crate::routing::PeerView;
use diameter::codec::Capabilities;
use diameter::codec::answer::{put_base, put_capabilities};
use diameter::codec::header::Header;
use diameter::dictionary::cmd;
use diameter::peer::capx::{self, CerVerdict, put_refused_cea};
use diameter::peer::fsm::{Event, Role, State, Transmit};

impl Conn {
    /// CER/CEA before the connection is open.
    pub(super) fn handle_exchange(&mut self, msg: Bytes, head: Header) {
        if head.command_code != cmd::CAPABILITIES_EXCHANGE
            || head.is_request() != (self.fsm.state() == State::WaitCer)
        {
            self.close_by_peer(Cause::BeforeExchange);
            return;
        }
        // RFC 6733 §5.3.1/§5.3.2 grammar, strictly: one Origin-Host, one
        // Origin-Realm, ... (5009/5005 with Failed-AVP), then close.
        let (caps, rc) = match capx::read_exchange(&msg) {
            Ok(x) => x,
            Err(e) => {
                let remote = self.stream.peer_addr().ok();
                if head.is_request() {
                    tracing::info!(remote = %crate::net::OrNone(remote), result_code = e.result_code(), cause = %e, "malformed CER refused, closing");
                    self.cer_head = Some(head);
                    self.fsm.handle_bad_cer(e);
                } else {
                    tracing::warn!(peer = %self.peer_host(), remote = %crate::net::OrNone(remote), cause = %e, "malformed CEA, closing; redial after Tc");
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
                self.close_by_peer(Cause::UnexpectedCea);
                return;
            }
            if let Some(names) = self.misnamed(&caps.origin_host) {
                tracing::warn!(
                    peer = %self.peer_host(),
                    origin_host = %caps.origin_host,
                    %names,
                    "peer certificate does not name the CEA's Origin-Host, closing; redial after Tc"
                );
                self.close_by_peer(Cause::CertificateName);
                return;
            }
            self.fsm.handle_cea(caps, rc.unwrap_or(0));
            if self.fsm.state() == State::Open {
                let local_host = self.ctx.relay.origin_host.clone();
                let live = self.liveness();
                let opened = self.peer.as_ref().is_some_and(|(_, slot)| {
                    slot.try_open(self.id, self.tx.clone(), false, &local_host, live)
                });
                if opened && let Some((_, slot)) = &self.peer {
                    slot.note_remote(
                        self.id,
                        self.stream.peer_addr().ok(),
                        crate::overload::current_worker(),
                    );
                    slot.note_socket(self.id, self.stream.tcp().as_raw_fd());
                }
                if !opened {
                    self.close_by_peer(Cause::AnotherOpen);
                }
            }
        }
        self.cer_head = Some(head);
    }

    /// The names of the peer's TLS certificate when they do not name
    /// `origin_host` (RFC 6733 §13: the identity the certificate proves is
    /// the one the peer claims in its CER/CEA); `None` when they do, or
    /// without a certificate (TCP, or a TLS listener without `ca`).
    fn misnamed(&self, origin_host: &str) -> Option<crate::tls::CertNames> {
        self.stream
            .peer_names()
            .filter(|names| !names.matches(origin_host))
    }

    fn handle_cer(&mut self, head: Header, caps: Capabilities) {
        if let Some(names) = self.misnamed(&caps.origin_host) {
            let remote = self.stream.peer_addr().ok();
            tracing::warn!(
                origin_host = %caps.origin_host,
                %names,
                remote = %crate::net::OrNone(remote),
                "peer certificate does not name the CER's Origin-Host: refused with 3010 DIAMETER_UNKNOWN_PEER, closing"
            );
            self.cer_head = Some(head);
            self.fsm.handle_cer(caps, false, false);
            return;
        }
        let cfg = &self.ctx.config;
        let host = caps.origin_host.clone();
        let configured = self.ctx.relay.table.by_host(&host);
        let id = match configured {
            Some(id) => Some(id),
            None if self.ctx.accepts(&host) => self
                .ctx
                .relay
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
            match self.ctx.relay.table.get(id) {
                Some(slot) if slot.try_open(self.id, self.tx.clone(), true, &local_host, live) => {
                    slot.note_remote(
                        self.id,
                        self.stream.peer_addr().ok(),
                        crate::overload::current_worker(),
                    );
                    slot.note_socket(self.id, self.stream.tcp().as_raw_fd());
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
    pub(super) fn pump_fsm(&mut self) {
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
                    tracing::info!(peer = %self.peer_host(), ?common_applications, "peer up");
                    self.on_open();
                }
                Event::PeerDisconnecting => {
                    if let Some((_, s)) = &self.peer {
                        s.set_state(state::CLOSING);
                    }
                }
                Event::Close(why) => {
                    // After the agent's own DPR the close is the agent's.
                    if self.closing_since.is_some() {
                        self.close_internal(Cause::Fsm(why));
                    } else {
                        self.close_by_peer(Cause::Fsm(why));
                    }
                }
            }
        }
        if self.fsm.state() != State::WaitCer {
            self.leave_waiting();
        }
    }

    /// The capabilities exchange is over (or the connection is): give the
    /// admission ticket back.
    pub(super) fn leave_waiting(&mut self) {
        if let Some(w) = self.waiting.take() {
            self.ctx.admission.release(&w.ticket);
        }
    }
}

/// A TLS listener's material and the rate limit of its warnings about
/// refused handshakes (one line per [`super::relaying::WarnLimit`] interval,
/// counting the others: a scanner cannot flood the log).
#[derive(Debug)]
pub(crate) struct TlsListener {
    pub(crate) material: Arc<crate::tls::ServerTls>,
    refused: std::sync::Mutex<super::relaying::WarnLimit>,
}

impl TlsListener {
    pub(crate) fn new(material: Arc<crate::tls::ServerTls>) -> Self {
        Self {
            material,
            refused: std::sync::Mutex::default(),
        }
    }

    /// A handshake from `remote` failed (cold path).
    #[cold]
    fn note_refused(&self, remote: Option<std::net::SocketAddr>, cause: &dyn std::fmt::Display) {
        let allowed = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .allow(Instant::now());
        if let Some(suppressed) = allowed {
            tracing::warn!(remote = %crate::net::OrNone(remote), %cause, suppressed, "TLS client refused, closing");
        } else {
            tracing::debug!(remote = %crate::net::OrNone(remote), %cause, "TLS client refused, closing");
        }
    }
}

/// Runs an accepted connection to the end: waits for its first bytes, runs
/// the TLS handshake of a TLS listener (`tls`; RFC 6733 §13.1: at once on
/// connect), both within the CER timeout, then the connection.
pub(crate) async fn accept(
    ctx: Arc<ConnCtx>,
    tcp: TcpStream,
    waiting: Waiting,
    tls: Option<Arc<TlsListener>>,
) {
    let accepted = Instant::now();
    let deadline = accepted + ctx.config.cer_timeout();
    if !first_bytes(&ctx, &tcp, &waiting, deadline).await {
        ctx.admission.release(&waiting.ticket);
        return;
    }
    let stream = match tls {
        None => Stream::Tcp(tcp),
        Some(tls) => {
            let remote = tcp.peer_addr().ok();
            let limit = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                done = Stream::accept(tcp, &tls.material, limit) => match done {
                    Ok(s) => s,
                    Err(e) => {
                        tls.note_refused(remote, &e);
                        ctx.admission.release(&waiting.ticket);
                        return;
                    }
                },
                () = evicted(Some(&waiting)) => {
                    note_evicted();
                    ctx.admission.release(&waiting.ticket);
                    return;
                }
            }
        }
    };
    super::run(ctx, stream, Role::Responder, None, Some(waiting), accepted).await;
}

/// Resolves when the waiting connection is evicted; never without one.
pub(super) async fn evicted(waiting: Option<&Waiting>) {
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
pub(super) async fn first_bytes(
    ctx: &ConnCtx,
    stream: &TcpStream,
    w: &Waiting,
    deadline: Instant,
) -> bool {
    tokio::select! {
        r = stream.readable() => return r.is_ok(),
        () = tokio::time::sleep_until(deadline) => cer_timed_out(ctx),
        () = evicted(Some(w)) => note_evicted(),
        () = ctx.stop.stopped() => {}
    }
    false
}

/// A connection waited longer than the CER timeout.
pub(super) fn cer_timed_out(ctx: &ConnCtx) {
    let stats = &ctx.admission.stats;
    stats.cer_timeouts.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(
        cause = "no CER in time",
        timeout = ?ctx.config.cer_timeout(),
        "closing connection"
    );
}

/// A connection waiting for CER was evicted (the listener counted it).
pub(super) fn note_evicted() {
    tracing::debug!(
        cause = "a lighter source needed the place",
        "closing connection waiting for CER"
    );
}

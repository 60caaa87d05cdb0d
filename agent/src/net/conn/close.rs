//! Why and how a connection ends. [`CloseReason`] names the side that
//! caused the end (pingora's `ErrorSource`) and the cause; the close itself
//! is the one RFC 6733 §5.4 gives the receiver of a DPA, whatever the
//! reason ([`Conn::linger`]), after the connection's end is settled
//! ([`Conn::finish`]): the peer-down line, what is pending failed over
//! (§5.5.4) or answered, the peer slot released, the watchdog given back.

use std::fmt;

use bytes::Buf;
use tokio::time::Instant;

use super::{CLOSE_LINGER, Conn, DISCARD_CHUNK, MAX_ACCEPTED_MESSAGE_LEN};
use crate::relay;
use diameter::codec::header::{Header, frame_len_max};
use diameter::peer::fsm::Role;

/// Which side of the agent a close comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The peer of a connection it dialled to the agent (clients do).
    Downstream,
    /// The peer of a connection the agent dialled (`[[peer]] connect`).
    Upstream,
    /// The agent itself: its stop, an election, a newer connection.
    Internal,
}

impl Side {
    /// The side of the peer of a connection in `role`.
    #[must_use]
    pub fn of_peer(role: Role) -> Self {
        match role {
            Role::Responder => Side::Downstream,
            Role::Initiator => Side::Upstream,
        }
    }

    /// Its name in logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Downstream => "downstream",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What ended a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Cause {
    /// Its output backlog passed the limit.
    #[error("peer does not read")]
    PeerDoesNotRead,
    /// The socket reported an error while waiting.
    #[error("socket error")]
    SocketError,
    /// A write returned 0.
    #[error("peer closed")]
    PeerClosed,
    /// A write failed.
    #[error("write error")]
    WriteError,
    /// A read returned end of stream.
    #[error("peer closed the connection")]
    EndOfStream,
    /// A read failed.
    #[error("read error")]
    ReadError,
    /// The stream cannot be framed any more (RFC 6733 §3).
    #[error("framing error")]
    FramingError,
    /// A lighter source needed its place among connections waiting for CER.
    #[error("evicted before capabilities exchange")]
    Evicted,
    /// Anything but CER/CEA before the capabilities exchange (§5.3).
    #[error("message before capabilities exchange")]
    BeforeExchange,
    /// The CEA names another peer than the one dialled.
    #[error("CEA from an unexpected Origin-Host")]
    UnexpectedCea,
    /// The peer's TLS certificate does not name the CEA's Origin-Host (§13).
    #[error("certificate does not name the Origin-Host")]
    CertificateName,
    /// Another connection to the peer is open and alive (§5.6.4).
    #[error("another connection to this peer is open")]
    AnotherOpen,
    /// The watchdog declared the peer DOWN (RFC 3539).
    #[error("watchdog: peer down")]
    WatchdogDown,
    /// The connection lost the §5.6.4 election.
    #[error("election lost")]
    ElectionLost,
    /// A new connection of the same peer replaced this ended one.
    #[error("replaced by the peer's new connection")]
    Replaced,
    /// The peer state machine closed it (§5.6), with its reason.
    #[error("{0}")]
    Fsm(&'static str),
}

/// Why a connection ends: the side that caused it and the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseReason {
    /// Who caused it.
    pub side: Side,
    /// What happened.
    pub cause: Cause,
}

impl CloseReason {
    /// A close caused by the agent itself.
    #[must_use]
    pub fn internal(cause: Cause) -> Self {
        Self {
            side: Side::Internal,
            cause,
        }
    }
}

impl Conn {
    /// A close caused by this connection's peer (or its transport).
    pub(super) fn by_peer(&self, cause: Cause) -> CloseReason {
        CloseReason {
            side: Side::of_peer(self.fsm.role()),
            cause,
        }
    }

    /// Ends the connection for `cause` on the peer's side, unless it ends
    /// already.
    pub(super) fn close_by_peer(&mut self, cause: Cause) {
        let why = self.by_peer(cause);
        self.close.get_or_insert(why);
    }

    /// Ends the connection for `cause` on the agent's side, unless it ends
    /// already.
    pub(super) fn close_internal(&mut self, cause: Cause) {
        self.close.get_or_insert(CloseReason::internal(cause));
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
    pub(super) async fn linger(&mut self) {
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

impl Conn {
    /// An open connection (it has a watchdog) of a peer ends: one INFO line
    /// naming the peer and the cause, and the cause kept for the agent's
    /// 3002 Error-Message (a dialled one that never opened: the cause
    /// kept). A connection replaced by its peer's new one or
    /// losing the §5.6.4 election leaves the peer up.
    #[cold]
    pub(super) fn log_peer_down(&self) {
        let Some((_, slot)) = &self.peer else {
            return;
        };
        if self.watchdog.is_none() {
            // A dialled connection that never opened (its CEA refused, its
            // certificate not naming the peer): the cause is the peer's
            // last error.
            if let Some(c) = self.close {
                slot.note_down(&c.cause);
            }
            return;
        }
        let (side, cause) = self
            .close
            .map_or((Side::Internal, Cause::Fsm("done")), |c| (c.side, c.cause));
        if matches!(cause, Cause::Replaced | Cause::ElectionLost) {
            return;
        }
        slot.note_down(&cause);
        tracing::info!(peer = %slot.host, %side, %cause, "peer down");
    }

    /// Ends the connection: flush, fail over what is pending, release the
    /// peer slot, give the watchdog back.
    pub(super) async fn finish(&mut self) {
        match self.close {
            Some(why) => tracing::debug!(
                peer = %self.peer_host(),
                side = %why.side,
                cause = %why.cause,
                "connection closing"
            ),
            None => tracing::debug!(peer = %self.peer_host(), cause = "done", "connection closing"),
        }
        self.leave_waiting();
        self.log_peer_down();
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
            self.leave_pending();
        } else {
            self.fail_over_all();
        }
        // Queued requests for this connection go elsewhere too (once the
        // queue is closed, none can be queued), queued answers are written.
        self.rx.requests.close();
        while let Ok(r) = self.rx.requests.try_recv() {
            let from = self.peer.as_ref().map(|(id, s)| (*id, &**s));
            self.ctx.relay.relay(self.routes.router()).reroute(
                from,
                r,
                self.rotate,
                relay::Error::ConnectionLost,
            );
        }
        self.rx.msgs.close();
        while let Ok(m) = self.rx.msgs.try_recv() {
            self.handle_to_conn(m);
        }
        self.linger().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_side_of_a_peer_follows_who_dialled() {
        assert_eq!(Side::of_peer(Role::Responder), Side::Downstream);
        assert_eq!(Side::of_peer(Role::Initiator), Side::Upstream);
        assert_eq!(
            CloseReason::internal(Cause::ElectionLost).side,
            Side::Internal
        );
        assert_eq!(Side::Internal.to_string(), "internal");
        assert_eq!(Cause::Fsm("peer sent DPR").to_string(), "peer sent DPR");
        assert_eq!(Cause::WatchdogDown.to_string(), "watchdog: peer down");
    }
}

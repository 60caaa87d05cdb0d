//! The hop-by-hop table of one upstream connection (RFC 6733 §6.1.8,
//! §6.2.2): every request relayed to the connection's peer is written with
//! a fresh Hop-by-Hop Identifier, a Route-Record naming the downstream peer
//! (§6.1.9) and the T flag when it is a retransmission (§5.5.4), and waits
//! here, with its deadline, for the answer that carries that identifier.
//!
//! Sans-io: time is an argument. Each entry leaves exactly once, by its
//! answer ([`Upstream::handle_answer`]), its deadline
//! ([`Upstream::handle_timeout`]), or a drain ([`Upstream::drain`]: failover,
//! shutdown); whoever takes it out owes the request its one answer
//! ([`super::Relay`] gives it).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::peer::table::{PeerStats, Relayed};
use diameter::codec::forward::{put_relayed_request, put_relayed_request_cut};
use diameter::codec::header::finish;

/// A request relayed upstream, waiting for its answer.
#[derive(Debug)]
struct Pending {
    r: Relayed,
    deadline: Instant,
}

/// The requests one connection relayed to its peer, by the Hop-by-Hop
/// Identifier they went up with.
///
/// Call [`Upstream::send`] for each request routed to the peer,
/// [`Upstream::handle_answer`] for each answer it sends, and
/// [`Upstream::handle_timeout`] periodically; [`Upstream::drain`] when the
/// requests must move.
#[derive(Debug)]
pub(crate) struct Upstream {
    pending: HashMap<u32, Pending>,
    next_hbh: u32,
    timeout: Duration,
}

impl Upstream {
    /// An empty table whose identifiers follow `seed`, for requests
    /// answered 3002 after `timeout` (`request_timeout_seconds`).
    #[must_use]
    pub(crate) fn new(seed: u32, timeout: Duration) -> Self {
        Self {
            pending: HashMap::new(),
            next_hbh: seed,
            timeout,
        }
    }

    /// A fresh Hop-by-Hop Identifier (also for the connection's own
    /// requests: CER, DWR, DPR).
    pub(crate) fn alloc_hbh(&mut self) -> u32 {
        self.next_hbh = self.next_hbh.wrapping_add(1);
        self.next_hbh
    }

    /// How long a request waits for its answer.
    #[must_use]
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// True when no request waits for its answer.
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Appends `r` to `out` as it goes to the peer at `now`: its bytes
    /// (without the client's OC-Supported-Features, `r.cut`), a Route-Record
    /// naming the downstream peer (§6.1.9), `features` (the agent's
    /// OC-Supported-Features, RFC 7683 §5.1.3) when given, a fresh
    /// Hop-by-Hop Identifier and the T flag when `r.retransmit`. Returns the
    /// identifier and the request it displaced, if one still used it (2^32
    /// identifiers later: long overdue, answered 3002 by the caller).
    #[inline]
    pub(crate) fn send(
        &mut self,
        now: Instant,
        r: Relayed,
        out: &mut BytesMut,
        features: Option<&[u8]>,
    ) -> (u32, Option<Relayed>) {
        let hbh = self.alloc_hbh();
        let start = out.len();
        match r.cut {
            Some((a, b)) => put_relayed_request_cut(
                out,
                &r.msg,
                (a as usize, b as usize),
                &r.from,
                hbh,
                r.retransmit,
            ),
            None => put_relayed_request(out, &r.msg, &r.from, hbh, r.retransmit),
        }
        if let Some(avp) = features {
            out.extend_from_slice(avp);
            finish(out, start);
        }
        let deadline = now + self.timeout;
        let old = self.pending.insert(hbh, Pending { r, deadline });
        (hbh, old.map(|p| p.r))
    }

    /// The request an answer with Hop-by-Hop Identifier `hbh` belongs to,
    /// and when it was sent.
    /// An answer that matches none (late after the 3002 of its timeout,
    /// from a peer whose requests failed over, or never asked for) is
    /// dropped: counted in `stats.answers_unmatched`.
    #[inline]
    pub(crate) fn handle_answer(
        &mut self,
        hbh: u32,
        stats: &PeerStats,
    ) -> Option<(Relayed, Instant)> {
        let p = self.pending.remove(&hbh);
        if p.is_none() {
            stats.answers_unmatched.fetch_add(1, Ordering::Relaxed);
            tracing::trace!(hop_by_hop = hbh, "answer to no pending request");
        }
        p.map(|p| (p.r, p.deadline - self.timeout))
    }

    /// The requests whose deadline passed at `now`, out of the table (each
    /// owes a 3002).
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Vec<Relayed> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let late: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(h, _)| *h)
            .collect();
        late.into_iter()
            .filter_map(|h| self.pending.remove(&h).map(|p| p.r))
            .collect()
    }

    /// Every pending request, out of the table (failover or shutdown).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Relayed> + use<> {
        std::mem::take(&mut self.pending).into_values().map(|p| p.r)
    }
}

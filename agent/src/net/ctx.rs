//! What the tasks of the tokio edge are given: [`ConnCtx`] for a
//! connection (and the listener and dialler that start one), the socket
//! call counters they keep ([`IoStats`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::admission::Admission;
use crate::config::{Accept, Config};
use crate::overload::Overload;
use crate::peer::table::{PeerTable, Relayed};
use crate::relay::budget::RetryGate;
use crate::relay::{Decision, Relay, Treat};
use crate::routing::Router;
use crate::routing::live::LiveRoutes;
use crate::telemetry::Kernel;
use crate::workers::Stop;

/// Socket calls and what they carried, over every connection: reads and
/// writes are batched, so under load one call carries many messages.
#[derive(Debug, Default)]
pub struct IoStats {
    /// `read` calls that returned data.
    pub reads: AtomicU64,
    /// Whole messages those reads completed.
    pub messages_read: AtomicU64,
    /// `write` calls that wrote data.
    pub writes: AtomicU64,
    /// Bytes those writes carried.
    pub bytes_written: AtomicU64,
    /// Answers or notices that found a connection's answer queue full
    /// (sized so that this cannot happen, `net::link`): queued all the
    /// same by a task that waits for room.
    pub answer_queue_full: AtomicU64,
    /// Requests and answers queued from one worker onto a connection on
    /// another (`net::link`): each a wake-up of the other thread.
    pub handoffs: AtomicU64,
}

/// What relaying uses across connections, one per agent: the agent's
/// identity (its own answers), the peer table, the routing table, overload
/// control and the retry budget. [`RelayCtx::relay`] gives the sans-io
/// [`Relay`] over them.
#[derive(Debug)]
pub struct RelayCtx {
    /// The agent's Origin-Host.
    pub(crate) origin_host: String,
    /// The agent's Origin-Realm.
    pub(crate) origin_realm: String,
    /// The peer table.
    pub(crate) table: Arc<PeerTable>,
    /// The routing table, replaced by a reload; each connection relays
    /// with the one it holds ([`LiveRoutes`]).
    pub(crate) routes: Arc<LiveRoutes>,
    /// DOIC state shared by the workers; `None` when overload control is off.
    pub(crate) overload: Option<Arc<Overload>>,
    /// The retry budget of 3004 retries and failovers (`[retry]`).
    pub(crate) retry: Arc<RetryGate>,
    /// `node.upstream_backlog_bytes` ([`Relay::upstream_backlog`]).
    pub(crate) upstream_backlog: usize,
}

impl RelayCtx {
    /// The relay as the connections drive it, routing with `router` (the
    /// connection's [`crate::routing::live::Held`] table).
    pub(crate) fn relay<'a>(&'a self, router: &'a Router) -> Relay<'a> {
        Relay {
            origin: (&self.origin_host, &self.origin_realm),
            router,
            table: &self.table,
            retry: &self.retry,
            upstream_backlog: self.upstream_backlog,
            treat: self.overload.is_some().then_some(self as &dyn Treat),
        }
    }

    /// What overload control's treatment reads of the relay, routing with
    /// `router`.
    pub(crate) fn doic_route<'a>(&'a self, router: &'a Router) -> crate::overload::Route<'a> {
        crate::overload::Route {
            router,
            table: &self.table,
            origin: (&self.origin_host, &self.origin_realm),
        }
    }
}

/// The relay's seam to overload control (RFC 8581 §5): a request treated
/// before is treated again for its new next hop.
impl Treat for RelayCtx {
    fn retreat(
        &self,
        router: &Router,
        r: &Relayed,
        dest_host: Option<&str>,
        rotate: usize,
    ) -> Decision {
        match &self.overload {
            Some(ov) => {
                crate::overload::retreat(&self.doic_route(router), ov, r, dest_host, rotate)
            }
            None => Decision::Relay,
        }
    }
}

/// The handles a connection uses, one per agent behind an `Arc`: its
/// configuration (identity, timers), the relay's shared parts, the CER
/// admission, the I/O counters, the kernel telemetry's connection events
/// and the stop signal.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    /// The configuration.
    pub(crate) config: Arc<Config>,
    /// Peer table, routing, overload control, retry budget.
    pub(crate) relay: RelayCtx,
    /// Inbound connections waiting for their CER, capped.
    pub(crate) admission: Arc<Admission<Arc<Notify>>>,
    /// Socket call counters.
    pub(crate) io: Arc<IoStats>,
    /// Where connections report their opens and closes.
    pub(crate) kernel: Arc<Kernel>,
    /// Flips when the agent stops.
    pub(crate) stop: Stop,
    /// The next connection's number.
    pub(crate) next_conn: AtomicU64,
    /// `[accept]` as last loaded (a reload replaces it): read once per CER,
    /// off the request path.
    pub(crate) accept: Mutex<Accept>,
}

impl ConnCtx {
    /// True when `[accept]` admits the unconfigured peer `host`.
    pub(crate) fn accepts(&self, host: &str) -> bool {
        self.accept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .matches(host)
    }

    /// A reload's `[accept]`, for the CERs from now on.
    pub(crate) fn set_accept(&self, accept: Accept) {
        *self.accept.lock().unwrap_or_else(PoisonError::into_inner) = accept;
    }
}

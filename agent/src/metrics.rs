//! The metrics endpoint: Prometheus text exposition format (version 0.0.4)
//! at `GET /metrics`, served by a small HTTP/1.1 responder ([`http`]) with
//! the status pages `GET /peers` and `GET /health` ([`status`],
//! docs/status.md). Every name has the `doic_` prefix. Accepted peers
//! that are gone ([`crate::peer::table::PeerSlot::is_gone`]) have no series.
//!
//! This module holds no state: [`Sources`] is a read-only view of the
//! parts that keep their own counters (peer table, retry budget, sockets,
//! admission, workers, kernel telemetry, overload control), and each
//! renderer reads one of them.
//!
//! | module | renders |
//! | --- | --- |
//! | [`node`] | peers, relay retries, socket calls, CER admission, workers |
//! | [`kernel`] | the kernel program's counters, the feeds to the control thread |
//! | [`overload`] | DOIC treatments, reports, OCS, replicas, the agent's own load |
//! | [`status`] | `doic_build_info`; the `/peers` and `/health` pages |

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::admission::Admission;
use crate::net::IoStats;
use crate::overload::Overload;
use crate::peer::table::PeerTable;
use crate::relay::budget::RetryGate;
use crate::routing::live::LiveRoutes;
use crate::telemetry::Kernel;
use crate::workers::Workers;

mod http;
mod kernel;
mod node;
mod overload;
mod status;

pub(crate) use http::serve;
pub use status::{GIT_HASH, VERSION};

/// What `/metrics` reads: handles to the parts that count, none owned
/// here.
#[derive(Debug)]
pub struct Sources {
    pub(crate) table: Arc<PeerTable>,
    pub(crate) retry: Arc<RetryGate>,
    pub(crate) io: Arc<IoStats>,
    pub(crate) admission: Arc<Admission<Arc<Notify>>>,
    pub(crate) workers: Arc<Workers>,
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) overload: Option<Arc<Overload>>,
    /// The routes (as a reload last set them), for `GET /health`.
    pub(crate) routes: Arc<LiveRoutes>,
    /// The bound Diameter listeners.
    pub(crate) listen: Vec<SocketAddr>,
}

/// The metrics text.
#[must_use]
pub fn render(sources: &Sources) -> String {
    let mut o = String::with_capacity(4096);
    status::render_build_info(&mut o);
    node::render(sources, &mut o);
    kernel::render(&sources.kernel, &mut o);
    kernel::render_feeds(sources, &mut o);
    if let Some(ov) = &sources.overload {
        overload::render(ov, &mut o);
    }
    o
}

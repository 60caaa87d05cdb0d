//! The tokio edge: listeners, outbound connections with Tc backoff, the
//! driver of one connection, and its bounded queues between workers
//! (`link`, the [`crate::peer::table::Link`] the relay sees). The only
//! place on the protocol path that awaits.

pub mod conn;
pub(crate) mod connect;
mod ctx;
mod link;
mod liveness;

pub(crate) use ctx::ConnCtx;
pub use ctx::IoStats;
pub use ctx::RelayCtx;

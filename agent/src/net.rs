//! The tokio edge: listeners, outbound connections with Tc backoff, the
//! driver of one connection, and its bounded queues between workers
//! (`link`, the [`crate::peer::table::Link`] the relay sees). The only
//! place on the protocol path that awaits. A connection's bytes go over
//! TCP or TLS/TCP (`stream`, RFC 6733 §13.1).

pub mod conn;
pub(crate) mod connect;
mod ctx;
mod link;
mod liveness;
pub(crate) mod stream;

pub(crate) use ctx::ConnCtx;
pub use ctx::IoStats;
pub use ctx::RelayCtx;

/// An optional value as a log field: the value, or `none` (for `%` fields:
/// no `Some(...)` in the logs).
pub(crate) struct OrNone<T>(pub(crate) Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for OrNone<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("none"),
        }
    }
}

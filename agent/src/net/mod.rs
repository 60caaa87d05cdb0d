//! The tokio edge: listeners, outbound connections with Tc backoff, and the
//! driver of one connection. The only place on the protocol path that
//! awaits.

pub mod conn;
pub(crate) mod connect;
mod liveness;

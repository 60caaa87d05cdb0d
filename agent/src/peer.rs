//! The agent's peer table (RFC 6733 §2.6): one slot per configured or
//! accepted peer, shared by the workers. The state machines themselves are
//! in [`diameter::peer`]. What the relay senses of each upstream peer for
//! its protection is in [`sensed`]; what `GET /peers` shows of each peer
//! in [`status`]; a client's own-overload limit in [`limit`].

pub mod limit;
pub mod sensed;
pub mod status;
pub mod table;
#[cfg(test)]
pub(crate) mod test_link;

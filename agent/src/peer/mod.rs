//! The agent's peer table (RFC 6733 §2.6): one slot per configured or
//! accepted peer, shared by the workers. The state machines themselves are
//! in [`diameter::peer`].

pub mod table;
#[cfg(test)]
pub(crate) mod test_link;

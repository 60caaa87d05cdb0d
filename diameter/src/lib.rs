//! The Diameter base protocol (RFC 6733, RFC 3539), sans-io: nothing here
//! owns a socket, spawns a task or reads a clock. Time is an argument.
//!
//! # Map of the modules
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`codec`] | wire format: header and framing, AVPs, typed values, messages, the relay fast path and relayed copies, builders, the answers a node writes itself, grammar checks (RFC 6733 §3-4, §6.1-6.2, §7) |
//! | [`dictionary`] | command and AVP codes, types, flag rules, Result-Codes, enumerations (RFC 6733, 7683, 8581, 8582) |
//! | [`peer`] | peer state machines: capability exchange and election (§5.3, §5.6.4), the peer FSM (§5.6), the watchdog (RFC 3539 §3.4) |

#![warn(missing_docs, unreachable_pub)]

pub mod codec;
pub mod dictionary;
pub mod peer;

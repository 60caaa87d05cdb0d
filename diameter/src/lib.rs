//! The Diameter base protocol (RFC 6733, RFC 3539), sans-io: nothing here
//! owns a socket, spawns a task or reads a clock. Time is an argument.
//!
//! # Map of the modules
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`codec`] | wire format: header, AVPs, typed values, messages, the relay fast path, builders, grammar checks (RFC 6733 §3-4, §7) |
//! | [`dictionary`] | command and AVP codes, types, flag rules, Result-Codes, enumerations (RFC 6733, 7683, 8581, 8582) |
//! | [`peer`] | peer state machines: capability exchange and election (§5.3, §5.6.4), the peer FSM (§5.6), the watchdog (RFC 3539 §3.4) |
//! | [`wire`] | the relay's framing and the answers the agent builds itself (§6.2, §7.2) |

#![warn(missing_docs, unreachable_pub)]

pub mod codec;
pub mod dictionary;
pub mod peer;
pub mod wire;

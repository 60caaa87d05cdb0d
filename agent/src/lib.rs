//! A Diameter edge agent (RFC 6733 §2.8 relay/proxy) with Diameter Overload
//! Indication Conveyance: RFC 7683 (DOIC), RFC 8581 (peer reports) and
//! RFC 8582 (rate algorithm).
//!
//! # Map of the modules
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`cli`] | the `doic-agent` command line (parsing only; `main.rs` runs it) |
//! | [`bucket`] | RFC 8582 §8.3 leaky bucket: lock-free, shared by all workers, priorities and randomised phase |
//! | [`ebpf`] | kernel telemetry: loads and attaches the XDP/TC program, reads per-peer Diameter counters, renders them for Prometheus |
//! | [`codec`] | Diameter wire format: header, AVPs, typed values, messages, builders (RFC 6733 §3-4, §7) |
//! | [`inspect`] | the `decode` / `encode` subcommands: message <-> JSON, one-line errors |
//! | [`dictionary`] | command and AVP codes, types, flag rules, enumerations (RFC 6733, 7683, 8581, 8582) |
//!
//! Protocol logic is sans-io: state machines take `now` and messages and
//! return actions; tokio appears only at the network edge.

#![warn(missing_docs, unreachable_pub)]

pub mod bucket;
pub mod cli;
pub mod codec;
pub mod dictionary;
pub mod ebpf;
pub mod inspect;

//! A Diameter edge agent (RFC 6733 §2.8 relay/proxy) with Diameter Overload
//! Indication Conveyance: RFC 7683 (DOIC), RFC 8581 (peer reports) and
//! RFC 8582 (rate algorithm).
//!
//! # Map of the modules
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`cli`] | the `doic-agent` command line (parsing only; `main.rs` runs it) |
//! | [`ebpf`] | kernel telemetry: loads and attaches the XDP/TC program, reads per-peer Diameter counters, renders them for Prometheus |
//! | [`telemetry`] | the kernel program inside the agent: `[ebpf]` section, attach/detach with the agent, per-tick counters and arrival rates for overload control |
//! | [`doic`] | DOIC overload control core, sans-io (RFC 7683, RFC 8581, RFC 8582) |
//! | [`audit`] | evidence trail: reports, OCS versions, treatment counters |
//! | [`bucket`] | RFC 8582 §8.3 leaky bucket: lock-free, shared by all workers, priorities and randomised phase |
//! | [`config`] | the TOML configuration, defaults and validation |
//! | [`peer`] | RFC 6733 §5 peers: watchdog (RFC 3539), capability exchange, peer state machine |
//! | [`routing`] | RFC 6733 §6.1 routing table, candidate choice, loop detection |
//! | [`admission`] | caps on inbound connections waiting for CER (RFC 6733 §5.3), per source and in total |
//! | [`agent`] | the running agent: pinned workers, listeners, dialling, control thread, shutdown |
//! | [`net`] | tokio edge: listeners, Tc reconnects, one task per connection with batched I/O |
//! | [`overload`] | DOIC in the relay: per-worker cores, request/answer treatment, replication, control tick, `/metrics` and `/audit` |
//! | [`relay`] | relay duties across connections: dispatch, failover with the T flag, local answers |
//! | [`loadgen`] | built-in loopback peers: answering server, closed/open-loop load client |
//! | [`demo`] | `doic-agent demo`: the agent between built-in peers, live summary |
//! | [`metrics`] | Prometheus `/metrics` endpoint (`doic_` prefix) |
//! | [`wire`] | the relay's view of a message: framing, routing AVP scan, Route-Record, agent-built answers |
//! | [`codec`] | Diameter wire format: header, AVPs, typed values, messages, builders (RFC 6733 §3-4, §7) |
//! | [`inspect`] | the `decode` / `encode` subcommands: message <-> JSON, one-line errors |
//! | [`dictionary`] | command and AVP codes, types, flag rules, enumerations (RFC 6733, 7683, 8581, 8582) |
//!
//! Protocol logic is sans-io: state machines take `now` and messages and
//! return actions; tokio appears only at the network edge.

#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod agent;
pub mod audit;
pub mod bucket;
pub mod cli;
pub mod codec;
pub mod config;
pub mod demo;
pub mod dictionary;
pub mod doic;
pub mod ebpf;
pub mod inspect;
pub mod loadgen;
pub mod metrics;
pub mod net;
pub mod overload;
pub mod peer;
pub mod relay;
pub mod routing;
pub mod telemetry;
pub mod wire;

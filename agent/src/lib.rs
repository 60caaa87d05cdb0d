//! A Diameter edge agent (RFC 6733 §2.8 relay/proxy) with Diameter Overload
//! Indication Conveyance: RFC 7683 (DOIC), RFC 8581 (peer reports) and
//! RFC 8582 (rate algorithm).
//!
//! The protocol itself lives in two sans-io crates: [`diameter`] (codec,
//! dictionary, peer state machines) and [`doic`] (every overload control
//! decision). This crate is the node that drives them: configuration,
//! relaying, sockets, the kernel program, metrics and threads.
//!
//! # Map of the modules
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`ebpf`] | kernel telemetry: loads and attaches the XDP/TC program, reads per-peer Diameter counters, renders them for Prometheus |
//! | [`telemetry`] | the kernel program inside the agent: `[ebpf]` section, attach/detach with the agent, per-tick counters and arrival rates for overload control |
//! | [`clock`] | the time base of the request path: the CPU counter in nanoseconds (quanta) and CLOCK_MONOTONIC, or the time of a caller's runtime; the only clock reads the cores are given |
//! | [`config`] | the TOML configuration, defaults and validation |
//! | [`peer`] | the peer table: one slot per configured or accepted peer (the state machines are in `diameter::peer`) |
//! | [`routing`] | RFC 6733 §6.1 routing table, candidate choice, loop detection |
//! | [`admission`] | caps on inbound connections waiting for CER (RFC 6733 §5.3), per source and in total |
//! | [`agent`] | the running agent: pinned workers (or tasks on a caller's runtime, `start_on`), listeners, dialling, control thread, shutdown |
//! | [`net`] | tokio edge: listeners, Tc reconnects, one task per connection with batched I/O driving the relay; close reasons with their side |
//! | [`overload`] | DOIC in the relay: per-worker cores, request/answer treatment, replication, control tick, `/metrics` and `/audit` |
//! | [`relay`] | the sans-io relay (RFC 6733 §6.1-6.2): checks, loop detection, routing, hop-by-hop table, failover with the T flag, 3004 retries within the budget, local answers, 3002 timeouts |
//! | [`metrics`] | Prometheus `/metrics` endpoint (`doic_` prefix) |
//!
//! Protocol logic is sans-io: state machines take `now` and messages and
//! return actions; tokio appears only at the network edge.

#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod agent;
pub mod clock;
pub mod config;
pub mod ebpf;
pub mod metrics;
pub mod net;
pub mod overload;
pub mod peer;
pub mod relay;
pub mod routing;
pub mod telemetry;

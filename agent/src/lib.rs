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
//! | [`ebpf`] | kernel program: the `[ebpf]` section, load and attach the XDP/TC program, per-peer Diameter counters, its life with the agent; the only aya user |
//! | [`telemetry`] | the control side of the kernel counters: per-tick counters and arrival rates for overload control, the connections' open/close feed |
//! | [`clock`] | the time base of the request path: the CPU counter in nanoseconds (quanta) and CLOCK_MONOTONIC, or the time of a caller's runtime; the only clock reads the cores are given |
//! | [`feed`] | bounded crossbeam feeds from the workers to the control thread (full: dropped and counted) |
//! | [`config`] | the TOML configuration: gathers the sections (`[doic]`, `[ebpf]`, `[retry]`), defaults and validation |
//! | [`peer`] | the peer table: one slot per configured or accepted peer (the state machines are in `diameter::peer`), what the relay senses of each upstream's answers for its protection, and what `GET /peers` shows of each peer |
//! | [`live`] | a value a reload replaces (the routing table, `[doic]`) while each holder keeps the one it holds: a generation, one relaxed load to check |
//! | [`routing`] | RFC 6733 §6.1 routing table, candidate choice, loop detection |
//! | [`admission`] | caps on inbound connections waiting for CER (RFC 6733 §5.3), per source and in total |
//! | [`runtime`] | the threads: pinned workers (or tasks on a caller's runtime, `Agent::start_on`), the control thread, the shutdown sequence |
//! | [`workers`] | the set of worker runtimes and the stop signal, below both `net` and `runtime` |
//! | [`agent`] | the running agent: gives each part what it uses, starts listeners, dialling, metrics and the control thread on the runtime |
//! | [`net`] | tokio edge: listeners, Tc reconnects, one task per connection with batched I/O driving the relay; each connection's bounded queues between workers (`link`); close reasons with their side; each connection's `ConnCtx`; the byte stream, TCP or TLS (`stream`) |
//! | [`tls`] | RFC 6733 §13 TLS/TCP: the material of TLS listeners and peers (rustls, reloadable), the peer certificate's names checked against its Origin-Host |
//! | [`overload`] | DOIC in the relay: per-worker cores (thread-local, or hosted on a caller's runtime), the bounded replica inbox, request/answer glue between the relay and the `doic` core, the snapshots the control tick reads, the protection of upstream servers without DOIC (docs/protect.md) |
//! | [`relay`] | the sans-io relay (RFC 6733 §6.1-6.2): checks, loop detection, routing, hop-by-hop table, failover with the T flag, 3004 retries within the budget, local answers, 3002 timeouts |
//! | [`audit`] | the durable audit log (`[audit]`): the workers' and the control thread's records over one bounded feed, one writer thread with rotation and retention, reading a log directory back |
//! | [`metrics`] | Prometheus `/metrics` endpoint (`doic_` prefix) with the status pages `/peers` and `/health` and `doic_build_info`: renders, holds no state |
//!
//! The modules form no cycle: `config` gathers the sections of `ebpf`, `tls` and
//! its own; `live` uses nothing; `routing`, `peer`, `telemetry`, `overload`, `relay`, `runtime`,
//! `net` and `metrics` each use only what is below them, and `agent`, at
//! the top, gives each part the handles it uses (no shared god object).
//!
//! Protocol logic is sans-io: state machines take `now` and messages and
//! return actions; tokio appears only at the network edge.

#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod agent;
pub mod audit;
pub mod clock;
pub mod config;
pub mod ebpf;
pub mod feed;
pub mod host;
pub mod live;
pub mod metrics;
pub mod net;
pub mod overload;
pub mod peer;
pub mod relay;
pub mod routing;
pub mod runtime;
pub mod telemetry;
pub mod tls;
pub mod workers;

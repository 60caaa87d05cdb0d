//! The `doic-agent` command line and the built-in peers it and the tests
//! use. Everything here is a user of the public API of [`agent`],
//! [`diameter`] and [`doic`], not part of it.
//!
//! | module | what |
//! | --- | --- |
//! | [`cli`] | the `doic-agent` command line (parsing only; `main.rs` runs it) |
//! | [`loadgen`] | built-in loopback peers: answering server, closed/open-loop load client |
//! | [`demo`] | `doic-agent demo`: the agent between built-in peers, live summary |
//! | [`inspect`] | the `decode` / `encode` subcommands: message <-> JSON, one-line errors |
//! | [`audit`] | `doic-agent audit`: timeline, at, explain, plot of an audit log directory, text or `--json` |
//! | [`svg`] | plain SVG line charts with bands (the benchmarks' plots, `audit plot`) |
//! | [`logging`] | the log output of `run`: `--log-level` / `RUST_LOG`, text or JSON lines on stderr |

#![warn(missing_docs, unreachable_pub)]

pub mod audit;
pub mod cli;
pub mod demo;
pub mod inspect;
pub mod loadgen;
pub mod logging;
pub mod svg;

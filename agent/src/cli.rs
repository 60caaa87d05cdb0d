//! The `doic-agent` command line: argument parsing only. `main.rs` dispatches.

use clap::{Parser, Subcommand};

/// Diameter edge agent with DOIC overload control (RFC 7683, RFC 8581, RFC 8582).
#[derive(Debug, Parser)]
#[command(name = "doic-agent", version, about, arg_required_else_help = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The agent's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {}

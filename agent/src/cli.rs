//! The `doic-agent` command line: argument parsing only. `main.rs` dispatches.

use std::path::PathBuf;

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
pub enum Command {
    /// Run the agent with a configuration file until SIGTERM or Ctrl-C.
    Run {
        /// The TOML configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check a configuration file and exit (0 when valid).
    CheckConfig {
        /// The TOML configuration file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Run the agent between built-in loopback peers (a load client and two
    /// servers) and print a one-line summary every second.
    Demo {
        /// Stop after this many seconds (default: until Ctrl-C).
        #[arg(long, value_name = "N")]
        seconds: Option<u64>,
        /// A configuration file instead of the embedded demo configuration.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Requests the demo client keeps outstanding.
        #[arg(long, value_name = "N", default_value_t = 32)]
        outstanding: usize,
    },
}

//! The `doic-agent` command line: argument parsing only. `main.rs` dispatches.
//!
//! `run` and `check-config` take the configuration file the same way:
//! positional (`run agent.toml`) or `--config agent.toml`. A bad command
//! line prints clap's message (what is wrong and the usage) on stderr and
//! exits with status 2.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;

pub mod audit;

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
    /// Run the agent with a configuration file until SIGTERM or Ctrl-C;
    /// SIGHUP re-reads the file (docs/reload.md).
    Run {
        /// The configuration file.
        #[command(flatten)]
        config: ConfigFile,
        /// The log output.
        #[command(flatten)]
        log: LogArgs,
    },
    /// Check a configuration file as `run` would and exit (0 when valid).
    CheckConfig {
        /// The configuration file.
        #[command(flatten)]
        config: ConfigFile,
    },
    /// Run an overload episode on loopback: servers without DOIC of a
    /// stated capacity, offered half to three times it and back, with and
    /// without `[doic]`; a line per second and a goodput comparison. With
    /// `--relay`: the agent relaying between a load client and two servers.
    Demo {
        /// The plain relay demo instead of the overload episode.
        #[arg(long)]
        relay: bool,
        /// Each server's capacity in the episode, requests per second.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 500,
            conflicts_with = "relay"
        )]
        capacity: u32,
        /// Seconds each step of the episode lasts.
        #[arg(
            long,
            value_name = "S",
            default_value_t = 3.0,
            conflicts_with = "relay"
        )]
        step: f64,
        /// Relay demo: stop after this many seconds (default: until Ctrl-C).
        #[arg(long, value_name = "N", requires = "relay")]
        seconds: Option<u64>,
        /// Relay demo: a configuration file instead of the embedded one.
        #[arg(long, value_name = "FILE", requires = "relay")]
        config: Option<PathBuf>,
        /// Relay demo: requests the client keeps outstanding.
        #[arg(long, value_name = "N", default_value_t = 32, requires = "relay")]
        outstanding: usize,
    },
    /// Ask the audit log (`[audit] dir`): timeline, at, explain, plot.
    Audit(audit::AuditArgs),
    /// Make a running agent re-read its configuration file: sends SIGHUP
    /// to the `run` process `--pid` (what it changes and what it refuses
    /// are in that agent's log, docs/reload.md).
    Reload {
        /// The process id of the running `doic-agent run`.
        #[arg(long, value_name = "PID")]
        pid: i32,
    },
    /// Decode one Diameter message and print it as JSON.
    Decode(DecodeArgs),
    /// Encode the JSON form of a message (as `decode` prints it) to hex.
    Encode(EncodeArgs),
}

/// The TOML configuration file, positional or `--config` (one of them).
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ConfigFile {
    /// The TOML configuration file.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// The TOML configuration file (the same as FILE).
    #[arg(long = "config", value_name = "FILE")]
    flag: Option<PathBuf>,
}

impl ConfigFile {
    /// The file given.
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        // clap's group makes exactly one of them present.
        self.file
            .as_deref()
            .or(self.flag.as_deref())
            .unwrap_or(std::path::Path::new(""))
    }
}

/// How `run` logs (see [`crate::logging`]).
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Log filter: a level (error, warn, info, debug, trace) or
    /// `RUST_LOG`-style directives (`info,agent::net=debug`). Overrides
    /// RUST_LOG; without either, info.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log line format on stderr.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Arguments of `decode`.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// The message in hex; without it, read --file or stdin (hex text or
    /// raw bytes, detected).
    #[arg(value_name = "HEX", conflicts_with = "file")]
    pub hex: Option<String>,
    /// Read the raw binary message from this file.
    #[arg(long, value_name = "PATH")]
    pub file: Option<std::path::PathBuf>,
    /// Also check the command grammar and AVP flag rules (5005, 5009, 5001,
    /// 3009).
    #[arg(long)]
    pub check: bool,
}

/// Arguments of `encode`.
#[derive(Debug, clap::Args)]
pub struct EncodeArgs {
    /// Read the JSON from this file instead of stdin.
    #[arg(long, value_name = "PATH")]
    pub file: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_of(args: &[&str]) -> PathBuf {
        match Cli::try_parse_from(args).unwrap().command {
            Some(Command::Run { config, .. } | Command::CheckConfig { config }) => {
                config.path().to_owned()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_and_check_config_take_the_file_both_ways() {
        for cmd in ["run", "check-config"] {
            assert_eq!(
                config_of(&["doic-agent", cmd, "a.toml"]),
                PathBuf::from("a.toml")
            );
            let flag = config_of(&["doic-agent", cmd, "--config", "b.toml"]);
            assert_eq!(flag, PathBuf::from("b.toml"));
            let both = Cli::try_parse_from(["doic-agent", cmd, "a.toml", "--config", "b.toml"]);
            assert!(both.is_err());
            let none = Cli::try_parse_from(["doic-agent", cmd]).unwrap_err();
            assert_eq!(none.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        }
    }

    #[test]
    fn run_takes_the_log_options() {
        let cli = Cli::try_parse_from([
            "doic-agent",
            "run",
            "a.toml",
            "--log-level",
            "debug",
            "--log-format",
            "json",
        ])
        .unwrap();
        let Some(Command::Run { log, .. }) = cli.command else {
            panic!()
        };
        assert_eq!(log.log_level.as_deref(), Some("debug"));
        assert_eq!(log.log_format, LogFormat::Json);
        let bad = Cli::try_parse_from(["doic-agent", "run", "a.toml", "--log-format", "xml"]);
        assert_eq!(
            bad.unwrap_err().kind(),
            clap::error::ErrorKind::InvalidValue
        );
    }
}

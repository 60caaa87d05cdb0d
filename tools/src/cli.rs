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
    /// Decode one Diameter message and print it as JSON.
    Decode(DecodeArgs),
    /// Encode the JSON form of a message (as `decode` prints it) to hex.
    Encode(EncodeArgs),
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

impl Cli {
    /// Parses the process arguments. `--help` and `--version` print as
    /// usual; a bad command line prints one line (what is wrong, without
    /// clap's usage block) on stderr and exits with status 2.
    pub fn parse_or_exit() -> Cli {
        match Cli::try_parse() {
            Ok(cli) => cli,
            Err(e) => {
                use clap::error::ErrorKind;
                if matches!(
                    e.kind(),
                    ErrorKind::DisplayHelp
                        | ErrorKind::DisplayVersion
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) {
                    e.exit();
                }
                eprintln!("doic-agent: {}", one_line(&e));
                std::process::exit(2);
            }
        }
    }
}

/// The first line of a clap error, without its `error: ` prefix.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid command line");
    first.trim_start_matches("error: ").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_command_lines_give_one_precise_line() {
        let e = Cli::try_parse_from(["doic-agent", "decode", "--bogus"]).unwrap_err();
        let line = one_line(&e);
        assert!(line.contains("--bogus"), "{line}");
        assert!(!line.contains('\n'));
        let e = Cli::try_parse_from(["doic-agent", "decode", "00", "--file", "x"]).unwrap_err();
        assert!(
            one_line(&e).contains("cannot be used with"),
            "{}",
            one_line(&e)
        );
    }
}

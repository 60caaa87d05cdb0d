//! `doic-agent`: parse the command line, run it, map errors to an exit code.

use clap::Parser;
use doic_agent::cli::Cli;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => std::process::ExitCode::SUCCESS,
        Some(command) => match command {},
    }
}

//! `doic-agent`: parse the command line, run it, map errors to an exit code.

use clap::Parser;
use doic_agent::cli::Cli;
use doic_agent::cli::Command;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => std::process::ExitCode::SUCCESS,
        Some(command) => match command {
            Command::Decode(args) => {
                let input = doic_agent::inspect::DecodeInput {
                    hex: args.hex,
                    file: args.file,
                };
                report(doic_agent::inspect::decode(
                    &input,
                    args.check,
                    &mut std::io::stdin(),
                ))
            }
            Command::Encode(args) => report(doic_agent::inspect::encode(
                args.file.as_deref(),
                &mut std::io::stdin(),
            )),
        },
    }
}

/// Prints a subcommand's output, or its one-line error, and gives the exit
/// status.
fn report(result: Result<String, doic_agent::inspect::InspectError>) -> std::process::ExitCode {
    match result {
        Ok(out) => {
            use std::io::Write;
            // a closed pipe (e.g. `| head`) is not an error worth a panic
            let _ = writeln!(std::io::stdout().lock(), "{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("doic-agent: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

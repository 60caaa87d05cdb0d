//! `doic-agent`: parse the command line, run it, map errors to an exit code.

use std::process::ExitCode;

use clap::Parser;
use doic_agent::cli::{Cli, Command};
use doic_agent::config::Config;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return ExitCode::SUCCESS;
    };
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("doic-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::CheckConfig { file } => {
            let config = Config::from_file(&file)?;
            println!(
                "{}: ok ({} peers, {} routes, {} workers)",
                file.display(),
                config.peers.len(),
                config.routes.len(),
                config.worker_count()
            );
            Ok(())
        }
        Command::Run { config } => {
            let _config = Config::from_file(&config)?;
            anyhow::bail!("run is not available yet")
        }
        Command::Demo { .. } => anyhow::bail!("demo is not available yet"),
    }
}

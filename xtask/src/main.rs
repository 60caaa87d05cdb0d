//! Development tasks for the DOIC edge agent.
//!
//! `cargo xtask test` is the project's one test command: it installs what the
//! tests need (idempotently), then runs every stage in order and stops at the
//! first failure. `.ci/run` calls exactly that command.

#[cfg(test)]
mod layering;
mod peers;
mod setup;
mod stages;
mod util;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "Development tasks for the DOIC edge agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the tests need, then run every test stage.
    Test {
        /// Run only these stages (repeatable).
        #[arg(long = "only", value_name = "STAGE")]
        only: Vec<String>,
        /// Skip these stages (repeatable).
        #[arg(long = "skip", value_name = "STAGE")]
        skip: Vec<String>,
        /// List the stages and exit.
        #[arg(long)]
        list: bool,
    },
    /// Install the tools and packages the tests need, and nothing else.
    Setup,
    /// Run a long benchmark on demand.
    Bench {
        /// `overload`: the full efficacy grid; writes docs/overload.md's
        /// table and plots. `own`: the agent held to a CPU share
        /// (docs/own-overload.md; root).
        name: String,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Test { only, skip, list } => stages::run_all(&only, &skip, list),
        Command::Setup => setup::all(),
        Command::Bench { name } => match name.as_str() {
            "overload" => stages::bench_overload_full(),
            "own" => stages::bench_own_full(),
            _ => anyhow::bail!("unknown benchmark {name:?}: overload, own"),
        },
    }
}

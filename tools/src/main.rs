//! `doic-agent`: parse the command line, run it, map errors to an exit code.

use std::process::ExitCode;

use agent::agent::Agent;
use agent::config::Config;
use tools::cli::{Cli, Command};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse_or_exit();
    let Some(command) = cli.command else {
        return ExitCode::SUCCESS;
    };
    let command = match command {
        Command::Decode(args) => {
            let input = tools::inspect::DecodeInput {
                hex: args.hex,
                file: args.file,
            };
            return report(tools::inspect::decode(
                &input,
                args.check,
                &mut std::io::stdin(),
            ));
        }
        Command::Encode(args) => {
            return report(tools::inspect::encode(
                args.file.as_deref(),
                &mut std::io::stdin(),
            ));
        }
        other => other,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("doic-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a subcommand's output, or its one-line error, and gives the exit
/// status.
fn report(result: Result<String, tools::inspect::InspectError>) -> ExitCode {
    match result {
        Ok(out) => {
            use std::io::Write;
            // a closed pipe (e.g. `| head`) is not an error worth a panic
            let _ = writeln!(std::io::stdout().lock(), "{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("doic-agent: {e}");
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
            let config = Config::from_file(&config)?;
            // Before anything slow (loading the kernel program): a SIGTERM
            // from then on stops the agent cleanly.
            let signals = Signals::install()?;
            let agent = Agent::start(config)?;
            agent.start_kernel_telemetry();
            eprintln!(
                "doic-agent: listening on {:?}{}",
                agent.local_addrs(),
                agent
                    .metrics_addr()
                    .map(|m| format!(", metrics at http://{m}/metrics"))
                    .unwrap_or_default()
            );
            signals.wait();
            eprintln!("doic-agent: stopping (DPR to every peer, draining)");
            agent.shutdown();
            // The program stays attached until every connection has closed.
            agent.join();
            Ok(())
        }
        Command::Demo {
            relay: false,
            capacity,
            step,
            ..
        } => {
            anyhow::ensure!(
                step > 0.0 && step.is_finite() && capacity > 0,
                "demo: --step and --capacity must be positive"
            );
            let spec = tools::demo::episode::Spec {
                capacity,
                step: std::time::Duration::from_secs_f64(step),
                ..Default::default()
            };
            tools::demo::episode::run(spec, &stop_signal())?;
            Ok(())
        }
        Command::Demo {
            seconds,
            config,
            outstanding,
            ..
        } => {
            let config = match config {
                Some(path) => Config::from_file(&path)?,
                None => Config::from_str_named(
                    agent::config::DEMO_CONFIG,
                    std::path::Path::new("<embedded demo config>"),
                )?,
            };
            tools::demo::run(config, seconds, outstanding, stop_signal())?;
            Ok(())
        }
        Command::Decode(_) | Command::Encode(_) => Ok(()),
    }
}

/// SIGTERM and SIGINT handlers, installed up front.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (term, int) = {
            let _guard = rt.enter();
            (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            )
        };
        Ok(Self { rt, term, int })
    }

    /// Blocks until SIGTERM or SIGINT.
    fn wait(mut self) {
        self.rt.block_on(async {
            tokio::select! {
                _ = self.term.recv() => {}
                _ = self.int.recv() => {}
            }
        });
    }
}

/// Blocks until SIGTERM or SIGINT.
fn wait_for_signal() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(signal())
}

async fn signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    Ok(())
}

/// A flag raised by SIGTERM or SIGINT, watched from a small thread.
fn stop_signal() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = flag.clone();
    std::thread::spawn(move || {
        if wait_for_signal().is_ok() {
            f.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    flag
}

//! `doic-agent`: parse the command line, run it, map errors to an exit code.
//!
//! What goes to stderr: `run` writes only `tracing` lines there (text or
//! JSON, [`tools::logging`]), its fatal error included; the one-shot
//! subcommands (`check-config`, `reload`, `decode`, `encode`, `demo`) print their
//! error as one plain line `doic-agent: ...`; a bad command line is clap's
//! message. Exit status: 0 ok, 1 failure, 2 bad command line.

use std::process::ExitCode;

use agent::agent::Agent;
use agent::config::Config;
use clap::Parser;
use tools::cli::{Cli, Command, LogArgs};
use tools::logging;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// No transparent huge pages for this process (`PR_SET_THP_DISABLE`,
/// prctl(2)). The allocator returns freed memory to the kernel and touches
/// it again later; with huge pages each of those first touches zeroes
/// 2 MiB for a small allocation. Under ten times its capacity in 0.02 of
/// a CPU that zeroing was 47 % of the agent's CPU time
/// (docs/own-overload.md, "Memory churn"); with 4 KiB pages it is gone and
/// the resident set is a third smaller. A kernel without the option keeps
/// huge pages: the agent runs as before.
fn no_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointers;
    // it changes only this process's memory policy.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn main() -> ExitCode {
    no_huge_pages();
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return ExitCode::SUCCESS;
    };
    match command {
        Command::Decode(args) => {
            let input = tools::inspect::DecodeInput {
                hex: args.hex,
                file: args.file,
            };
            report(tools::inspect::decode(
                &input,
                args.check,
                &mut std::io::stdin(),
            ))
        }
        Command::Encode(args) => report(tools::inspect::encode(
            args.file.as_deref(),
            &mut std::io::stdin(),
        )),
        Command::Audit(args) => match tools::audit::run(&args) {
            Ok(out) => {
                for w in &out.warnings {
                    eprintln!("{w}");
                }
                print!("{}", out.text);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::CheckConfig { config } => report(check_config(config.path())),
        Command::Run { config, log } => run_logged(config.path(), &log),
        Command::Reload { pid } => report(send_reload(pid)),
        Command::Demo {
            relay,
            capacity,
            step,
            seconds,
            config,
            outstanding,
        } => {
            // The demo's output is its summary on stdout: warnings only.
            match logging::filter(None, "warn") {
                Ok(f) => logging::init(f, logging::LogFormat::Text),
                Err(e) => return fail(&e),
            }
            let ran = if relay {
                demo(seconds, config, outstanding)
            } else {
                episode(capacity, step)
            };
            match ran {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&format!("{e:#}")),
            }
        }
    }
}

/// The one plain error line of a one-shot subcommand.
fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("doic-agent: {e}");
    ExitCode::FAILURE
}

/// Prints a subcommand's output, or its one-line error, and gives the exit
/// status.
fn report<E: std::fmt::Display>(result: Result<String, E>) -> ExitCode {
    match result {
        Ok(out) => {
            use std::io::Write;
            // a closed pipe (e.g. `| head`) is not an error worth a panic
            let _ = writeln!(std::io::stdout().lock(), "{out}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// Reads `file` as `run` and `check-config` take it: valid, and an agent
/// that can accept or open a connection.
fn load(file: &std::path::Path) -> Result<Config, agent::config::ConfigError> {
    let config = Config::from_file(file)?;
    config.check_runnable(file)?;
    Ok(config)
}

/// `check-config`: the validation `run` does before it binds anything.
fn check_config(file: &std::path::Path) -> Result<String, agent::config::ConfigError> {
    let config = load(file)?;
    Ok(format!(
        "{}: ok ({} peers, {} routes, {} workers)",
        file.display(),
        config.peers.len(),
        config.routes.len(),
        config.worker_count()
    ))
}

/// `run` with its log installed; every line on stderr from here is a
/// `tracing` line.
fn run_logged(file: &std::path::Path, log: &LogArgs) -> ExitCode {
    let filter = match logging::filter(log.log_level.as_deref(), logging::DEFAULT_LEVEL) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("doic-agent: {e}");
            return ExitCode::from(2);
        }
    };
    logging::init(filter, log.log_format);
    match run(file) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(cause = %format_args!("{e:#}"), "cannot run the agent");
            ExitCode::FAILURE
        }
    }
}

fn run(file: &std::path::Path) -> anyhow::Result<()> {
    let config = load(file)?;
    // Before anything slow (loading the kernel program): a SIGTERM from
    // then on stops the agent cleanly.
    let mut signals = Signals::install()?;
    let agent = Agent::start(config)?;
    agent.start_kernel_telemetry();
    let listen = agent.local_addrs();
    match agent.metrics_addr() {
        Some(m) => tracing::info!(
            listen = ?listen,
            metrics = %format_args!("http://{m}/metrics"),
            "listening"
        ),
        None => tracing::info!(listen = ?listen, "listening"),
    }
    while signals.wait() == Wake::Reload {
        reload(file, &agent);
    }
    tracing::info!("stopping: DPR to every peer, draining");
    agent.shutdown();
    // The program stays attached until every connection has closed.
    agent.join();
    tracing::info!("stopped");
    Ok(())
}

/// SIGHUP: re-reads `file`; a file that `run` would refuse is refused in
/// one ERROR line naming the file and the cause, and the running
/// configuration stays.
fn reload(file: &std::path::Path, agent: &Agent) {
    tracing::info!(file = %file.display(), "SIGHUP: reloading the configuration");
    match load(file) {
        Ok(config) => {
            agent.reload(config);
        }
        Err(e) => tracing::error!(
            file = %file.display(),
            cause = %e,
            "reload refused: the running configuration stays"
        ),
    }
}

/// `reload --pid PID`: SIGHUP to a running agent.
fn send_reload(pid: i32) -> anyhow::Result<String> {
    anyhow::ensure!(pid > 0, "reload: --pid {pid} is not a process id");
    // SAFETY: kill(2) has no memory preconditions; a wrong pid is an error.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        let e = std::io::Error::last_os_error();
        anyhow::bail!("reload: cannot signal process {pid}: {e}");
    }
    Ok(format!(
        "sent SIGHUP to process {pid}: its log says what changed"
    ))
}

/// `demo` (the default): an overload episode with and without `[doic]`.
fn episode(capacity: u32, step: f64) -> anyhow::Result<()> {
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

/// `demo --relay`: the agent relaying between built-in peers.
fn demo(
    seconds: Option<u64>,
    config: Option<std::path::PathBuf>,
    outstanding: usize,
) -> anyhow::Result<()> {
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

/// SIGTERM, SIGINT and SIGHUP handlers, installed up front.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

/// What woke [`Signals::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// SIGTERM or SIGINT: stop.
    Stop,
    /// SIGHUP: reload the configuration.
    Reload,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (term, int, hup) = {
            let _guard = rt.enter();
            (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
                signal(SignalKind::hangup())?,
            )
        };
        Ok(Self { rt, term, int, hup })
    }

    /// Blocks until SIGTERM, SIGINT or SIGHUP.
    fn wait(&mut self) -> Wake {
        self.rt.block_on(async {
            tokio::select! {
                _ = self.term.recv() => Wake::Stop,
                _ = self.int.recv() => Wake::Stop,
                _ = self.hup.recv() => Wake::Reload,
            }
        })
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

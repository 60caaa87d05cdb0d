//! `bench-overload`: goodput under overload (RFC 7068 §3), open loop, at
//! multiples of a server's capacity C, for each server kind and path of
//! `bench::overload`, in interleaved rounds; medians. Prints the table and,
//! with `--docs DIR`, writes it into `DIR/overload.md` (between its
//! markers) with the SVG plots: goodput vs offered load per path, and the
//! time series of one 5x episode through the agent with `[doic]`.
//!
//! With `--require F` it fails unless every gated path (`--gated`, default
//! `agent-doic`) reaches goodput >= F x C at every load measured, and with
//! `--max-p99-ms M` unless the median p99 of its 2001 answers' latency is
//! at most M ms there.

use std::time::Duration;

use anyhow::{Context, bail};
use bench::overload::svg::{Chart, Series};
use bench::overload::{Cell, CellSpec, PathKind, Run, SAMPLE, ServerKind, Setup, measure, table};
use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "bench-overload",
    about = "Goodput under overload: direct, freeDiameter relay, the agent with and without DOIC, an agent chain"
)]
struct Args {
    /// The server's capacity C, requests per second.
    #[arg(long, default_value_t = 2000)]
    capacity: u32,
    /// Offered loads as multiples of C.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,5,10")]
    loads: Vec<f64>,
    /// Seconds of offered load per run.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// Interleaved rounds (medians are reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The client's timeout T in seconds: later answers are not goodput.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
    /// Seconds of the same load before each measurement.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds the client waits for the last answers after the load.
    #[arg(long, default_value_t = 3.0)]
    drain: f64,
    /// Server kinds: `fifo`, `reject`.
    #[arg(long, value_delimiter = ',', default_value = "fifo,reject")]
    servers: Vec<String>,
    /// Share of a request's service time a 3004 costs the rejecting server.
    #[arg(long, default_value_t = 0.05)]
    reject_cost: f64,
    /// Paths: direct, fd-relay, agent, agent-doic, chain-rate, chain-loss.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "direct,fd-relay,agent,agent-doic,chain-rate,chain-loss"
    )]
    paths: Vec<String>,
    /// Fail unless every gated path reaches this share of C at every load.
    #[arg(long)]
    require: Option<f64>,
    /// Fail unless every gated path's 2001 latency p99 (median over the
    /// rounds) is at most this many milliseconds at every load.
    #[arg(long, value_name = "MS")]
    max_p99_ms: Option<f64>,
    /// The paths `--require` and `--max-p99-ms` apply to.
    #[arg(long, value_delimiter = ',', default_value = "agent-doic")]
    gated: Vec<String>,
    /// Write the table into DIR/overload.md and the plots into DIR.
    #[arg(long, value_name = "DIR")]
    docs: Option<std::path::PathBuf>,
}

const BEGIN: &str = "<!-- bench-overload figures: begin -->";
const END: &str = "<!-- bench-overload figures: end -->";

fn paths(names: &[String]) -> anyhow::Result<Vec<PathKind>> {
    names
        .iter()
        .map(|n| PathKind::parse(n).with_context(|| format!("unknown path {n:?}")))
        .collect()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let setup = Setup {
        capacity: args.capacity,
        seconds: args.seconds,
        timeout: Duration::from_secs_f64(args.timeout),
        warmup: args.warmup,
        drain: Duration::from_secs_f64(args.drain),
    };
    let servers: Vec<ServerKind> = args
        .servers
        .iter()
        .map(|s| match s.as_str() {
            "fifo" => Ok(ServerKind::Fifo),
            "reject" => Ok(ServerKind::Reject(args.reject_cost)),
            _ => bail!("unknown server {s:?}: fifo or reject"),
        })
        .collect::<anyhow::Result<_>>()?;
    let kinds = paths(&args.paths)?;
    let gated = paths(&args.gated)?;
    let peers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut cells: Vec<Cell> = Vec::new();
    for &server in &servers {
        for &load in &args.loads {
            for &path in &kinds {
                cells.push(Cell {
                    spec: CellSpec { server, path, load },
                    runs: vec![],
                });
            }
        }
    }
    eprintln!(
        "bench-overload: C = {}/s, T = {} s, {} cells x {} rounds x {} s",
        args.capacity,
        args.timeout,
        cells.len(),
        args.rounds,
        args.seconds
    );
    for round in 0..args.rounds {
        for cell in &mut cells {
            let run =
                measure(&peers, &setup, cell.spec).with_context(|| format!("{:?}", cell.spec))?;
            let r = &run.report;
            eprintln!(
                "round {round} {:<24} {:<10} {:>4}x goodput/C {:.2} sent {} answered {} unanswered {} 2001 p99 {} ms sd {:.1} codes {:?}",
                cell.spec.server.name(),
                cell.spec.path.name(),
                cell.spec.load,
                r.goodput(setup.timeout) / f64::from(args.capacity),
                r.sent,
                r.answered,
                run.unanswered(),
                r.ok_percentile_us(99.0) / 1000,
                run.arrivals_sd(),
                r.by_code
            );
            cell.runs.push(run);
        }
    }
    let t = table(&setup, &cells);
    println!("\n{t}");
    for cell in &cells {
        let share = cell.sent_share(args.capacity);
        if share < 0.95 {
            eprintln!(
                "warning: the load client sent only {share:.2} of the offered load in {:?}: the figure measures the client",
                cell.spec
            );
        }
    }
    chain_summary(&cells);
    if let Some(dir) = &args.docs {
        write_docs(dir, &setup, &cells, &t)?;
    }
    if let Some(max) = args.max_p99_ms {
        let slow: Vec<String> = cells
            .iter()
            .filter(|x| gated.contains(&x.spec.path))
            .filter_map(|cell| {
                let p99 = cell.ok_latency_ms().1;
                eprintln!(
                    "gate: {} {} {}x 2001 p99 {p99:.1} ms (at most {max:.1})",
                    cell.spec.server.name(),
                    cell.spec.path.name(),
                    cell.spec.load
                );
                (p99 > max).then(|| {
                    format!(
                        "{} {} {}x: {p99:.1} ms",
                        cell.spec.server.name(),
                        cell.spec.path.name(),
                        cell.spec.load
                    )
                })
            })
            .collect();
        anyhow::ensure!(
            slow.is_empty(),
            "2001 latency p99 above {max:.1} ms: {}",
            slow.join("; ")
        );
    }
    if let Some(req) = args.require {
        let c = f64::from(args.capacity);
        let mut failed = Vec::new();
        for cell in cells.iter().filter(|x| gated.contains(&x.spec.path)) {
            let g = cell.goodput(setup.timeout) / c;
            let direct = cells
                .iter()
                .find(|d| {
                    d.spec.path == PathKind::Direct
                        && d.spec.server == cell.spec.server
                        && d.spec.load == cell.spec.load
                })
                .map(|d| d.goodput(setup.timeout) / c);
            eprintln!(
                "gate: {} {} {}x goodput/C {g:.2} (required {req:.2}; direct {})",
                cell.spec.server.name(),
                cell.spec.path.name(),
                cell.spec.load,
                direct.map_or("not measured".into(), |d| format!("{d:.2}"))
            );
            if g < req {
                failed.push(format!(
                    "{} {} {}x: {g:.2}",
                    cell.spec.server.name(),
                    cell.spec.path.name(),
                    cell.spec.load
                ));
            }
        }
        anyhow::ensure!(
            failed.is_empty(),
            "goodput below {req:.2} x C: {}",
            failed.join("; ")
        );
    }
    Ok(())
}

/// The RFC 8581 chain's smoothness: arrivals' standard deviation under rate
/// against loss, per server and load (target: rate <= 1/3 of loss).
fn chain_summary(cells: &[Cell]) {
    for rate in cells.iter().filter(|c| c.spec.path == PathKind::ChainRate) {
        let Some(loss) = cells.iter().find(|c| {
            c.spec.path == PathKind::ChainLoss
                && c.spec.server == rate.spec.server
                && c.spec.load == rate.spec.load
        }) else {
            continue;
        };
        let (r, l) = (rate.arrivals_sd(), loss.arrivals_sd());
        eprintln!(
            "chain {} {}x: arrivals sd per 100 ms rate {r:.1} loss {l:.1} (ratio {:.2}, target <= 0.33)",
            rate.spec.server.name(),
            rate.spec.load,
            if l > 0.0 { r / l } else { f64::NAN }
        );
    }
}

fn write_docs(dir: &std::path::Path, setup: &Setup, cells: &[Cell], t: &str) -> anyhow::Result<()> {
    let c = f64::from(setup.capacity);
    let mut servers: Vec<ServerKind> = Vec::new();
    for cell in cells {
        if !servers.contains(&cell.spec.server) {
            servers.push(cell.spec.server);
        }
    }
    for (i, &server) in servers.iter().enumerate() {
        let mut left = Vec::new();
        for path in PathKind::ALL {
            let points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|x| x.spec.server == server && x.spec.path == path)
                .map(|x| (x.spec.load, x.goodput(setup.timeout) / c))
                .collect();
            if !points.is_empty() {
                left.push(Series {
                    name: path.name().into(),
                    points,
                });
            }
        }
        let chart = Chart {
            title: format!("Goodput vs offered load, server {}", server.name()),
            x_label: "offered load (x C)".into(),
            y_label: format!(
                "goodput / C (2001 within {} s)",
                setup.timeout.as_secs_f64()
            ),
            left,
            right: None,
            note: format!("C = {}/s, medians", setup.capacity),
        };
        let name = ["overload-goodput-fifo.svg", "overload-goodput-reject.svg"][i.min(1)];
        std::fs::write(dir.join(name), chart.render())?;
    }
    if let Some(cell) = cells.iter().find(|x| {
        x.spec.path == PathKind::AgentDoic
            && x.spec.load == 5.0
            && x.spec.server == ServerKind::Fifo
    }) && let Some(run) = cell.runs.first()
    {
        std::fs::write(
            dir.join("overload-episode.svg"),
            episode(setup, cell, run).render(),
        )?;
    }
    bench::figures::write_between(&dir.join("overload.md"), BEGIN, END, t)
}

/// The time series of one run: offered, admitted, throttled (offered less
/// admitted: answered by the agent itself), and the server's queue wait.
fn episode(setup: &Setup, cell: &Cell, run: &Run) -> Chart {
    let offered = f64::from(setup.capacity) * cell.spec.load;
    let pts = |f: &dyn Fn(&bench::overload::Sample) -> f64| -> Vec<(f64, f64)> {
        run.samples.iter().map(|s| (s.at, f(s))).collect()
    };
    Chart {
        title: format!(
            "One {}x episode through the agent with [doic], server {}",
            cell.spec.load,
            cell.spec.server.name()
        ),
        x_label: "seconds".into(),
        y_label: format!("requests/s (per {} ms)", SAMPLE.as_millis()),
        left: vec![
            Series {
                name: "offered".into(),
                points: pts(&|_| offered),
            },
            Series {
                name: "admitted (at the server)".into(),
                points: pts(&|s| s.admitted),
            },
            Series {
                name: "throttled (offered - admitted)".into(),
                points: pts(&|s| (offered - s.admitted).max(0.0)),
            },
        ],
        right: Some((
            "server queue wait (ms)".into(),
            vec![Series {
                name: "server queue wait".into(),
                points: pts(&|s| s.server_wait_ms),
            }],
        )),
        note: "the limit (doic_protect_limit) is not plotted: the agent does not publish it yet"
            .into(),
    }
}

//! `bench-overload`: goodput under overload (RFC 7068 §3), open loop, at
//! multiples of a server's capacity C, for each server kind and path of
//! `bench::overload`, in interleaved rounds; medians. Prints the table and,
//! with `--docs DIR`, writes it into `DIR/overload.md` (between its
//! markers) with the SVG plots: goodput vs offered load per path, and the
//! time series of one 5x episode through the agent with `[doic]`.
//!
//! Server `fd` (server (c)) is freeDiameter's `test_app` server held to
//! `--fd-share` of one CPU by a cgroup (root); its capacity C is measured
//! first (`bench::overload::fd_server::calibrate`, closed loop, then
//! `sustained`: the rate it keeps up with open loop, direct) and its loads
//! are multiples of that C.
//!
//! With `--require F` it fails unless every gated path (`--gated`, default
//! `agent-doic`) reaches goodput >= F x C at every load measured, and with
//! `--max-p99-ms M` unless the median p99 of its 2001 answers' latency is
//! at most M ms there.

use std::time::Duration;

use anyhow::{Context, bail};
use bench::overload::fd_server::{self, FdShare};
use bench::overload::svg::{Chart, Series};
use bench::overload::{
    Cell, CellSpec, PathKind, Run, SAMPLE, SERVER, ServerKind, Setup, measure, table,
};
use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "bench-overload",
    about = "Goodput under overload: direct, freeDiameter relay, the agent with and without DOIC, an agent chain"
)]
struct Args {
    /// The built-in servers' capacity C, requests per second.
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
    /// Server kinds: `fifo`, `reject`, `fd` (freeDiameter's test_app in a
    /// cgroup, its C measured first).
    #[arg(long, value_delimiter = ',', default_value = "fifo,reject,fd")]
    servers: Vec<String>,
    /// Server `fd`'s share of one CPU.
    #[arg(long, default_value_t = 0.1)]
    fd_share: f64,
    /// Server `fd`'s cgroup bandwidth period, µs.
    #[arg(long, default_value_t = 20_000)]
    fd_period_us: u64,
    /// Server `fd` on a CPU of its own (the last this process may use),
    /// and the benchmark (client, relays) on the others while it runs: two
    /// hosts, as in a deployment, where otherwise the relays' CPU and the
    /// server's contend on the same cores. The built-in servers' cells
    /// keep every CPU.
    #[arg(long)]
    fd_own_cpu: bool,
    /// Seconds of each closed-loop run measuring server `fd`'s C.
    #[arg(long, default_value_t = 3.0)]
    fd_calibration: f64,
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
    /// Requests carry Destination-Host (the server): host-routed, so that a
    /// reacting node in front knows which server they reach (RFC 7683 §2).
    #[arg(long)]
    host_routed: bool,
    /// A `[doic.protect]` setting of the agent next to the server (paths
    /// `agent-doic`, `chain-rate`, `chain-loss`), e.g. `slack = 0.05`;
    /// repeatable (docs/protect.md, "Configuration").
    #[arg(long, value_name = "KEY = VALUE")]
    protect: Vec<String>,
    /// Fail unless every gated path reaches this share of C at every load.
    #[arg(long)]
    require: Option<f64>,
    /// Fail unless every gated path's 2001 latency p99 (median over the
    /// rounds) is at most this many milliseconds at every load.
    #[arg(long, value_name = "MS")]
    max_p99_ms: Option<f64>,
    /// Fail unless, at every server and load measured with both
    /// `chain-rate` and `chain-loss`, the standard deviation of arrivals at
    /// the server per 100 ms under rate is at most this share of that under
    /// loss (issue 12's target: 1/3).
    #[arg(long, value_name = "RATIO")]
    max_chain_sd_ratio: Option<f64>,
    /// The paths `--require` and `--max-p99-ms` apply to.
    #[arg(long, value_delimiter = ',', default_value = "agent-doic")]
    gated: Vec<String>,
    /// Print each run's arrivals at the server per 100 ms (requests/s) and
    /// the server's queue wait, one line per run, after its summary line.
    #[arg(long)]
    series: bool,
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
    let fd_cpu = if args.fd_own_cpu {
        let cpus = bench::relay_ab::allowed_cpus()?;
        let Some(&last) = cpus.last().filter(|_| cpus.len() > 1) else {
            bail!("--fd-own-cpu needs two CPUs or more, this process may use {cpus:?}");
        };
        eprintln!("server fd on CPU {last}, the benchmark on the others while it runs");
        Some(last)
    } else {
        None
    };
    let setup = Setup {
        capacity: args.capacity,
        seconds: args.seconds,
        timeout: Duration::from_secs_f64(args.timeout),
        warmup: args.warmup,
        drain: Duration::from_secs_f64(args.drain),
        host_routed: args.host_routed,
        protect: args.protect.join("\n"),
    };
    let peers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let servers: Vec<ServerKind> = args
        .servers
        .iter()
        .map(|s| match s.as_str() {
            "fifo" => Ok(ServerKind::Fifo),
            "reject" => Ok(ServerKind::Reject(args.reject_cost)),
            "fd" => {
                let cpu = FdShare {
                    share: args.fd_share,
                    period_us: args.fd_period_us,
                    own_cpu: fd_cpu,
                };
                let cal = fd_server::calibrate(SERVER, cpu, args.fd_calibration)
                    .context("measuring the capacity of server fd")?;
                eprintln!(
                    "server fd: freeDiameter test_app at {} CPU (period {} ms), closed loop: {}",
                    cpu.share,
                    cpu.period_us / 1000,
                    cal.line()
                );
                let kept = fd_server::sustained(&peers, &setup, cpu, cal.capacity)
                    .context("measuring the rate server fd sustains")?;
                eprintln!("server fd: open loop, direct: {}", kept.line());
                Ok(ServerKind::Fd {
                    cpu,
                    capacity: kept.capacity,
                })
            }
            _ => bail!("unknown server {s:?}: fifo, reject or fd"),
        })
        .collect::<anyhow::Result<_>>()?;
    let kinds = paths(&args.paths)?;
    let gated = paths(&args.gated)?;
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
                r.goodput(setup.timeout) / f64::from(setup.capacity_of(cell.spec.server)),
                r.sent,
                r.answered,
                run.unanswered(),
                r.ok_percentile_us(99.0) / 1000,
                run.arrivals_sd(),
                r.by_code
            );
            if args.series {
                let line = |f: &dyn Fn(&bench::overload::Sample) -> Option<f64>| -> String {
                    let v: Vec<String> = run
                        .samples
                        .iter()
                        .map(|x| f(x).map_or("-".into(), |v| format!("{v:.0}")))
                        .collect();
                    v.join(" ")
                };
                eprintln!("  arrivals/s per 100 ms: {}", line(&|x| x.admitted));
                eprintln!("  server wait ms: {}", line(&|x| x.server_wait_ms));
                eprintln!("  the agent's limit/s: {}", line(&|x| x.limit));
                eprintln!(
                    "  latency seen by the agent, ms: {}",
                    line(&|x| x.latency_ms)
                );
            }
            cell.runs.push(run);
        }
    }
    let chain = chain_summary(&cells);
    let t = table(&setup, &cells) + &chain_table(&chain);
    println!("\n{t}");
    for cell in &cells {
        let share = cell.sent_share(&setup);
        if share < 0.95 {
            eprintln!(
                "warning: the load client sent only {share:.2} of the offered load in {:?}: the figure measures the client",
                cell.spec
            );
        }
    }
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
    if let Some(max) = args.max_chain_sd_ratio {
        anyhow::ensure!(
            !chain.is_empty(),
            "--max-chain-sd-ratio without chain-rate and chain-loss cells"
        );
        let rough: Vec<String> = chain
            .iter()
            .filter_map(|c| {
                let ratio = c.ratio();
                eprintln!(
                    "gate: chain {} arrivals sd rate {:.1} / loss {:.1} = {ratio:.2} (at most {max:.2})",
                    c.label, c.rate, c.loss
                );
                (ratio.is_nan() || ratio > max).then(|| format!("{}: {ratio:.2}", c.label))
            })
            .collect();
        anyhow::ensure!(
            rough.is_empty(),
            "chain arrivals sd rate / loss above {max:.2}: {}",
            rough.join("; ")
        );
    }
    if let Some(req) = args.require {
        let mut failed = Vec::new();
        for cell in cells.iter().filter(|x| gated.contains(&x.spec.path)) {
            let g = cell.goodput_share(&setup);
            let direct = cells
                .iter()
                .find(|d| {
                    d.spec.path == PathKind::Direct
                        && d.spec.server == cell.spec.server
                        && d.spec.load == cell.spec.load
                })
                .map(|d| d.goodput_share(&setup));
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

/// One (server, load) of the RFC 8581 chain: the standard deviation of
/// per-[`SAMPLE`] arrivals at the server under rate and under loss.
struct Chain {
    label: String,
    rate: f64,
    loss: f64,
}

impl Chain {
    /// Rate's standard deviation as a share of loss's (target <= 1/3).
    fn ratio(&self) -> f64 {
        if self.loss > 0.0 {
            self.rate / self.loss
        } else {
            f64::NAN
        }
    }
}

/// The chain's smoothness for every server and load measured with both
/// `chain-rate` and `chain-loss` (servers whose arrivals are sampled).
fn chain_summary(cells: &[Cell]) -> Vec<Chain> {
    let mut out = Vec::new();
    for rate in cells.iter().filter(|c| c.spec.path == PathKind::ChainRate) {
        let Some(loss) = cells.iter().find(|c| {
            c.spec.path == PathKind::ChainLoss
                && c.spec.server == rate.spec.server
                && c.spec.load == rate.spec.load
        }) else {
            continue;
        };
        let (Some(r), Some(l)) = (rate.arrivals_sd(), loss.arrivals_sd()) else {
            continue;
        };
        out.push(Chain {
            label: format!("{} {}x", rate.spec.server.name(), rate.spec.load),
            rate: r,
            loss: l,
        });
    }
    out
}

/// The chain figure as Markdown lines (empty without chain cells).
fn chain_table(chain: &[Chain]) -> String {
    if chain.is_empty() {
        return String::new();
    }
    let mut t = format!(
        "\nAgent chain, arrivals at the server per {} ms, standard deviation (medians of the rounds; target: rate / loss <= 0.33):\n\n\
         | server, offered | chain-rate sd | chain-loss sd | rate / loss |\n| --- | ---: | ---: | ---: |\n",
        SAMPLE.as_millis()
    );
    for c in chain {
        t.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.2} |\n",
            c.label,
            c.rate,
            c.loss,
            c.ratio()
        ));
    }
    t
}

fn write_docs(dir: &std::path::Path, setup: &Setup, cells: &[Cell], t: &str) -> anyhow::Result<()> {
    let mut servers: Vec<ServerKind> = Vec::new();
    for cell in cells {
        if !servers.contains(&cell.spec.server) {
            servers.push(cell.spec.server);
        }
    }
    for &server in &servers {
        let mut left = Vec::new();
        for path in PathKind::ALL {
            let points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|x| x.spec.server == server && x.spec.path == path)
                .map(|x| (x.spec.load, x.goodput_share(setup)))
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
            note: format!("C = {}/s, medians", setup.capacity_of(server)),
        };
        let name = format!("overload-goodput-{}.svg", server.slug());
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
/// admitted: answered by the agent itself), the agent's limit, and the
/// server's queue wait.
fn episode(setup: &Setup, cell: &Cell, run: &Run) -> Chart {
    let offered = f64::from(setup.capacity) * cell.spec.load;
    let pts = |f: &dyn Fn(&bench::overload::Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        run.samples
            .iter()
            .filter_map(|s| Some((s.at, f(s)?)))
            .collect()
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
                points: pts(&|_| Some(offered)),
            },
            Series {
                name: "admitted (at the server)".into(),
                points: pts(&|s| s.admitted),
            },
            Series {
                name: "throttled (offered - admitted)".into(),
                points: pts(&|s| s.admitted.map(|a| (offered - a).max(0.0))),
            },
            Series {
                name: "the agent's limit (doic_protect_limit)".into(),
                points: pts(&|s| s.limit),
            },
        ],
        right: Some((
            "server queue wait (ms)".into(),
            vec![Series {
                name: "server queue wait".into(),
                points: pts(&|s| s.server_wait_ms),
            }],
        )),
        note: "the limit: from the agent's first limit on".into(),
    }
}

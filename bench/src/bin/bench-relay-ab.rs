//! `bench-relay-ab`: the relay's throughput with a subject on against off,
//! measured side by side at the same time. The subject (`--subject`) is the
//! kernel telemetry program (`ebpf`, the default: attached as the agent does)
//! or overload control (`doic`: an agent with `[doic]` and no overload,
//! against its twin without; both are in each side and the load client is
//! pointed at one or the other), or the durable audit log (`audit`: two
//! agents with `[doic]`, one writing the log to a directory). With `--doic-client` the load client is a
//! DOIC reacting node (OC-Supported-Features in every request, trusted by
//! the DOIC agent): the relay's DOIC client path, which the agent without
//! `[doic]` relays untouched.
//!
//! Two identical relays (built-in load client, agent with one worker,
//! built-in server, as `bench-relay --builtin`) run simultaneously, each in
//! its own network namespace on its own `lo` (module `bench::relay_ab`). By
//! default each is limited to 0.3 CPU in a cgroup of its own and both run on
//! one CPU (`--cpu-limit`, `--pin`): a closed loop that could go faster runs
//! at its limit, so its rate is the limit over its CPU time per request and
//! any cost of the program shows as lost throughput. A cycle has four
//! rounds of `--seconds`: the program attached (`--mode`) in side 0, then in
//! side 1, then in neither, twice. Machine noise hits both sides alike and
//! cancels in the ratio of their rates; pairing the two rounds of each kind
//! cancels a constant asymmetry between the sides (`bench::relay_ab::paired`).
//! The program-free rounds give the same statistic with no program at all
//! (A/A): the method's own error.
//!
//! Unless `--no-gate`, the run fails when an A/A median (throughput, CPU per
//! request) is more than `--aa-limit` from 1 (the sides were not comparable;
//! with `--no-gate` that is printed instead), or when the median throughput
//! ratio is below `1 - tolerance`;
//! for `doic` also when the relay's own capacity ratio (the inverse of its
//! worker thread's CPU time per request, with over without) is. Medians come
//! with a distribution-free 95% confidence interval.
//!
//! With `--bpf-stats` the kernel times every run of the program
//! (`kernel.bpf_stats_enabled`); the program's run time per relayed request,
//! over the CPU time per request of the side without it, is then printed as
//! the program's share of the relay's CPU cost. `--extra N` attaches N more
//! copies of the program on TC ingress and egress in the subject side: a
//! costlier program, to show that the gate fails when it should.
//!
//! Needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for namespaces and
//! cgroups).

use clap::Parser;

use bench::relay::median;
use bench::relay_ab::{CpuLimit, Cycle, Netns, Side, Subject, measure_both, median_ci};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "bench-relay-ab",
    about = "Relay throughput with the kernel program or DOIC on vs off, side by side"
)]
struct Args {
    /// What is turned on and off: `ebpf` (the kernel program), `doic`, or
    /// `audit` (the audit log, `[doic]` on both sides).
    #[arg(long, default_value = "ebpf")]
    subject: Subject,
    /// Seconds per round.
    #[arg(long, default_value_t = 1)]
    seconds: u64,
    /// Cycles (each: program in side 0, in side 1, in neither twice).
    #[arg(long, default_value_t = 8)]
    cycles: usize,
    /// Outstanding requests of each side's closed loop.
    #[arg(long, default_value_t = 64)]
    outstanding: usize,
    /// Ingress attach mode, as in `[ebpf] mode`.
    #[arg(long, default_value = "auto")]
    mode: String,
    /// Largest accepted throughput loss with the program attached.
    #[arg(long, default_value_t = 0.03)]
    tolerance: f64,
    /// Largest accepted loss of the relay worker's capacity with DOIC on
    /// (`doic`); the throughput tolerance when not given.
    #[arg(long)]
    capacity_tolerance: Option<f64>,
    /// Largest accepted distance of the A/A median from 1.
    #[arg(long, default_value_t = 0.01)]
    aa_limit: f64,
    /// The load client is a DOIC reacting node: OC-Supported-Features (loss,
    /// rate, peer report, its own SourceID) in every request, and the agent
    /// with `[doic]` trusts it (RFC 7683 §5.1.1, §10.4).
    #[arg(long)]
    doic_client: bool,
    /// Extra copies of the program in the subject side (TC ingress + egress).
    #[arg(long, default_value_t = 0)]
    extra: usize,
    /// Print the figures and check the A/A medians, but do not gate on the
    /// tolerance.
    #[arg(long)]
    no_gate: bool,
    /// Enable `kernel.bpf_stats_enabled` for the run (restored after) and
    /// report the program's share of the CPU per request.
    #[arg(long)]
    bpf_stats: bool,
    /// CPU placement of the sides: `split` (each on its own CPU), `shared`
    /// (both on the first CPU this process may use) or `none`.
    #[arg(long, default_value = "shared")]
    pin: String,
    /// Limit each side to this fraction of one CPU (its own cgroup), so
    /// that it is CPU-bound at the limit; 0 for no limit.
    #[arg(long, default_value_t = 0.3)]
    cpu_limit: f64,
    /// Period of the CPU limit, microseconds.
    #[arg(long, default_value_t = 10_000)]
    cpu_period_us: u64,
    /// Internal: the side's cgroup.
    #[arg(long, hide = true)]
    cgroup: Option<std::path::PathBuf>,
    /// Internal: the side's CPU.
    #[arg(long, hide = true)]
    cpu: Option<usize>,
    /// Internal: run as one side, in this network namespace.
    #[arg(long, hide = true)]
    side: Option<String>,
}

const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Sets `kernel.bpf_stats_enabled` and restores the previous value on drop.
struct StatsEnabled(String);

impl StatsEnabled {
    fn new() -> anyhow::Result<Self> {
        let before = std::fs::read_to_string(STATS).unwrap_or_else(|_| "0".into());
        std::fs::write(STATS, "1").map_err(|e| anyhow::anyhow!("enable {STATS}: {e}"))?;
        Ok(Self(before.trim().to_owned()))
    }
}

impl Drop for StatsEnabled {
    fn drop(&mut self) {
        let _ = std::fs::write(STATS, &self.0);
    }
}

/// Starts the two sides, each in its namespace (and CPU cgroup, and on its
/// CPU, as asked), and checks that each can attach the program.
fn start_sides(args: &Args, ns: &[Netns; 2], limits: &[CpuLimit]) -> anyhow::Result<[Side; 2]> {
    let exe = std::env::current_exe()?;
    let cpus = bench::relay_ab::allowed_cpus()?;
    let side = |i: usize| {
        let cpu = match args.pin.as_str() {
            "split" => Some(cpus[i % cpus.len()]),
            "shared" => Some(cpus[0]),
            "none" => None,
            other => anyhow::bail!("--pin {other}: expected split, shared or none"),
        };
        let cgroup = limits.get(i).map(|l| l.dir.as_path());
        Side::spawn(
            &exe,
            &ns[i].name,
            args.subject,
            &args.mode,
            (args.outstanding, args.doic_client),
            cpu,
            cgroup,
        )
    };
    let mut sides = [side(0)?, side(1)?];
    // Attach once in each side up front: a refusal is an error, not a fallback.
    for s in &mut sides {
        s.command("attach 0")?;
        s.command("detach")?;
    }
    Ok(sides)
}

/// One cycle: the program in side 0, in side 1, in neither (twice).
fn cycle(sides: &mut [Side; 2], args: &Args) -> anyhow::Result<Cycle> {
    let attach = format!("attach {}", args.extra);
    let mut with = Vec::new();
    for subject in 0..2 {
        sides[subject].command(&attach)?;
        with.push(measure_both(sides, args.seconds)?);
        sides[subject].command("detach")?;
    }
    Ok(Cycle {
        with: [with[0], with[1]],
        without: [
            measure_both(sides, args.seconds)?,
            measure_both(sides, args.seconds)?,
        ],
    })
}

/// The median of `f` over the cycles, with its 95% interval.
fn summary(cycles: &[Cycle], f: impl Fn(&Cycle) -> f64) -> (f64, String) {
    let v: Vec<f64> = cycles.iter().map(f).collect();
    let ci =
        median_ci(&v, 0.95).map_or_else(|| "n/a".into(), |(lo, hi)| format!("[{lo:.4}, {hi:.4}]"));
    (median(v), ci)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(ns) = &args.side {
        // Before any thread exists: the whole side lives in the namespace,
        // the cgroup and on the CPU.
        bench::relay_ab::enter(ns)?;
        if let Some(c) = &args.cgroup {
            bench::relay_ab::join_cgroup(c)?;
        }
        if let Some(c) = args.cpu {
            bench::relay_ab::pin(c)?;
        }
        return bench::relay_ab::serve_side(
            args.subject,
            &args.mode,
            args.outstanding,
            args.doic_client,
        );
    }
    anyhow::ensure!(
        args.cycles >= 6,
        "--cycles must be at least 6 (for a 95% interval)"
    );
    let _stats = args.bpf_stats.then(StatsEnabled::new).transpose()?;
    let pid = std::process::id();
    let name = |i: usize| format!("doic-ab-{pid}-{i}");
    let ns = [Netns::new(&name(0))?, Netns::new(&name(1))?];
    let limits = if args.cpu_limit > 0.0 {
        let limit = |i| CpuLimit::new(&name(i), args.cpu_limit, args.cpu_period_us);
        vec![limit(0)?, limit(1)?]
    } else {
        Vec::new()
    };
    let mut sides = start_sides(&args, &ns, &limits)?;
    println!(
        "bench-relay-ab: subject {}{}; {} cycles x 4 rounds x {} s; two relays side by side, one namespace each (closed loop {} outstanding, 1 worker), pin {}, CPU limit {} per side; mode {}, {} extra copies, bpf stats {}",
        args.subject,
        if args.doic_client {
            " (DOIC client: OC-Supported-Features in every request)"
        } else {
            ""
        },
        args.cycles,
        args.seconds,
        args.outstanding,
        args.pin,
        args.cpu_limit,
        args.mode,
        args.extra,
        if args.bpf_stats { "on" } else { "off" }
    );
    let mut cycles = Vec::new();
    for i in 0..args.cycles {
        let c = cycle(&mut sides, &args)?;
        let [a, b] = c.with;
        println!(
            "cycle {i:>2}: throughput with/without {:.4} (side 0 {:.0}/{:.0}/s, side 1 {:.0}/{:.0}/s), A/A {:.4}; cpu/request {:.4}, A/A {:.4}; relay cpu/request {:.4}, A/A {:.4}; busy {:.4}; {:.0} ns cpu/request without, program {:.0} ns/request",
            c.throughput(),
            a[0].rate,
            b[0].rate,
            b[1].rate,
            a[1].rate,
            c.aa(),
            c.cpu(),
            c.aa_cpu(),
            c.relay(),
            c.aa_relay(),
            c.busy(),
            (a[1].cpu_ns + b[0].cpu_ns) / 2.0,
            (a[0].bpf_ns + b[1].bpf_ns) / 2.0,
        );
        cycles.push(c);
    }
    drop(sides);
    let (ratio, ratio_ci) = summary(&cycles, Cycle::throughput);
    let (aa, aa_ci) = summary(&cycles, Cycle::aa);
    let (cpu, cpu_ci) = summary(&cycles, Cycle::cpu);
    let (aa_cpu, aa_cpu_ci) = summary(&cycles, Cycle::aa_cpu);
    let (relay, relay_ci) = summary(&cycles, Cycle::relay);
    let (aa_relay, aa_relay_ci) = summary(&cycles, Cycle::aa_relay);
    let (busy, _) = summary(&cycles, Cycle::busy);
    let (util, _) = summary(&cycles, Cycle::utilisation);
    println!(
        "throughput with/without: median {ratio:.4}, 95% CI {ratio_ci}; A/A median {aa:.4}, 95% CI {aa_ci}"
    );
    println!(
        "cpu per request with/without: median {cpu:.4}, 95% CI {cpu_ci}; A/A median {aa_cpu:.4}, 95% CI {aa_cpu_ci}"
    );
    println!(
        "relay worker cpu per request with/without: median {relay:.4}, 95% CI {relay_ci}; A/A median {aa_relay:.4}, 95% CI {aa_relay_ci}; relay capacity ratio {:.4}",
        1.0 / relay
    );
    println!("cpu used per second with/without: median {busy:.4}; per side: {util:.3} CPU");
    if args.bpf_stats {
        let (share, share_ci) = summary(&cycles, Cycle::program_share);
        println!(
            "program run time / cpu per request without: median {share:.4}, 95% CI {share_ci} (the statistics' own timer included)"
        );
    }
    let comparable = (aa - 1.0).abs() <= args.aa_limit && (aa_cpu - 1.0).abs() <= args.aa_limit;
    let loss = (1.0 - ratio) * 100.0;
    if args.no_gate {
        // A measurement that is only reported does not fail on the
        // machine's noise: it says that this run's figure is not one.
        if comparable {
            println!("measured only (--no-gate): loss {loss:.1}%");
        } else {
            println!(
                "measured only (--no-gate): A/A medians {aa:.4} (throughput), {aa_cpu:.4} (cpu) are more than {:.1}% from 1, so this run's loss ({loss:.1}%) is not a figure",
                args.aa_limit * 100.0
            );
        }
        return Ok(());
    }
    anyhow::ensure!(
        comparable,
        "A/A medians {aa:.4} (throughput), {aa_cpu:.4} (cpu) are more than {:.1}% from 1: the sides are not comparable in this run",
        args.aa_limit * 100.0
    );
    anyhow::ensure!(
        ratio >= 1.0 - args.tolerance,
        "throughput with {} on is {loss:.1}% below without, beyond the {:.1}% bound",
        args.subject,
        args.tolerance * 100.0
    );
    if matches!(args.subject, Subject::Doic | Subject::Audit) {
        // The relay's own capacity: what a saturated relay would lose.
        let capacity_loss = (1.0 - 1.0 / relay) * 100.0;
        let bound = args.capacity_tolerance.unwrap_or(args.tolerance);
        anyhow::ensure!(
            1.0 / relay >= 1.0 - bound,
            "the relay's capacity with DOIC on is {capacity_loss:.1}% below without, beyond the {:.1}% bound",
            bound * 100.0
        );
        println!(
            "relay capacity loss {capacity_loss:.1}% <= {:.1}%",
            bound * 100.0
        );
    }
    println!("pass: loss {loss:.1}% <= {:.1}%", args.tolerance * 100.0);
    Ok(())
}

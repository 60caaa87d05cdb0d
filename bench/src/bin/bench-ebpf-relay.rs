//! `bench-ebpf-relay`: the relay's throughput with the kernel telemetry
//! program attached against without, measured side by side at the same time.
//!
//! Two identical relays (built-in load client, agent with one worker,
//! built-in server, as `bench-relay --builtin`) run simultaneously, each in
//! its own network namespace on its own `lo` (module `bench::ebpf_ab`). A
//! cycle has four rounds of `--seconds` each: the program attached (`--mode`,
//! default `auto`: generic XDP on `lo` plus TC egress, the agent's defaults)
//! in side 0, then in side 1, then in neither, twice. Machine noise hits both
//! sides alike and cancels in the ratio of their rates; pairing the two
//! rounds of each kind cancels a constant asymmetry between the sides
//! (`bench::ebpf_ab::paired`). The with-program rounds give the figure
//! (rate with / rate without); the program-free rounds give the same
//! statistic with no program at all (A/A), which shows the method's own
//! error.
//!
//! The run fails unless the median of the per-cycle ratios is at least
//! `1 - tolerance` AND the A/A median lies within `--aa-limit` of 1 (a run
//! whose method is off by more than that proves nothing). Both medians come
//! with a distribution-free 95% confidence interval.
//!
//! With `--bpf-stats` the kernel times every run of the program
//! (`kernel.bpf_stats_enabled`); the program's run time per relayed request,
//! over the CPU time per request of the side without it, is then printed as
//! the program's share of the relay's CPU cost. `--extra N` attaches N more
//! copies of the program on TC ingress and egress in the subject side: a
//! costlier program, to show that the gate fails when it should.
//!
//! Needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for namespaces).

use clap::Parser;

use bench::ebpf_ab::{Netns, Side, measure_both, median_ci, paired};
use bench::relay::median;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "bench-ebpf-relay",
    about = "Relay throughput with the kernel telemetry program attached vs without, side by side"
)]
struct Args {
    /// Seconds per round.
    #[arg(long, default_value_t = 1)]
    seconds: u64,
    /// Cycles (each: program in side 0, in side 1, in neither twice).
    #[arg(long, default_value_t = 12)]
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
    /// Largest accepted distance of the A/A median from 1.
    #[arg(long, default_value_t = 0.01)]
    aa_limit: f64,
    /// Extra copies of the program in the subject side (TC ingress + egress).
    #[arg(long, default_value_t = 0)]
    extra: usize,
    /// Enable `kernel.bpf_stats_enabled` for the run (restored after) and
    /// report the program's share of the CPU per request.
    #[arg(long)]
    bpf_stats: bool,
    /// CPU placement of the sides: `split` (side i on CPU i), `shared`
    /// (both on CPU 0) or `none`.
    #[arg(long, default_value = "none")]
    pin: String,
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

fn fmt_ci(ci: Option<(f64, f64)>) -> String {
    ci.map_or_else(|| "n/a".into(), |(lo, hi)| format!("[{lo:.4}, {hi:.4}]"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(ns) = &args.side {
        // Before any thread exists: the whole side lives in the namespace.
        bench::ebpf_ab::enter(ns)?;
        if let Some(c) = args.cpu {
            bench::ebpf_ab::pin(c)?;
        }
        return bench::ebpf_ab::serve_side(&args.mode, args.outstanding);
    }
    anyhow::ensure!(
        args.cycles >= 6,
        "--cycles must be at least 6 (for a 95% interval)"
    );
    let _stats = args.bpf_stats.then(StatsEnabled::new).transpose()?;
    let exe = std::env::current_exe()?;
    let pid = std::process::id();
    let ns = [
        Netns::new(&format!("doic-ab-{pid}-0"))?,
        Netns::new(&format!("doic-ab-{pid}-1"))?,
    ];
    let cpu = |i: usize| match args.pin.as_str() {
        "split" => Ok(Some(i)),
        "shared" => Ok(Some(0)),
        "none" => Ok(None),
        other => Err(anyhow::anyhow!(
            "--pin {other}: expected split, shared or none"
        )),
    };
    let mut sides = [
        Side::spawn(&exe, &ns[0].name, &args.mode, args.outstanding, cpu(0)?)?,
        Side::spawn(&exe, &ns[1].name, &args.mode, args.outstanding, cpu(1)?)?,
    ];
    // Attach once in each side up front: a refusal is an error, not a fallback.
    for s in &mut sides {
        s.command("attach 0")?;
        s.command("detach")?;
    }
    println!(
        "bench-ebpf-relay: {} cycles x 4 rounds x {} s, two relays side by side (one namespace each, closed loop {} outstanding, 1 worker), mode {}, {} extra copies, bpf stats {}",
        args.cycles,
        args.seconds,
        args.outstanding,
        args.mode,
        args.extra,
        if args.bpf_stats { "on" } else { "off" }
    );
    let (mut ratios, mut aa, mut cpu, mut share) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let attach = format!("attach {}", args.extra);
    for cycle in 0..args.cycles {
        let mut with = Vec::new();
        for subject in 0..2 {
            sides[subject].command(&attach)?;
            with.push(measure_both(&mut sides, args.seconds)?);
            sides[subject].command("detach")?;
        }
        let a = measure_both(&mut sides, args.seconds)?;
        let b = measure_both(&mut sides, args.seconds)?;
        let (w0, w1) = (with[0], with[1]);
        let ratio = paired(w0, w1);
        let aa_ratio = paired(a, b);
        let cpu_ratio = ((w0[0].cpu_ns / w0[1].cpu_ns) * (w1[1].cpu_ns / w1[0].cpu_ns)).sqrt();
        let bpf_share = (w0[0].bpf_ns / w0[1].cpu_ns + w1[1].bpf_ns / w1[0].cpu_ns) / 2.0;
        println!(
            "cycle {cycle:>2}: with/without {ratio:.4} (side 0 {:>6.0}/{:>6.0}/s, side 1 {:>6.0}/{:>6.0}/s)  A/A {aa_ratio:.4}  cpu/request with/without {cpu_ratio:.4} ({:.0} ns without)  program {:.0} ns/request",
            w0[0].rate,
            w0[1].rate,
            w1[1].rate,
            w1[0].rate,
            (w0[1].cpu_ns + w1[0].cpu_ns) / 2.0,
            (w0[0].bpf_ns + w1[1].bpf_ns) / 2.0,
        );
        ratios.push(ratio);
        aa.push(aa_ratio);
        cpu.push(cpu_ratio);
        share.push(bpf_share);
    }
    drop(sides);
    let (ratio, aa_median) = (median(ratios.clone()), median(aa.clone()));
    println!(
        "throughput with/without: median {ratio:.4}, 95% CI {}; A/A: median {aa_median:.4}, 95% CI {}",
        fmt_ci(median_ci(&ratios, 0.95)),
        fmt_ci(median_ci(&aa, 0.95))
    );
    println!(
        "cpu per relayed request with/without: median {:.4}, 95% CI {}",
        median(cpu.clone()),
        fmt_ci(median_ci(&cpu, 0.95))
    );
    if args.bpf_stats {
        println!(
            "program run time / cpu per request without: median {:.4} (kernel.bpf_stats_enabled; includes the statistics' own timer)",
            median(share)
        );
    }
    anyhow::ensure!(
        (aa_median - 1.0).abs() <= args.aa_limit,
        "A/A median {aa_median:.4} is more than {:.1}% from 1: the two sides are not comparable in this run",
        args.aa_limit * 100.0
    );
    anyhow::ensure!(
        ratio >= 1.0 - args.tolerance,
        "throughput with the program attached is {:.1}% below without, beyond the {:.1}% bound",
        (1.0 - ratio) * 100.0,
        args.tolerance * 100.0
    );
    println!(
        "pass: loss {:.1}% <= {:.1}%",
        (1.0 - ratio) * 100.0,
        args.tolerance * 100.0
    );
    Ok(())
}

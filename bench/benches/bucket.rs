//! `cargo bench -p bench --bench bucket [-- --check] [--rounds N] [--iters N] [--chunks N] [--limit R] [--only CASE] [--clock-rate N]`
//!
//! The RFC 8582 §8.3 leaky bucket against governor, case by case (see
//! `bench::bucket`). Prints one line per case,
//! `bucket <case> agent_ns=<x> governor_ns=<y> ratio=<x/y>`, then one line
//! per clock, `clock <name> ns_per_read=<x>`, writes them as
//! JSON to `target/bench-bucket.json`, and with `--check` exits non-zero
//! when a case is above `--limit` (1.0): both its ratio of medians and its
//! median paired ratio (see `CaseReport::over`). The one-thread-per-bucket
//! clock-per-decision cases run at the rate `bench::bucket::clock_case_rate`
//! finds for this machine (printed), or at `--clock-rate` per second.

use std::path::PathBuf;
use std::process::ExitCode;

use bench::bucket::{
    AgentClockPerDecision, AgentSide, CONTENDED_REAL_CLOCK_RATE, Case, CaseReport,
    GovernorClockPerDecision, GovernorSide, clock_case_rate, compare, compare_with,
};

struct Options {
    check: bool,
    rounds: usize,
    iters: u64,
    chunks: usize,
    limit: f64,
    only: Option<String>,
    clock_rate: Option<u32>,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        check: false,
        rounds: 15,
        iters: 2_000_000,
        chunks: 40,
        limit: 1.0,
        only: None,
        clock_rate: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--check" => o.check = true,
            "--rounds" => {
                o.rounds = value("--rounds")?
                    .parse()
                    .map_err(|e| format!("--rounds: {e}"))?;
            }
            "--iters" => {
                o.iters = value("--iters")?
                    .parse()
                    .map_err(|e| format!("--iters: {e}"))?;
            }
            "--chunks" => {
                o.chunks = value("--chunks")?
                    .parse()
                    .map_err(|e| format!("--chunks: {e}"))?;
            }
            "--limit" => {
                o.limit = value("--limit")?
                    .parse()
                    .map_err(|e| format!("--limit: {e}"))?;
            }
            "--only" => o.only = Some(value("--only")?),
            "--clock-rate" => {
                let rate: u32 = value("--clock-rate")?
                    .parse()
                    .map_err(|e| format!("--clock-rate: {e}"))?;
                if rate == 0 {
                    return Err("--clock-rate must be positive".into());
                }
                o.clock_rate = Some(rate);
            }
            // cargo bench passes --bench to every harness.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.rounds == 0 || o.chunks == 0 || o.iters < 1024 * o.chunks as u64 {
        return Err(
            "--rounds and --chunks must be positive, --iters at least 1024 per chunk".into(),
        );
    }
    Ok(o)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    )
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench-bucket: {e}");
            return ExitCode::from(2);
        }
    };
    let show = |r: &CaseReport| {
        println!("{}", r.line());
        eprintln!(
            "  paired ratio {:.3}; admitted: agent {:.3} governor {:.3}; chunk pairs with threads together: {} of {}{}",
            r.paired_ratio,
            r.agent_admitted,
            r.governor_admitted,
            r.together.0,
            r.together.1,
            if r.contention_measured {
                " (medians over those)"
            } else {
                " (too few: the threads rarely ran at the same time on this machine, \
                 so this is not a measure of contention; medians over all)"
            }
        );
        eprintln!(
            "  rounds: agent {:.3?} governor {:.3?}",
            r.agent_runs, r.governor_runs
        );
    };
    let mut failed = Vec::new();
    let mut cases = Vec::new();
    let cases_run: Vec<Case> = Case::ALL
        .into_iter()
        .filter(|c| o.only.as_deref().is_none_or(|n| n == c.name()))
        .collect();
    if cases_run.is_empty() {
        eprintln!("bench-bucket: --only takes single, contended or uncontended");
        return ExitCode::from(2);
    }
    for &case in &cases_run {
        // The bucket as its call contract says: time read once per batch.
        let r = compare::<AgentSide, GovernorSide>(case.name(), case, o.iters, o.rounds, o.chunks);
        show(&r);
        if r.over(o.limit) {
            failed.push(r.name.clone());
        }
        cases.push(r.json());
    }
    // The rate at which the one-thread clock-per-decision cases are
    // overloaded about twice on this machine, whatever its counter costs.
    let clock_rate = o.clock_rate.unwrap_or_else(|| clock_case_rate(500_000));
    println!("clock-per-decision rate_per_s={clock_rate}");
    for &case in &cases_run {
        // Each with its real clock read in every decision, as users get
        // them: the request path's clock against governor's QuantaClock.
        let name = format!("{}-clock-per-decision", case.name());
        let rate = match case {
            Case::Contended => CONTENDED_REAL_CLOCK_RATE,
            Case::Single | Case::Uncontended => clock_rate,
        };
        let r = compare_with(&name, case, (o.iters, o.rounds, o.chunks), &|| {
            (
                AgentClockPerDecision::new(rate),
                GovernorClockPerDecision::new(rate),
            )
        });
        show(&r);
        if r.over(o.limit) {
            failed.push(r.name.clone());
        }
        cases.push(r.json());
    }
    // What those clocks cost per read here, and the operating system's.
    let clocks = bench::bucket::clocks::read_costs(2_000_000, 9);
    for c in &clocks {
        println!("clock {} ns_per_read={:.2}", c.clock, c.ns);
        eprintln!("  rounds: {:.2?}", c.rounds);
    }
    let report = serde_json::json!({
        "rate_per_s": bench::bucket::RATE,
        "real_clock_rate_per_s": clock_rate,
        "contended_real_clock_rate_per_s": CONTENDED_REAL_CLOCK_RATE,
        "offered_load": bench::bucket::LOAD,
        "batch": bench::bucket::BATCH,
        "iters_per_thread": o.iters,
        "rounds": o.rounds,
        "chunks": o.chunks,
        "cases": cases,
        "clock_read_ns": clocks
            .iter()
            .map(|c| serde_json::json!({"clock": c.clock, "ns": c.ns, "rounds": c.rounds}))
            .collect::<Vec<_>>(),
    });
    let path = target_dir().join("bench-bucket.json");
    match serde_json::to_string_pretty(&report) {
        Ok(text) => {
            if let Err(e) = std::fs::write(&path, text) {
                eprintln!("bench-bucket: cannot write {}: {e}", path.display());
            }
        }
        Err(e) => eprintln!("bench-bucket: cannot encode the report: {e}"),
    }
    if o.check && !failed.is_empty() {
        eprintln!(
            "bench-bucket: ratio above {} in: {}",
            o.limit,
            failed.join(", ")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

//! `bench-handoff`: the cross-worker hand-off's CPU cost per request, apart
//! from the relay (module `bench::handoff`). For each window (requests in
//! flight), rounds alternate the two placements (both ends on one worker,
//! on two) and the medians of CPU time per round trip are printed, with
//! their difference: what a request and its answer cost for crossing
//! threads. Figures, no gate (docs/relay.md, "Threads").

use clap::Parser;

use bench::handoff::{Placement, run};
use bench::relay::median;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "bench-handoff",
    about = "CPU time per request of the hand-off between two workers"
)]
struct Args {
    /// Round trips per round.
    #[arg(long, default_value_t = 200_000)]
    round_trips: u64,
    /// Rounds per placement and window.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Windows (requests in flight) to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    windows: Vec<usize>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "{:>7} {:>16} {:>16} {:>16} {:>14}",
        "window", "same ns/rt", "cross ns/rt", "cross-same ns", "cross wall ns"
    );
    for &window in &args.windows {
        let (mut same, mut cross, mut wall) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.rounds {
            same.push(run(Placement::Same, window, args.round_trips)?.cpu_ns_per_round_trip());
            let c = run(Placement::Cross, window, args.round_trips)?;
            cross.push(c.cpu_ns_per_round_trip());
            wall.push(c.wall_ns as f64 / c.round_trips as f64);
        }
        let (s, c) = (median(same), median(cross));
        println!(
            "{window:>7} {s:>16.0} {c:>16.0} {:>16.0} {:>14.0}",
            c - s,
            median(wall)
        );
    }
    println!("ns/rt: CPU time of both ends per round trip (a request over, its answer back)");
    Ok(())
}

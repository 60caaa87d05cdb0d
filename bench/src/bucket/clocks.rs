//! What one clock read costs on this machine, measured in the run that
//! compares the buckets: the request path's [`agent::clock::Clock`] (the
//! CPU's counter through `quanta`, scaled), governor's default
//! `QuantaClock` (the same counter, scaled by governor), and the two clocks
//! of the operating system, `CLOCK_MONOTONIC` through the vDSO
//! ([`agent::clock::monotonic_ns`]) and `Instant::now`. The
//! `*-clock-per-decision` cases pay one of the first two per decision.

use std::hint::black_box;
use std::time::Instant;

use agent::clock::{Clock as AgentClock, monotonic_ns};
use governor::clock::{Clock as _, QuantaClock};

use super::{median, thread_cpu_ns};

/// One clock's cost: its name and the median CPU ns per read.
#[derive(Clone, Debug)]
pub struct ReadCost {
    /// The clock, as the report prints it.
    pub clock: &'static str,
    /// Median over the rounds of CPU ns per read.
    pub ns: f64,
    /// Every round's CPU ns per read.
    pub rounds: Vec<f64>,
}

/// CPU ns per read of `read`, over `reads` reads in a loop.
#[inline(never)]
fn per_read<T>(reads: u64, mut read: impl FnMut() -> T) -> f64 {
    let start = thread_cpu_ns();
    for _ in 0..reads {
        black_box(read());
    }
    thread_cpu_ns().saturating_sub(start) as f64 / reads as f64
}

/// Each clock's cost per read, `reads` reads per round, the clocks taking
/// turns round by round so that noise from the machine hits them alike.
#[must_use]
pub fn read_costs(reads: u64, rounds: usize) -> Vec<ReadCost> {
    let agent = AgentClock::new();
    let quanta = QuantaClock::default();
    let mut costs: Vec<ReadCost> = [
        "agent::clock::Clock::now_ns",
        "agent::clock::Clock::now",
        "governor QuantaClock::now",
        "clock_gettime(CLOCK_MONOTONIC)",
        "Instant::now",
    ]
    .into_iter()
    .map(|clock| ReadCost {
        clock,
        ns: 0.0,
        rounds: Vec::with_capacity(rounds),
    })
    .collect();
    for _ in 0..rounds {
        let figures = [
            per_read(reads, || agent.now_ns()),
            per_read(reads, || agent.now()),
            per_read(reads, || quanta.now()),
            per_read(reads, monotonic_ns),
            per_read(reads, Instant::now),
        ];
        for (cost, ns) in costs.iter_mut().zip(figures) {
            cost.rounds.push(ns);
        }
    }
    for cost in &mut costs {
        cost.ns = median(&cost.rounds);
    }
    costs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clock_is_measured_at_a_positive_cost() {
        let costs = read_costs(10_000, 3);
        assert_eq!(costs.len(), 5);
        for c in &costs {
            assert_eq!(c.rounds.len(), 3, "{c:?}");
            // A read takes time, and under a microsecond on any machine
            // this runs on.
            assert!(c.ns > 0.0 && c.ns < 1000.0, "{c:?}");
        }
    }
}

//! What TLS costs a relay hop (RFC 6733 §13), measured so that the figure
//! holds on a shared machine: two pairs of agents in a row, the hop between
//! them plain TCP in one pair and TLS/TCP in the other, measured in paired
//! rounds (one TCP round and one TLS round under the same load, their order
//! alternated from pair to pair so that a drift of the machine falls on
//! both alike). Each pair gives a throughput ratio and a ratio of the CPU
//! time the agents' worker threads spent per answered request (the
//! scheduler's own accounting, `Workers::cpu_time`), which does not depend
//! on what else runs on the machine the way throughput does. The figure is
//! the median of the per-pair ratios.

use std::time::Duration;

use agent::agent::Agent;
use tokio::runtime::Runtime;
use tools::loadgen::Pace;

/// One round through one pair of agents.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    /// Answers per second.
    pub rate: f64,
    /// CPU time of both agents' workers per answered request, µs.
    pub cpu_us: f64,
}

/// The paired rounds, TCP and TLS, one of each per pair.
#[derive(Debug, Default)]
pub struct TlsFigure {
    /// The TCP hop's round of each pair.
    pub tcp: Vec<Round>,
    /// The TLS hop's round of each pair.
    pub tls: Vec<Round>,
}

/// The CPU time every worker of `agents` has used so far.
fn cpu(agents: &[&Agent; 2]) -> Duration {
    agents
        .iter()
        .flat_map(|a| (0..a.workers().count()).filter_map(|i| a.workers().cpu_time(i)))
        .sum()
}

/// One round through the pair whose first agent is `agents[0]`.
fn round(rt: &Runtime, agents: &[&Agent; 2], pace: Pace, seconds: u64) -> anyhow::Result<Round> {
    let mut before = Duration::ZERO;
    let r = crate::relay::measure_from(rt, agents[0].local_addrs()[0], pace, seconds, || {
        before = cpu(agents);
    })?;
    let used = cpu(agents).saturating_sub(before);
    #[expect(clippy::cast_precision_loss, reason = "a count of answers")]
    let per = used.as_secs_f64() * 1e6 / (r.answered.max(1) as f64);
    Ok(Round {
        rate: r.rate(),
        cpu_us: per,
    })
}

/// `pairs` paired rounds of `seconds` at `pace` through `tcp` and `tls`
/// (each the two agents of a pair, the load client's first), TCP first
/// in even pairs, TLS first in odd ones.
///
/// # Errors
/// A round whose requests were not all answered 2001
/// ([`crate::relay::measure`]).
pub fn measure(
    rt: &Runtime,
    (tcp, tls): ([&Agent; 2], [&Agent; 2]),
    pairs: usize,
    (pace, seconds): (Pace, u64),
) -> anyhow::Result<TlsFigure> {
    let mut fig = TlsFigure::default();
    for pair in 0..pairs {
        let tls_first = pair % 2 == 1;
        let (a, b) = if tls_first {
            (&tls, &tcp)
        } else {
            (&tcp, &tls)
        };
        let first = round(rt, a, pace, seconds)?;
        let second = round(rt, b, pace, seconds)?;
        let (t, s) = if tls_first {
            (second, first)
        } else {
            (first, second)
        };
        eprintln!(
            "pair {pair} TCP hop {:>9.0}/s {:>6.1} us CPU/request, TLS hop {:>9.0}/s {:>6.1} us CPU/request: ratios {:.2} throughput, {:.2} CPU",
            t.rate,
            t.cpu_us,
            s.rate,
            s.cpu_us,
            s.rate / t.rate,
            s.cpu_us / t.cpu_us
        );
        fig.tcp.push(t);
        fig.tls.push(s);
    }
    Ok(fig)
}

impl TlsFigure {
    /// TLS over TCP throughput, per pair.
    #[must_use]
    pub fn throughput_ratios(&self) -> Vec<f64> {
        self.tcp
            .iter()
            .zip(&self.tls)
            .map(|(t, s)| s.rate / t.rate)
            .collect()
    }

    /// TLS over TCP CPU time per request, per pair.
    #[must_use]
    pub fn cpu_ratios(&self) -> Vec<f64> {
        self.tcp
            .iter()
            .zip(&self.tls)
            .map(|(t, s)| s.cpu_us / t.cpu_us)
            .collect()
    }

    /// The median CPU ratio (the reported, gated figure).
    #[must_use]
    pub fn cpu_ratio(&self) -> f64 {
        crate::relay::median(self.cpu_ratios())
    }

    /// Prints the figure as a Markdown table: medians over the pairs, with
    /// the range of the per-pair ratios.
    pub fn print(&self, load: &str) {
        let med = |v: Vec<f64>| crate::relay::median(v);
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{lo:.2}-{hi:.2}")
        };
        let (tr, cr) = (self.throughput_ratios(), self.cpu_ratios());
        println!();
        println!(
            "| 2 agents in a row, {load}, {} paired rounds | answers/s | CPU us per request (both agents' workers) |",
            self.tcp.len()
        );
        println!("| --- | ---: | ---: |");
        for (hop, rounds) in [("TCP", &self.tcp), ("TLS", &self.tls)] {
            println!(
                "| {hop} hop | {:.0} | {:.1} |",
                med(rounds.iter().map(|r| r.rate).collect()),
                med(rounds.iter().map(|r| r.cpu_us).collect())
            );
        }
        println!(
            "| TLS / TCP, median of the pairs (range) | {:.2} ({}) | {:.2} ({}) |",
            med(tr.clone()),
            range(&tr),
            med(cr.clone()),
            range(&cr)
        );
    }
}

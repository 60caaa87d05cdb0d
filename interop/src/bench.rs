//! Throughput yardstick with third-party peers: the freeDiameter `test_app`
//! benchmark client sends to the fD server directly, through the fD relay
//! (an RFC 6733 §2.8 relay agent) and through any other path under test
//! (the agent), in interleaved rounds on the same machine, so that each
//! path is measured against an anchor of the same run.
//!
//! Benchmarks on a shared machine are noisy: compare ratios to the direct
//! path, as medians over rounds, never absolute figures from different
//! runs.

use std::fmt;
use std::time::Duration;

use crate::Error;
use crate::fd::{BenchResult, BenchSpec, FdNode, PeerTarget};

/// The runs of one path.
#[derive(Debug, Clone, Default)]
pub struct PathRuns {
    /// Path name (`direct`, `fd-relay`, or the caller's name).
    pub name: String,
    /// Where the client sent.
    pub target: Option<PeerTarget>,
    /// One result per round.
    pub runs: Vec<BenchResult>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl PathRuns {
    /// Median of 2001 answers per second over the rounds.
    #[must_use]
    pub fn median_answers_per_s(&self) -> f64 {
        median(self.runs.iter().map(BenchResult::answers_per_s).collect())
    }

    /// Median of the average request-to-answer latency over the rounds.
    #[must_use]
    pub fn median_latency(&self) -> Duration {
        Duration::from_secs_f64(median(
            self.runs.iter().map(|r| r.average.as_secs_f64()).collect(),
        ))
    }

    /// True when every run had every request answered with 2001.
    #[must_use]
    pub fn all_answered_ok(&self) -> bool {
        !self.runs.is_empty() && self.runs.iter().all(BenchResult::all_answered_ok)
    }
}

/// The result of a [`PathBench`]: the direct anchor first.
#[derive(Debug, Clone, Default)]
pub struct PathsReport {
    /// Seconds per run.
    pub seconds: u32,
    /// Requests in flight.
    pub concurrency: u32,
    /// Every path, `direct` first.
    pub paths: Vec<PathRuns>,
}

impl PathsReport {
    /// The runs of the path called `name`.
    #[must_use]
    pub fn path(&self, name: &str) -> Option<&PathRuns> {
        self.paths.iter().find(|p| p.name == name)
    }

    /// Median answers/s of `name` divided by the direct path's.
    #[must_use]
    pub fn ratio_to_direct(&self, name: &str) -> Option<f64> {
        let d = self.path("direct")?.median_answers_per_s();
        let p = self.path(name)?.median_answers_per_s();
        (d > 0.0).then(|| p / d)
    }
}

impl fmt::Display for PathsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} s per run, concurrency {}, {} round(s); answers/s = 2001 answers / sending window",
            self.seconds,
            self.concurrency,
            self.paths.first().map_or(0, |p| p.runs.len())
        )?;
        writeln!(
            f,
            "{:<12} {:>14} {:>9} {:>14} {:>10}  runs (answers/s)",
            "path", "median ans/s", "ratio", "median lat.", "all 2001"
        )?;
        for p in &self.paths {
            let runs: Vec<String> = p
                .runs
                .iter()
                .map(|r| format!("{:.0}", r.answers_per_s()))
                .collect();
            writeln!(
                f,
                "{:<12} {:>14.0} {:>9.2} {:>14.2?} {:>10}  {}",
                p.name,
                p.median_answers_per_s(),
                self.ratio_to_direct(&p.name).unwrap_or(0.0),
                p.median_latency(),
                p.all_answered_ok(),
                runs.join(" ")
            )?;
        }
        Ok(())
    }
}

/// Interleaved rounds of the test_app benchmark over several paths to one
/// fD server.
#[derive(Debug, Clone)]
pub struct PathBench {
    seconds: u32,
    concurrency: u32,
    rounds: u32,
    extra: Vec<(String, PeerTarget)>,
}

impl Default for PathBench {
    fn default() -> Self {
        Self::new()
    }
}

impl PathBench {
    /// 10 s runs, concurrency 100, 3 rounds, paths `direct` and `fd-relay`.
    #[must_use]
    pub fn new() -> Self {
        Self {
            seconds: 10,
            concurrency: 100,
            rounds: 3,
            extra: Vec::new(),
        }
    }

    setters! {
        /// Seconds per run.
        seconds(s: u32) => seconds = s.max(1);

        /// Requests in flight.
        concurrency(c: u32) => concurrency = c.max(1);

        /// Rounds (each round runs every path once).
        rounds(r: u32) => rounds = r.max(1);
    }

    /// Adds a path under test, e.g. `("agent", PeerTarget::loopback("agent.example.com", port))`;
    /// it must forward Destination-Realm `example.net` to the server.
    #[must_use]
    pub fn path(mut self, name: &str, target: PeerTarget) -> Self {
        self.extra.push((name.to_owned(), target));
        self
    }

    /// Runs the rounds against `server`, through `relay` when given.
    ///
    /// # Errors
    /// A client failing to start or connect.
    pub fn run(&self, server: &FdNode, relay: Option<&FdNode>) -> Result<PathsReport, Error> {
        let mut paths = vec![("direct".to_owned(), server.target())];
        if let Some(r) = relay {
            paths.push(("fd-relay".to_owned(), r.target()));
        }
        paths.extend(self.extra.iter().cloned());
        let mut report = PathsReport {
            seconds: self.seconds,
            concurrency: self.concurrency,
            paths: paths
                .iter()
                .map(|(n, t)| PathRuns {
                    name: n.clone(),
                    target: Some(t.clone()),
                    runs: Vec::new(),
                })
                .collect(),
        };
        for _ in 0..self.rounds {
            for (i, (_, target)) in paths.iter().enumerate() {
                let r = BenchSpec::new(target.clone())
                    .dest_realm(server.realm())
                    .seconds(self.seconds)
                    .concurrency(self.concurrency)
                    .run()?;
                tracing::info!(path = %report.paths[i].name, result = %r, "bench run");
                report.paths[i].runs.push(r);
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(answered: u64) -> BenchResult {
        BenchResult {
            seconds: 10,
            sent: answered,
            answered,
            complete: true,
            average: Duration::from_millis(answered / 1000),
            ..BenchResult::default()
        }
    }

    #[test]
    fn medians_and_ratios() {
        let report = PathsReport {
            seconds: 10,
            concurrency: 100,
            paths: vec![
                PathRuns {
                    name: "direct".into(),
                    target: None,
                    runs: vec![run(200_000), run(100_000), run(300_000)],
                },
                PathRuns {
                    name: "fd-relay".into(),
                    target: None,
                    runs: vec![run(100_000), run(80_000), run(120_000), run(90_000)],
                },
            ],
        };
        let d = report.path("direct").unwrap();
        assert!((d.median_answers_per_s() - 20_000.0).abs() < 1e-9);
        assert_eq!(d.median_latency(), Duration::from_millis(200));
        let r = report.path("fd-relay").unwrap();
        assert!((r.median_answers_per_s() - 9_500.0).abs() < 1e-9);
        assert!((report.ratio_to_direct("fd-relay").unwrap() - 0.475).abs() < 1e-9);
        assert!(report.to_string().contains("fd-relay"));
        assert!(report.ratio_to_direct("agent").is_none());
    }

    #[test]
    fn an_empty_path_is_not_ok() {
        assert!(!PathRuns::default().all_answered_ok());
        assert_eq!(PathRuns::default().median_answers_per_s(), 0.0);
    }
}

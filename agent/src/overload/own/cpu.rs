//! The CPU the kernel accounted to the agent, read by the control thread
//! once a second without the workers' help: each worker thread's CPU time
//! ([`crate::host::thread::cpu_time`], by the thread id the worker recorded
//! at its start), the process's, and the bandwidth limit of the agent's
//! own cgroup with the share of its periods throttled
//! ([`crate::host::cgroup`]). What it reads goes to the estimator as
//! [`doic::own_load::CpuUse`]; what it cannot read is left out, with one
//! warning naming the cause and what the agent does instead.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::host::cgroup::{Cgroup, Quota, Throttling};
use crate::host::{HostError, thread};

/// One reading of the counters.
#[derive(Clone, Debug)]
struct Reading {
    at: Instant,
    workers: Vec<Option<Duration>>,
    process: Option<Duration>,
    throttling: Option<Throttling>,
}

/// The CPU used over one interval, per worker and in all.
#[derive(Clone, Debug, Default)]
pub(crate) struct CpuInterval {
    /// The interval.
    pub(crate) interval: Duration,
    /// Each worker's CPU time in it; `None`: not measured (a worker on a
    /// caller's runtime, or procfs would not say).
    pub(crate) workers: Vec<Option<Duration>>,
    /// The process's CPU time in it.
    pub(crate) process: Option<Duration>,
    /// The cgroup's share of one CPU; `None`: no limit found.
    pub(crate) quota: Option<f64>,
    /// The share of the cgroup's periods throttled in it.
    pub(crate) throttled: Option<f64>,
}

impl CpuInterval {
    /// Worker `i`'s utilisation: its CPU time over what it could have had
    /// (the interval, or the cgroup's share of it when smaller).
    pub(crate) fn worker_utilisation(&self, i: usize) -> Option<f64> {
        let cpu = self.workers.get(i).copied().flatten()?;
        let wall = self.interval.as_secs_f64();
        let share = self.quota.filter(|q| *q > 0.0).map_or(1.0, |q| q.min(1.0));
        (wall > 0.0).then(|| (cpu.as_secs_f64() / (wall * share)).min(1.0))
    }
}

/// What the control thread keeps between readings.
#[derive(Debug)]
pub(crate) struct CpuMeter {
    cgroup: Option<Cgroup>,
    last: Option<Reading>,
    /// The causes already warned of.
    warned: Warned,
    /// Where the binding quota is set, and the quota.
    limit: Option<(Quota, PathBuf)>,
}

#[derive(Debug, Default)]
struct Warned {
    thread: bool,
    process: bool,
    quota: bool,
    throttling: bool,
}

impl CpuMeter {
    /// Finds the agent's cgroup (warns once when there is none).
    pub(crate) fn new() -> Self {
        let cgroup = match Cgroup::own() {
            Ok(c) => {
                tracing::debug!(dir = %c.dir.display(), version = ?c.version, "own load: cgroup found");
                Some(c)
            }
            Err(e) => {
                tracing::warn!(
                    cause = %e,
                    "own load: no cgroup CPU limit; worker utilisation counts against the wall clock"
                );
                None
            }
        };
        Self {
            cgroup,
            last: None,
            warned: Warned::default(),
            limit: None,
        }
    }

    /// Reads the counters at `now` for the worker threads `tids` (0: a
    /// worker whose thread id is not known); the CPU used since the last
    /// reading (`None` the first time).
    pub(crate) fn handle_tick(
        &mut self,
        tids: impl Iterator<Item = i32>,
        now: Instant,
    ) -> Option<CpuInterval> {
        let per_worker: Vec<Option<Duration>> = tids
            .map(|tid| {
                if tid == 0 {
                    return None;
                }
                match thread::cpu_time(tid) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        warn_once(
                            &mut self.warned.thread,
                            &e,
                            "own load: no worker thread CPU time; the runtime's busy time counts instead",
                        );
                        None
                    }
                }
            })
            .collect();
        let process = thread::process_cpu_time()
            .map_err(|e| {
                warn_once(
                    &mut self.warned.process,
                    &e,
                    "own load: no process CPU time; the busiest worker alone counts",
                );
            })
            .ok();
        if let Some(cg) = &self.cgroup {
            match cg.quota() {
                Ok(l) => self.limit = l,
                Err(e) => {
                    warn_once(
                        &mut self.warned.quota,
                        &e,
                        "own load: the cgroup's CPU limit cannot be read; utilisation counts against the wall clock",
                    );
                    self.limit = None;
                }
            }
        }
        let throttling = match (&self.cgroup, &self.limit) {
            (Some(cg), Some((_, dir))) => cg
                .throttling(dir)
                .map_err(|e| {
                    warn_once(
                        &mut self.warned.throttling,
                        &e,
                        "own load: the cgroup's throttling cannot be read; left out",
                    );
                })
                .ok(),
            _ => None,
        };
        let reading = Reading {
            at: now,
            workers: per_worker,
            process,
            throttling,
        };
        let last = self.last.replace(reading.clone())?;
        let diff = |a: Option<Duration>, b: Option<Duration>| Some(a?.saturating_sub(b?));
        let throttled = match (reading.throttling, last.throttling) {
            (Some(t), Some(l)) => {
                let periods = t.periods.saturating_sub(l.periods);
                #[expect(clippy::cast_precision_loss, reason = "period counts")]
                let share = (periods > 0).then(|| {
                    t.throttled_periods.saturating_sub(l.throttled_periods) as f64 / periods as f64
                });
                Some(share.unwrap_or(0.0))
            }
            _ => None,
        };
        Some(CpuInterval {
            interval: now.saturating_duration_since(last.at),
            workers: reading
                .workers
                .iter()
                .zip(last.workers.iter().chain(std::iter::repeat(&None)))
                .map(|(a, b)| diff(*a, *b))
                .collect(),
            process: diff(reading.process, last.process),
            quota: self.limit.as_ref().map(|(q, _)| q.share()),
            throttled,
        })
    }
}

/// Warns of `e` once, with `what` the agent does instead.
fn warn_once(done: &mut bool, e: &HostError, what: &'static str) {
    if !std::mem::replace(done, true) {
        tracing::warn!(cause = %e, "{what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_in_a_tenth_of_a_cpu_is_saturated_by_a_tenth_of_a_second() {
        let mut i = CpuInterval {
            interval: Duration::from_secs(1),
            workers: vec![Some(Duration::from_millis(100)), None],
            quota: Some(0.1),
            ..CpuInterval::default()
        };
        assert_eq!(i.worker_utilisation(0), Some(1.0));
        assert_eq!(i.worker_utilisation(1), None);
        i.quota = None;
        assert!((i.worker_utilisation(0).unwrap() - 0.1).abs() < 1e-9);
        // A quota above one CPU still leaves one thread one CPU at most.
        i.quota = Some(4.0);
        assert!((i.worker_utilisation(0).unwrap() - 0.1).abs() < 1e-9);
    }
}

//! Server (c) of the efficacy benchmark: freeDiameter 1.2.1's `test_app`
//! server (`interop::fd::FdServer`: it answers every Test-Request 2001, and
//! sends no DOIC reports, as no deployed open server does) held to a
//! fraction of one CPU by a cgroup ([`CpuLimit`], as in `bench-relay-ab`
//! and `bench-own`). A server CPU-bound at that share has a capacity of
//! the share divided by its CPU time per request; above it, requests wait
//! in freeDiameter's queues, so latency grows as with server (a), but the
//! queue is a real server's.
//!
//! Its capacity C is measured first, in two steps. [`calibrate`]: closed-loop
//! runs on a fresh server with more and more requests outstanding, until
//! the 2001 answers per second stop growing. That is the most it answers
//! with a queue always waiting, not a rate it sustains offered open loop
//! (offered that rate, it answered 0.81 of it direct, p99 2.8 s: the queue
//! grew). [`sustained`] then offers open loop, direct, the closed loop's
//! figure and steps of a tenth below it, and C is the first rate the server
//! keeps up with (RFC 7068 §3: the throughput a server sustains is what
//! overload control must keep).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use interop::fd::{FdNode, FdServer};
use tools::loadgen::{Pace, Traffic};

use crate::relay::connect_client;
use crate::relay_ab::{CpuLimit, allowed_cpus, move_to_cgroup, pin_process};

/// The cgroup of server (c).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FdShare {
    /// The server's share of one CPU.
    pub share: f64,
    /// The cgroup's bandwidth period, µs (the quota, share x period, must
    /// be at least 1 ms).
    pub period_us: u64,
    /// A CPU of its own for the server (`None`: wherever the scheduler
    /// puts it, beside the client and the relays).
    pub own_cpu: Option<usize>,
}

/// A freeDiameter `test_app` server in a cgroup of its own: stopped, then
/// its cgroup removed, on drop.
#[derive(Debug)]
pub struct LimitedFd {
    node: FdNode,
    // Declared last: removed once the server has left it.
    _limit: CpuLimit,
}

impl LimitedFd {
    /// Starts the server as `identity` (host, realm) and moves it into a
    /// fresh cgroup held to `cpu`.
    ///
    /// # Errors
    /// No cgroup cpu controller (root is needed), freeDiameter or its
    /// `test_app.fdx` missing (`cargo xtask test --only interop` installs
    /// them), or the daemon not starting.
    pub fn start(identity: (&str, &str), cpu: FdShare) -> anyhow::Result<Self> {
        // `CpuLimit` grants at least 1 ms per period: a smaller quota would
        // silently be a larger share than asked.
        anyhow::ensure!(
            cpu.share * cpu.period_us as f64 >= 1000.0,
            "a share of {} CPU in periods of {} µs is a quota below 1 ms: take a longer period",
            cpu.share,
            cpu.period_us
        );
        let mut node = FdServer::builder()
            .identity(identity.0)
            .realm(identity.1)
            .start()
            .context("freeDiameter test_app server")?;
        let pid = node.daemon().pid();
        let name = format!("doic-bench-overload-{}-{}", std::process::id(), node.port());
        let limit = CpuLimit::new(&name, cpu.share, cpu.period_us)?;
        move_to_cgroup(&limit.dir, pid)?;
        if let Some(cpu) = cpu.own_cpu {
            pin_process(pid, &[cpu])?;
        }
        Ok(Self {
            node,
            _limit: limit,
        })
    }

    /// Where clients and relays reach it.
    #[must_use]
    pub fn addr(&self) -> std::net::SocketAddr {
        self.node.target().addr
    }
}

/// While it lives, every thread of this process (and the threads they
/// start) runs on the CPUs it may use but server (c)'s own
/// ([`FdShare::own_cpu`]): the server and the benchmark as two hosts. The
/// CPUs before are restored on drop.
#[derive(Debug)]
pub struct Apart {
    before: Vec<usize>,
}

impl Apart {
    /// Moves this process off `cpu.own_cpu`, if the share has one.
    ///
    /// # Errors
    /// No other CPU left to this process, or the kernel refusing.
    pub fn from(cpu: FdShare) -> anyhow::Result<Option<Self>> {
        let Some(own) = cpu.own_cpu else {
            return Ok(None);
        };
        let before = allowed_cpus()?;
        let rest: Vec<usize> = before.iter().copied().filter(|&c| c != own).collect();
        anyhow::ensure!(
            !rest.is_empty(),
            "server fd on CPU {own} leaves no CPU to the benchmark (it may use {before:?})"
        );
        pin_process(std::process::id(), &rest)?;
        Ok(Some(Self { before }))
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Err(e) = pin_process(std::process::id(), &self.before) {
            eprintln!(
                "warning: the benchmark's CPUs not restored to {:?}: {e:#}",
                self.before
            );
        }
    }
}

/// Requests outstanding in the first calibration run; each next run has
/// four times as many.
const FIRST_WINDOW: usize = 4;
/// The most requests outstanding a calibration run keeps.
const MAX_WINDOW: usize = 1024;
/// Goodput "stops growing" when a run with four times the window gains
/// less than this share.
const PLATEAU: f64 = 0.05;

/// What [`calibrate`] measured.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// Each closed-loop run: requests outstanding, 2001 answers per second.
    pub runs: Vec<(usize, f64)>,
    /// The capacity C: the highest 2001 rate of the runs, requests per
    /// second.
    pub capacity: u32,
}

impl Calibration {
    /// One line for logs and docs.
    #[must_use]
    pub fn line(&self) -> String {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|(w, r)| format!("{w} outstanding {r:.0}/s"))
            .collect();
        format!("C = {}/s ({})", self.capacity, runs.join(", "))
    }
}

/// Measures the capacity of server (c) in `cpu`: on one fresh server,
/// closed-loop runs of `seconds` with [`FIRST_WINDOW`], then four times as
/// many requests outstanding, until goodput grows by less than
/// [`PLATEAU`] (or [`MAX_WINDOW`] is reached); C is the highest goodput.
///
/// # Errors
/// As [`LimitedFd::start`]; a client that cannot connect, a run with
/// answers other than 2001.
pub fn calibrate(
    identity: (&str, &str),
    cpu: FdShare,
    seconds: f64,
) -> anyhow::Result<Calibration> {
    let _apart = Apart::from(cpu)?;
    let server = LimitedFd::start(identity, cpu)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let runs = rt.block_on(async {
        let mut c = connect_client(server.addr()).await?;
        let t = Traffic {
            destination_realm: identity.1.into(),
            destination_host: None,
        };
        let never = AtomicBool::new(false);
        let mut runs: Vec<(usize, f64)> = Vec::new();
        let mut window = FIRST_WINDOW;
        loop {
            let r = c
                .run(
                    &t,
                    Pace::Closed(window),
                    Duration::from_secs_f64(seconds),
                    // No drain: only answers within the run count (the
                    // window still outstanding at its end is not goodput).
                    Duration::ZERO,
                    &never,
                )
                .await?;
            let ok = r.by_code.get(&2001).copied().unwrap_or(0);
            anyhow::ensure!(
                ok > 0 && ok == r.answered,
                "calibration with {window} outstanding: {} sent, {} answered, codes {:?}",
                r.sent,
                r.answered,
                r.by_code
            );
            let rate = ok as f64 / r.elapsed.as_secs_f64().max(1e-3);
            let grew = runs
                .last()
                .is_none_or(|&(_, last)| rate > last * (1.0 + PLATEAU));
            runs.push((window, rate));
            if !grew || window >= MAX_WINDOW {
                break;
            }
            window *= 4;
        }
        Ok(runs)
    })?;
    let best = runs.iter().map(|&(_, r)| r).fold(0.0, f64::max);
    Ok(Calibration {
        runs,
        capacity: best.round() as u32,
    })
}

/// The steps of [`sustained`]: shares of the closed loop's figure offered
/// open loop, highest first.
const SUSTAIN_STEPS: [f64; 6] = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5];
/// A rate is sustained when at least this share of it comes back as
/// goodput (2001 within the client's timeout T) ...
const SUSTAIN_GOODPUT: f64 = 0.97;
/// ... every request answered 2001, and the 2001 p99 is within this share
/// of T (a queue that grows through the run shows there first).
const SUSTAIN_P99_OF_T: f64 = 0.25;

/// One open-loop step of [`sustained`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Offered, requests per second.
    pub offered: u32,
    /// Goodput as a share of it.
    pub goodput: f64,
    /// The 2001 answers' p99, ms.
    pub p99_ms: f64,
    /// Whether the server kept up (the three bounds above).
    pub kept_up: bool,
}

/// What [`sustained`] measured.
#[derive(Debug, Clone)]
pub struct Sustained {
    /// Each step, in the order run.
    pub steps: Vec<Step>,
    /// The capacity C: the first rate kept up with.
    pub capacity: u32,
}

impl Sustained {
    /// One line for logs and docs.
    #[must_use]
    pub fn line(&self) -> String {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{}/s: goodput {:.2}, p99 {:.0} ms{}",
                    s.offered,
                    s.goodput,
                    s.p99_ms,
                    if s.kept_up { "" } else { " (behind)" }
                )
            })
            .collect();
        format!("C = {}/s ({})", self.capacity, steps.join("; "))
    }
}

/// Whether one open-loop run at `offered`/s kept up: goodput at least
/// [`SUSTAIN_GOODPUT`] of it, every request answered 2001, and the 2001
/// p99 within [`SUSTAIN_P99_OF_T`] of `timeout`.
fn kept_up(run: &super::Run, offered: u32, timeout: Duration) -> Step {
    let r = &run.report;
    let ok = r.by_code.get(&2001).copied().unwrap_or(0);
    let goodput = r.goodput(timeout) / f64::from(offered.max(1));
    let p99_ms = f64::from(r.ok_percentile_us(99.0)) / 1000.0;
    let kept_up = goodput >= SUSTAIN_GOODPUT
        && run.unanswered() == 0
        && ok == r.answered
        && p99_ms <= timeout.as_secs_f64() * 1000.0 * SUSTAIN_P99_OF_T;
    Step {
        offered,
        goodput,
        p99_ms,
        kept_up,
    }
}

/// Measures the rate server (c) in `cpu` sustains: the open-loop client
/// of the grid (`setup`'s warm-up, seconds, timeout), direct, on a fresh
/// server per step, offers each of [`SUSTAIN_STEPS`] times `closed` (what
/// [`calibrate`] measured) until the server keeps up.
///
/// # Errors
/// As [`super::measure`]; a server that keeps up with none of the steps.
pub fn sustained(
    peers: &tokio::runtime::Runtime,
    setup: &super::Setup,
    cpu: FdShare,
    closed: u32,
) -> anyhow::Result<Sustained> {
    let mut steps = Vec::new();
    for share in SUSTAIN_STEPS {
        let offered = (f64::from(closed) * share).round() as u32;
        let cell = super::CellSpec {
            server: super::ServerKind::Fd {
                cpu,
                capacity: offered,
            },
            path: super::PathKind::Direct,
            load: 1.0,
        };
        let run = super::measure(peers, setup, cell)?;
        let step = kept_up(&run, offered, setup.timeout);
        steps.push(step);
        if step.kept_up {
            return Ok(Sustained {
                steps,
                capacity: offered,
            });
        }
    }
    let s = Sustained { steps, capacity: 0 };
    anyhow::bail!(
        "server fd kept up with none of the open-loop rates down to half the closed loop's: {}",
        s.line()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_below_one_millisecond_is_refused_before_anything_starts() {
        // `CpuLimit` would grant 1 ms: 0.1 CPU in 5 ms periods would be 0.2.
        let e = LimitedFd::start(
            ("server1.example.net", "example.net"),
            FdShare {
                share: 0.1,
                period_us: 5_000,
                own_cpu: None,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("quota below 1 ms"), "{e}");
    }

    #[test]
    fn the_calibration_line_names_c_and_every_run() {
        let c = Calibration {
            runs: vec![(4, 1187.2), (16, 1670.0), (64, 2124.4), (256, 1834.0)],
            capacity: 2124,
        };
        assert_eq!(
            c.line(),
            "C = 2124/s (4 outstanding 1187/s, 16 outstanding 1670/s, 64 outstanding 2124/s, 256 outstanding 1834/s)"
        );
    }

    #[test]
    fn the_sustained_line_marks_the_steps_the_server_fell_behind_in() {
        let s = Sustained {
            steps: vec![
                Step {
                    offered: 2130,
                    goodput: 0.81,
                    p99_ms: 2787.8,
                    kept_up: false,
                },
                Step {
                    offered: 1917,
                    goodput: 1.0,
                    p99_ms: 41.0,
                    kept_up: true,
                },
            ],
            capacity: 1917,
        };
        assert_eq!(
            s.line(),
            "C = 1917/s (2130/s: goodput 0.81, p99 2788 ms (behind); 1917/s: goodput 1.00, p99 41 ms)"
        );
    }
}

//! Server (c) of the efficacy benchmark: freeDiameter 1.2.1's `test_app`
//! server (`interop::fd::FdServer`: it answers every Test-Request 2001, and
//! sends no DOIC reports, as no deployed open server does) held to a
//! fraction of one CPU by a cgroup ([`CpuLimit`], as in `bench-relay-ab`
//! and `bench-own`). A server CPU-bound at that share has a capacity of
//! the share divided by its CPU time per request; above it, requests wait
//! in freeDiameter's queues, so latency grows as with server (a), but the
//! queue is a real server's.
//!
//! Its capacity C is measured first ([`calibrate`]): closed-loop runs on a
//! fresh server with more and more requests outstanding, until the 2001
//! answers per second stop growing (RFC 7068 §3: the throughput a server
//! sustains is what overload control must keep).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use interop::fd::{FdNode, FdServer};
use tools::loadgen::{Pace, Traffic};

use crate::relay::connect_client;
use crate::relay_ab::{CpuLimit, move_to_cgroup};

/// The cgroup of server (c).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FdShare {
    /// The server's share of one CPU.
    pub share: f64,
    /// The cgroup's bandwidth period, µs (the quota, share x period, must
    /// be at least 1 ms).
    pub period_us: u64,
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
}

//! The control thread: every 100 ms a DOIC tick on each worker (expiry,
//! ramps, replicas, snapshots: `crate::overload::tick`), the snapshots
//! the workers sent back collected and the bytes unread in the peers'
//! sockets (`crate::overload::own::Backlog`); once a second the CPU the
//! kernel accounted to each worker thread and to the agent's cgroup
//! (`crate::overload::own::CpuMeter`: each worker's utilisation is its CPU
//! time over what the interval and the cgroup's quota allow it; the
//! runtime's busy time for a worker whose thread time is not known), the
//! kernel program's counters ([`crate::ebpf::live::Live::handle_tick`],
//! published in [`crate::telemetry::Kernel`]) and the agent's own load
//! (`crate::overload::own`), and the second's counts to the audit log
//! ([`crate::audit`]). The own load is measured at once, at any tick, when
//! the backlog in the sockets says an overload begins
//! (`crate::overload::own::onset`).
//!
//! The workers feed it over bounded crossbeam channels ([`crate::feed`]),
//! never waiting and never unbounded: the connections' open and close
//! events ([`crate::telemetry::EVENT_FEED_CAPACITY`]) and the DOIC
//! snapshots ([`crate::overload::SNAPSHOTS_PER_WORKER`] per worker). What a
//! full feed drops is counted in `doic_feed_dropped_total{feed}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Stop, Workers};
use crate::ebpf::live::Live;
use crate::overload::Overload;
use crate::overload::own::{Backlog, CpuMeter};
use crate::peer::table::PeerTable;
use crate::telemetry::Kernel;

/// How often the control thread wakes.
pub(super) const TICK: Duration = Duration::from_millis(100);
/// Ticks per full tick (utilisation, kernel counters, own load, audit).
const TICKS_PER_SECOND: u64 = 10;

/// What the control thread reads and drives.
#[derive(Debug)]
pub(crate) struct Control {
    /// The kernel program (or none).
    pub(crate) ebpf: Arc<Live>,
    /// Where its readings are published, and the connections' events.
    pub(crate) kernel: Arc<Kernel>,
    /// DOIC state; `None` when overload control is off.
    pub(crate) overload: Option<Arc<Overload>>,
    /// The peer table (request counters for the own load).
    pub(crate) table: Arc<PeerTable>,
}

/// What the control tick keeps between ticks.
#[derive(Debug)]
pub(super) struct Ticking {
    control: Control,
    /// Each worker's busy time at the last measurement of the own load.
    last: Vec<Duration>,
    /// When the last full tick was.
    at: Instant,
    /// When the own load was last measured.
    measured_at: Instant,
    ticks: u64,
    /// The CPU the kernel accounted to the workers and the cgroup.
    cpu: CpuMeter,
    /// The bytes waiting in the peers' sockets.
    backlog: Backlog,
    /// The kernel program's loads at the last measurement
    /// ([`Live::loads`]).
    loads: u64,
}

impl Control {
    /// Runs on the control thread until `stop` is set.
    pub(super) fn run(self, workers: &Workers, shutdown: &Stop, stop: &AtomicBool) {
        let mut ticking = self.ticking(workers, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(TICK);
            ticking.handle_tick(workers, shutdown, Instant::now());
        }
    }

    /// The tick's state, starting at `now`.
    pub(super) fn ticking(self, workers: &Workers, now: Instant) -> Ticking {
        Ticking {
            loads: self.ebpf.loads(),
            control: self,
            last: workers.busy().collect(),
            at: now,
            measured_at: now,
            ticks: 0,
            cpu: CpuMeter::new(),
            backlog: Backlog::default(),
        }
    }
}

impl Ticking {
    /// One tick at `now`: every tick the DOIC ticks and the snapshots, once
    /// a second the rest.
    pub(super) fn handle_tick(&mut self, workers: &Workers, shutdown: &Stop, now: Instant) {
        self.ticks += 1;
        if let Some(ov) = self.control.overload.clone() {
            ov.collect_snapshots();
            // What waits unread in the peers' sockets, before the
            // protection reads the agent's own lateness.
            let backlog = self.backlog.handle_tick(&self.control.table, now);
            crate::overload::own::note_queue_delay(&ov, backlog);
            if crate::overload::own::onset(&ov, backlog) {
                self.measure_own(workers, now);
            }
            let c = &self.control;
            // Before the workers' ticks, which apply what it publishes.
            crate::overload::protect::control_tick(&c.table, &ov, ov.now());
            if !shutdown.is_stopping() {
                // DOIC expiry, ramps and snapshots run on each worker (its
                // core lives there); the audit trail is rendered once a
                // second.
                let full = self.ticks.is_multiple_of(TICKS_PER_SECOND);
                let at = Instant::now();
                workers.spawn_each(|_| {
                    let ov = ov.clone();
                    async move {
                        // How long the tick waited behind the worker's
                        // requests: its queue delay.
                        crate::overload::own::note_queue_delay(&ov, at.elapsed());
                        crate::overload::tick(&ov, full);
                    }
                });
            }
        }
        let elapsed = now.saturating_duration_since(self.at);
        if elapsed < Duration::from_secs(1) {
            return;
        }
        self.at = now;
        let c = &self.control;
        if let Some(reading) = c.ebpf.handle_tick(now, c.kernel.take_events()) {
            c.kernel.publish(now, reading);
        }
        self.measure_own(workers, now);
        if let Some(ov) = &self.control.overload
            && let Some(log) = ov.audit_log()
        {
            crate::audit::feed_second(log, ov.second_totals(), ov.now());
        }
    }

    /// The workers' utilisation since the last measurement and the agent's
    /// own load (once a second, and at an onset).
    fn measure_own(&mut self, workers: &Workers, now: Instant) {
        let c = &self.control;
        let elapsed = now.saturating_duration_since(self.measured_at);
        if elapsed.is_zero() {
            return;
        }
        self.measured_at = now;
        let cpu = self
            .cpu
            .handle_tick(workers.slots.iter().map(|s| s.tid), now);
        // The kernel program loaded or loading since the last measurement:
        // its verification ran in the agent's CPU share (1.2 s in 0.02 of a
        // CPU, while the first clients' requests arrived), which read as a
        // saturated agent relaying a few dozen requests a second, a capacity
        // of 64-80/s that the estimate took seconds to leave
        // (docs/own-overload.md). The readings start again from here.
        let loads = c.ebpf.loads();
        if loads != self.loads || loads % 2 == 1 {
            self.loads = loads;
            self.last = workers.busy().collect();
            if let Some(ov) = &c.overload {
                crate::overload::own::restart(ov);
                crate::overload::own::control_tick(&c.table, &c.kernel, ov, now, &[], None);
            }
            return;
        }
        let mut utilisation = Vec::with_capacity(self.last.len());
        for (i, busy) in workers.busy().enumerate() {
            let delta = busy.saturating_sub(self.last[i]);
            self.last[i] = busy;
            let measured = cpu.as_ref().and_then(|c| c.worker_utilisation(i));
            let share = measured.unwrap_or_else(|| {
                // The runtime's busy time: it is submitted when the worker
                // parks, so a worker that never does reads idle.
                let busy = (delta.as_secs_f64() / elapsed.as_secs_f64()).min(1.0);
                utilisation.push(busy);
                busy
            });
            workers.set_utilisation(i, (share * 1000.0) as u32);
        }
        if let Some(ov) = &c.overload {
            crate::overload::own::control_tick(
                &c.table,
                &c.kernel,
                ov,
                now,
                &utilisation,
                cpu.as_ref(),
            );
        }
    }
}

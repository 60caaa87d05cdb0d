//! The replica inboxes: reports one worker's core accepted and the ramps
//! its probes began ([`doic::AnswerActions::replicate`]), and versions of
//! the agent's own realm reports and the clients they were sent to
//! ([`doic::Doic::take_replicas`] too; seed 002, RFC 7683 §5.2.1.4), on
//! their way to every other worker's core ([`doic::Doic::replicate`]), so
//! that all workers abate with the same states and the same rate buckets
//! (RFC 8582 §8.3), ramp together and send the same realm reports.
//!
//! Each worker has one bounded lock-free queue (a crossbeam array channel,
//! [`CAPACITY`] replicas) and a flag: the request path reads the flag (one
//! relaxed load) and drains the queue only when a replica is waiting.
//!
//! When a worker's queue is full, a replica for it is dropped, logged and
//! counted (`doic_replicas_dropped_total`); nothing waits. That worker then
//! lacks this version of the report until it handles an answer carrying it
//! itself, or a newer version reaches it; the other workers are not
//! affected. A full queue means that worker has not treated a request for
//! [`CAPACITY`] accepted reports in a row. A dropped realm version leaves
//! that worker sending the previous one until a newer one reaches it; a
//! dropped delivery leaves it abating for that client (as for a client
//! that was not sent the report) until the next version.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use doic::Doic;
use doic::treatment::Replica;

/// Replicas one worker's queue holds before new ones are dropped.
pub const CAPACITY: usize = 1024;

/// One worker's inbox.
#[derive(Debug)]
struct Inbox {
    ready: AtomicBool,
    tx: Sender<Replica>,
    rx: Receiver<Replica>,
}

/// The inboxes of every worker.
#[derive(Debug)]
pub(crate) struct Inboxes {
    inboxes: Vec<Inbox>,
    dropped: AtomicU64,
}

impl Inboxes {
    /// Inboxes for `workers` workers, each holding `capacity` replicas.
    pub(crate) fn new(workers: usize, capacity: usize) -> Inboxes {
        Inboxes {
            inboxes: (0..workers)
                .map(|_| {
                    let (tx, rx) = crossbeam_channel::bounded(capacity);
                    Inbox {
                        ready: AtomicBool::new(false),
                        tx,
                        rx,
                    }
                })
                .collect(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Hands `replicas` to every worker but `from`; a full inbox drops
    /// (and counts) what does not fit.
    pub(crate) fn publish(&self, from: usize, replicas: Vec<Replica>) {
        if replicas.is_empty() {
            return;
        }
        for (worker, inbox) in self.inboxes.iter().enumerate() {
            if worker == from {
                continue;
            }
            let mut lost = 0u64;
            for r in &replicas {
                match inbox.tx.try_send(r.clone()) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => lost += 1,
                }
            }
            if lost > 0 {
                self.dropped.fetch_add(lost, Ordering::Relaxed);
                tracing::warn!(worker, from, lost, "replica inbox full: reports dropped");
            }
            inbox.ready.store(true, Ordering::Release);
        }
    }

    /// Whether `worker` may have been woken: the request path's one
    /// relaxed load, [`Inboxes::drain`] only when it is true.
    #[inline]
    pub(crate) fn ready(&self, worker: usize) -> bool {
        self.inboxes
            .get(worker)
            .is_some_and(|inbox| inbox.ready.load(Ordering::Relaxed))
    }

    /// Applies what is waiting in `worker`'s inbox to its core; true when
    /// the worker was woken (a replica, or [`Inboxes::wake_all`]).
    pub(crate) fn drain(&self, worker: usize, core: &mut Doic) -> bool {
        // The swap (a locked write) only when a report is waiting
        // ([`Inboxes::ready`] first).
        if let Some(inbox) = self.inboxes.get(worker)
            && inbox.ready.swap(false, Ordering::Acquire)
        {
            for r in inbox.rx.try_iter() {
                core.replicate(&r);
            }
            return true;
        }
        false
    }

    /// Wakes every worker at its next request, with nothing in its queue:
    /// the control thread published protection reports
    /// ([`super::protect`]), which then apply at once rather than at the
    /// worker's next tick. The request path's check stays the one load.
    pub(crate) fn wake_all(&self) {
        for inbox in &self.inboxes {
            inbox.ready.store(true, Ordering::Release);
        }
    }

    /// Replicas dropped because an inbox was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use doic::DoicConfig;
    use doic::report::{Abatement, Report, ReportType};
    use doic::treatment::ReportReplica;

    use super::*;

    fn replica(at: Instant, sequence: u64) -> Replica {
        Replica::Report(ReportReplica {
            at,
            app_id: 4,
            id: "s1".into(),
            report: Report {
                report_type: ReportType::Host,
                sequence,
                validity: Duration::from_secs(30),
                abatement: Abatement::Loss { percent: 50 },
                source_id: None,
            },
            rate: None,
            delivered_to: None,
        })
    }

    fn core() -> Doic {
        // Replicas are applied as accepted elsewhere: no trust to configure.
        Doic::new("agent", DoicConfig::default(), 1, 1).unwrap()
    }

    /// A replica reaches every other worker's core, not the sender's.
    #[test]
    fn replicas_reach_the_other_workers() {
        let inboxes = Inboxes::new(3, 8);
        let at = Instant::now();
        inboxes.publish(1, vec![replica(at, 7)]);
        let mut cores = [core(), core(), core()];
        for (w, c) in cores.iter_mut().enumerate() {
            inboxes.drain(w, c);
        }
        let held = |c: &Doic| c.ocs_entry(4, ReportType::Host, "s1").map(|o| o.sequence);
        assert_eq!(held(&cores[0]), Some(7));
        assert_eq!(held(&cores[1]), None);
        assert_eq!(held(&cores[2]), Some(7));
        assert_eq!(inboxes.dropped(), 0);
    }

    /// A full inbox drops and counts; nothing blocks, and what fitted is
    /// applied in order.
    #[test]
    fn a_full_inbox_drops_and_counts() {
        let inboxes = Inboxes::new(2, 2);
        let at = Instant::now();
        inboxes.publish(0, (1..=5).map(|s| replica(at, s)).collect());
        assert_eq!(inboxes.dropped(), 3);
        let mut c = core();
        inboxes.drain(1, &mut c);
        assert_eq!(
            c.ocs_entry(4, ReportType::Host, "s1").map(|o| o.sequence),
            Some(2)
        );
        // Room again once drained.
        inboxes.publish(0, vec![replica(at, 9)]);
        inboxes.drain(1, &mut c);
        assert_eq!(
            c.ocs_entry(4, ReportType::Host, "s1").map(|o| o.sequence),
            Some(9)
        );
        assert_eq!(inboxes.dropped(), 3);
    }
}

//! The cross-worker hand-off on its own: what it costs to pass a request
//! from one worker to another and its answer back, by the mechanism of the
//! relay's connection queues (`agent::net::link`: bounded tokio channels
//! between current-thread runtimes, `try_send` by the producer, `recv_many`
//! by the consumer, one wake-up per batch).
//!
//! A closed loop keeps `window` requests in flight between a client task
//! and a server task, each with its own queue, as a downstream and an
//! upstream connection of the relay are. `Placement::Cross` puts the two
//! tasks on two threads (two workers, as when the client's and the server's
//! connections were accepted on different workers); `Placement::Same` puts
//! them on one (the same worker: the queues, without crossing threads). The
//! messages are the size of the relay's own ([`agent::peer::table::Relayed`],
//! [`agent::peer::table::ToConn`]). Measured: each thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) per round trip, so that a busy machine's
//! waiting does not count; the difference between the two placements is
//! the price of crossing threads (docs/relay.md, "Threads").

use std::time::Instant;

use tokio::sync::mpsc::{Receiver, Sender, channel};

use crate::bucket::thread_cpu_ns;

/// Where the two ends run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Both tasks on one current-thread runtime.
    Same,
    /// Each task on its own thread and runtime (pinned to two CPUs when
    /// there are two).
    Cross,
}

/// A request as it travels (the size of `Relayed`).
#[derive(Debug)]
struct Request {
    id: u64,
    _pad: [u8; REQUEST_PAD],
}

/// An answer as it travels (the size of `ToConn`).
#[derive(Debug)]
struct Answer {
    id: u64,
    _pad: [u8; ANSWER_PAD],
}

const REQUEST_PAD: usize = size_of::<agent::peer::table::Relayed>().saturating_sub(8);
const ANSWER_PAD: usize = size_of::<agent::peer::table::ToConn>().saturating_sub(8);

/// What the relay batches at most per wake-up (`recv_many`).
const BATCH: usize = 64;

/// One run's figures.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// Round trips (a request one way, its answer back).
    pub round_trips: u64,
    /// Wall-clock time, in nanoseconds.
    pub wall_ns: u64,
    /// CPU time of the client end, in nanoseconds.
    pub client_cpu_ns: u64,
    /// CPU time of the server end, in nanoseconds (0 for `Same`: counted
    /// in the client's thread).
    pub server_cpu_ns: u64,
}

impl Run {
    /// CPU time of both ends per round trip, in nanoseconds.
    #[must_use]
    pub fn cpu_ns_per_round_trip(&self) -> f64 {
        (self.client_cpu_ns + self.server_cpu_ns) as f64 / self.round_trips.max(1) as f64
    }
}

/// Runs `round_trips` round trips with `window` in flight.
///
/// # Errors
/// A thread or runtime that cannot start, or a queue that closed early.
pub fn run(placement: Placement, window: usize, round_trips: u64) -> anyhow::Result<Run> {
    let window = window.max(1);
    let (req_tx, req_rx) = channel::<Request>(window);
    let (ans_tx, ans_rx) = channel::<Answer>(window + 2);
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(anyhow::Error::from)
    };
    let t0 = Instant::now();
    let (client_cpu_ns, server_cpu_ns) = match placement {
        Placement::Same => {
            let rt = rt()?;
            let cpu0 = thread_cpu_ns();
            rt.block_on(async {
                let server = tokio::spawn(server(req_rx, ans_tx));
                client(req_tx, ans_rx, window, round_trips).await?;
                server.await?
            })?;
            (thread_cpu_ns() - cpu0, 0)
        }
        Placement::Cross => {
            let cores = core_affinity::get_core_ids().unwrap_or_default();
            let pin = |i: usize| {
                if let (true, Some(&core)) = (cores.len() >= 2, cores.get(i)) {
                    core_affinity::set_for_current(core);
                }
            };
            let server_core = cores.get(1).copied().filter(|_| cores.len() >= 2);
            let server_rt = rt()?;
            let server = std::thread::Builder::new()
                .name("handoff-server".into())
                .spawn(move || -> anyhow::Result<u64> {
                    if let Some(core) = server_core {
                        core_affinity::set_for_current(core);
                    }
                    let cpu0 = thread_cpu_ns();
                    server_rt.block_on(server(req_rx, ans_tx))?;
                    Ok(thread_cpu_ns() - cpu0)
                })?;
            let client_rt = rt()?;
            pin(0);
            let cpu0 = thread_cpu_ns();
            client_rt.block_on(client(req_tx, ans_rx, window, round_trips))?;
            let client = thread_cpu_ns() - cpu0;
            let server = server
                .join()
                .map_err(|_| anyhow::anyhow!("the server thread panicked"))??;
            (client, server)
        }
    };
    Ok(Run {
        round_trips,
        wall_ns: u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
        client_cpu_ns,
        server_cpu_ns,
    })
}

/// Keeps `window` requests in flight until `total` are answered; checks
/// that every answer is one of its own.
async fn client(
    tx: Sender<Request>,
    mut rx: Receiver<Answer>,
    window: usize,
    total: u64,
) -> anyhow::Result<()> {
    let send = |id: u64| {
        tx.try_send(Request {
            id,
            _pad: [0; REQUEST_PAD],
        })
        .map_err(|e| anyhow::anyhow!("request queue: {e}"))
    };
    let mut sent = 0;
    while sent < total.min(window as u64) {
        send(sent)?;
        sent += 1;
    }
    let (mut answered, mut sum) = (0u64, 0u64);
    let mut buf = Vec::with_capacity(BATCH);
    while answered < total {
        if rx.recv_many(&mut buf, BATCH).await == 0 {
            anyhow::bail!("answer queue closed after {answered} answers");
        }
        for a in buf.drain(..) {
            answered += 1;
            sum = sum.wrapping_add(a.id);
            if sent < total {
                send(sent)?;
                sent += 1;
            }
        }
    }
    // every request answered exactly once: the ids sum to 0 + 1 + ... + total - 1
    let want = total.wrapping_mul(total.wrapping_sub(1)) / 2;
    anyhow::ensure!(sum == want, "answers' ids sum to {sum}, not {want}");
    Ok(())
}

/// Answers each request it takes, in batches, until the client is done.
async fn server(mut rx: Receiver<Request>, tx: Sender<Answer>) -> anyhow::Result<()> {
    let mut buf = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut buf, BATCH).await > 0 {
        for r in buf.drain(..) {
            tx.try_send(Answer {
                id: r.id,
                _pad: [0; ANSWER_PAD],
            })
            .map_err(|e| anyhow::anyhow!("answer queue: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request is answered once, on either placement and window.
    #[test]
    fn every_request_is_answered_once() {
        for placement in [Placement::Same, Placement::Cross] {
            for window in [1, 3, 100] {
                let r = run(placement, window, 1_000).unwrap();
                assert_eq!(r.round_trips, 1_000);
                assert!(r.client_cpu_ns > 0);
            }
        }
    }
}

//! Open-loop load through the agent, counting what reaches its servers
//! (the protection tests, docs/protect.md).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tools::loadgen::{Client, Pace, Report, Traffic};

use super::node::Setup;

/// Offers `rate` requests of `traffic` per second from `c` for `secs`
/// (answers awaited up to 6 s after), while `during` runs; returns the
/// client's report, the requests each server of `s` received per second
/// between `from` and `to` s into the run, and what `during` gave.
pub async fn offer_open<T>(
    s: &Setup,
    c: &mut Client,
    traffic: &Traffic,
    (rate, secs): (u64, u64),
    (from, to): (u64, u64),
    during: impl Future<Output = T>,
) -> (Report, Vec<f64>, T) {
    let stop = AtomicBool::new(false);
    let run = c.run(
        traffic,
        Pace::Open(rate),
        Duration::from_secs(secs),
        Duration::from_secs(6),
        &stop,
    );
    let counts = || {
        s.servers
            .iter()
            .map(|v| v.stats.requests.load(Ordering::Relaxed))
            .collect::<Vec<_>>()
    };
    let sample = async {
        tokio::time::sleep(Duration::from_secs(from)).await;
        let a = counts();
        tokio::time::sleep(Duration::from_secs(to - from)).await;
        let span = (to - from) as f64;
        counts()
            .iter()
            .zip(&a)
            .map(|(b, a)| (b - a) as f64 / span)
            .collect::<Vec<_>>()
    };
    let (r, per_s, t) = tokio::join!(run, sample, during);
    (r.unwrap(), per_s, t)
}

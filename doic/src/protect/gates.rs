//! Per-client enforcement of the shares of a report made on a protected
//! server's behalf (RFC 7683 §5.1.3; RFC 8582 §6.1: the reporting node
//! splits the rate it can take among the reacting nodes it sends
//! OC-Maximum-Rate to).
//!
//! The agent does not delegate the abatement to the clients it sends the
//! report (RFC 7683 §5.2.1.3 leaves it the reacting node for its other
//! clients, and a client may not abate). One bucket at the server's limit
//! for every client let a DOIC client that abates to its share lose
//! requests to the excess of clients that do not: the shared bucket admits
//! whoever comes first. [`Gates`] instead holds
//!
//! - each DOIC client with a share (a downstream peer sending
//!   OC-Supported-Features, authorised to receive reports; marked at its
//!   first request or when it is sent the report, [`Gates::mark_doic`]) to
//!   its own share, with its own RFC 8582
//!   §8.3 leaky bucket at that rate, so that a client within its share has
//!   all its requests relayed and one above it is answered by the agent
//!   for the excess;
//! - every other client to one bucket at the rest of the limit: the limit
//!   less the shares of the clients marked (at least 1 request/s, RFC 8582
//!   §7.2.1).
//!
//! A DOIC client that takes the loss report (RFC 7683 §6: it drops a
//! percentage of its requests at random) sends its share on average with
//! the randomness of its drop around it; its bucket has a tolerance of at
//! least [`LOSS_TOLERANCE`] so that the peaks of that randomness pass and
//! it keeps its share on average. A bucket at the share with the rate
//! client's tolerance (10 ms) trims the peaks while nothing fills the
//! troughs: in the core's chain simulation 7 % of the share went unused
//! (docs/overload.md, "The agent chain").
//!
//! So the server's total stays at its limit. The buckets are the lock-free
//! ones of [`crate::bucket`]; the map of clients is fixed per report
//! version (the shares are, [`crate::own_load::split`]) and shared by every
//! worker, so the request path takes no lock. Sans-io: `now` is an
//! argument.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::bucket::BucketConfig;
use crate::fxhash::FxMap;
use crate::rate::{Priority, RateControl};

/// The least threshold TAU1 of the bucket of a DOIC client that takes the
/// loss report: its drop's randomness over a tenth of a second passes (at
/// a share of 2,000/s, 200 requests; a random drop to a fifth of 10,000/s
/// varies by about 13 per 100 ms).
pub const LOSS_TOLERANCE: Duration = Duration::from_millis(100);

/// `config` with TAU1 at least [`LOSS_TOLERANCE`]: the bucket of a client
/// that takes the loss report.
#[must_use]
pub fn loss_config(config: &BucketConfig) -> BucketConfig {
    let tolerance = u64::try_from(LOSS_TOLERANCE.as_nanos()).unwrap_or(u64::MAX);
    config.clone().with_floor_ns(config.floor_ns.max(tolerance))
}

/// One DOIC client's gate: its share and the buckets at it.
#[derive(Debug)]
struct ClientGate {
    bucket: RateControl,
    /// The same share with at least [`LOSS_TOLERANCE`]: for a client that
    /// takes the loss report.
    loss_bucket: RateControl,
    share: AtomicU32,
    /// It was sent the report: it is held to its share, not to the rest.
    doic: AtomicBool,
    /// The report it was last sent was the loss one.
    loss: AtomicBool,
}

impl ClientGate {
    fn admit(&self, now: Instant, priority: Priority) -> bool {
        if self.loss.load(Ordering::Relaxed) {
            self.loss_bucket.admit(now, priority)
        } else {
            self.bucket.admit(now, priority)
        }
    }
}

/// The buckets of one protected server's report version: one per client
/// with a share, one for the rest of the limit.
#[derive(Debug)]
pub struct Gates {
    clients: FxMap<String, Arc<ClientGate>>,
    rest: RateControl,
    limit: AtomicU32,
}

impl Gates {
    /// The gates of a new version at `now`: `limit` requests/s split as
    /// `shares` (client to requests/s). A client of `previous` keeps its
    /// bucket (its phase, RFC 8582 §8.3) at its new share and whether it is
    /// a DOIC client; the rest bucket keeps its phase too. `epoch` is the
    /// buckets' clock origin.
    #[must_use]
    pub fn revise(
        previous: Option<&Self>,
        (epoch, now): (Instant, Instant),
        limit: u32,
        shares: &BTreeMap<String, u32>,
        config: &BucketConfig,
    ) -> Self {
        let loss_config = loss_config(config);
        let mut clients = FxMap::default();
        for (client, &share) in shares {
            let share = share.max(1);
            let gate = match previous.and_then(|p| p.clients.get(client)) {
                Some(g) => {
                    g.share.store(share, Ordering::Relaxed);
                    g.bucket.set_rate(now, share);
                    g.loss_bucket.set_rate(now, share);
                    g.clone()
                }
                None => Arc::new(ClientGate {
                    bucket: RateControl::new(epoch, now, share, config),
                    loss_bucket: RateControl::new(epoch, now, share, &loss_config),
                    share: AtomicU32::new(share),
                    doic: AtomicBool::new(false),
                    loss: AtomicBool::new(false),
                }),
            };
            clients.insert(client.clone(), gate);
        }
        let rest = match previous {
            Some(p) => p.rest.clone(),
            None => RateControl::new(epoch, now, limit.max(1), config),
        };
        let g = Self {
            clients,
            rest,
            limit: AtomicU32::new(limit),
        };
        g.follow(now, limit);
        g
    }

    /// Follows the server's limit at `now` (every control tick): the rest
    /// bucket at the limit less the shares of the DOIC clients.
    pub fn follow(&self, now: Instant, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
        let held: u32 = self
            .clients
            .values()
            .filter(|g| g.doic.load(Ordering::Relaxed))
            .map(|g| g.share.load(Ordering::Relaxed))
            .fold(0, u32::saturating_add);
        let rest = limit.saturating_sub(held).max(1);
        if self.rest.bucket().rate() != rest {
            self.rest.set_rate(now, rest);
        }
    }

    /// Marks `client` as a DOIC client at `now` (it was sent the report,
    /// the loss one when `loss`): from now on it is held to its own share,
    /// with the loss client's tolerance when `loss` ([`LOSS_TOLERANCE`]),
    /// and the rest bucket shrinks by that share. A client without a share
    /// in this version stays with the rest. True when it was not marked
    /// before.
    pub fn mark_doic(&self, now: Instant, client: &str, loss: bool) -> bool {
        self.clients.get(client).is_some_and(|g| {
            if g.loss.load(Ordering::Relaxed) != loss {
                g.loss.store(loss, Ordering::Relaxed);
            }
            self.mark(now, g)
        })
    }

    fn mark(&self, now: Instant, g: &ClientGate) -> bool {
        if g.doic.load(Ordering::Relaxed) || g.doic.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.follow(now, self.limit.load(Ordering::Relaxed));
        true
    }

    /// Whether a request of `priority` from `client` at `now` may go to the
    /// server. `client` is `None` for a client that is not a DOIC client
    /// (sent no OC-Supported-Features, or is not authorised to receive
    /// reports); such a client, and a DOIC client without a share in this
    /// version, passes the rest bucket. A DOIC client with a share is
    /// marked at its first request: held to its share by its own bucket, it
    /// has its requests within it relayed and so receives the report in the
    /// server's answers (in the rest with the clients without DOIC, it could
    /// be starved by their excess and never learn it).
    #[must_use]
    pub fn admit(&self, now: Instant, client: Option<&str>, priority: Priority) -> bool {
        if let Some(g) = client.and_then(|c| self.clients.get(c)) {
            self.mark(now, g);
            return g.admit(now, priority);
        }
        self.rest.admit(now, priority)
    }

    /// The share `client` is held to, if it is a marked DOIC client.
    #[must_use]
    pub fn share_of(&self, client: &str) -> Option<u32> {
        self.clients
            .get(client)
            .filter(|g| g.doic.load(Ordering::Relaxed))
            .map(|g| g.share.load(Ordering::Relaxed))
    }

    /// The rate of the rest bucket, requests/s.
    #[must_use]
    pub fn rest_rate(&self) -> u32 {
        self.rest.bucket().rate()
    }
}

/// The demand of a client for the next split (RFC 8582 §6.1: the limit
/// split by demand, [`crate::own_load::split`]): its request arrival rate
/// `arrivals`, except for a DOIC client held to a share (`held`: the share
/// the last version gave it, and the demand it was split from). A client
/// that abates to its share at the source (rate, or loss by the
/// percentage) arrives at its share, not at its demand; read as its demand,
/// the report's own abatement would shrink its share at each version while
/// a client that does not abate, its arrivals its demand, kept its own (a
/// deep first cut would then stay with it for the whole episode; the realm
/// report adds back what its DOIC clients abate for the same reason,
/// docs/protect.md). So a held client arriving at half its share or more
/// keeps the demand it was split from; one arriving below that is
/// forgotten toward its arrivals with time constant `memory` over the
/// `elapsed` since the last split (a client of a few requests/s shows
/// half-empty ticks).
#[must_use]
pub fn source_demand(
    arrivals: f64,
    held: Option<(u32, f64)>,
    (elapsed, memory): (Duration, Duration),
) -> f64 {
    let arrivals = arrivals.max(0.0);
    let Some((share, before)) = held else {
        return arrivals;
    };
    if arrivals >= 0.5 * f64::from(share) {
        return arrivals.max(before);
    }
    let keep = (-elapsed.as_secs_f64() / memory.as_secs_f64().max(f64::MIN_POSITIVE)).exp();
    arrivals.max(arrivals + (before - arrivals) * keep)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rate::RateParams;

    fn config() -> BucketConfig {
        RateParams {
            randomise_phase: false,
            ..RateParams::default()
        }
        .bucket_config()
        .unwrap()
    }

    /// What each of the senders got through in `secs` seconds, each
    /// sending evenly at its rate (requests/s) on a 1 ms clock.
    fn run(
        g: &Gates,
        t0: Instant,
        secs: u64,
        senders: &[(Option<&str>, u32)],
    ) -> (Vec<u64>, Vec<u64>) {
        let mut passed = vec![0; senders.len()];
        let mut sent = vec![0; senders.len()];
        for ms in 0..secs * 1000 {
            let now = t0 + Duration::from_millis(ms);
            if ms.is_multiple_of(100) {
                g.follow(now, g.limit.load(Ordering::Relaxed));
            }
            for (i, (who, rate)) in senders.iter().enumerate() {
                // Requests due by the end of this millisecond.
                let due = (ms + 1) * u64::from(*rate) / 1000;
                while sent[i] < due {
                    sent[i] += 1;
                    if g.admit(now, *who, Priority::Normal) {
                        passed[i] += 1;
                    }
                }
            }
        }
        (passed, sent)
    }

    /// A client sent the loss report keeps its share with the randomness of
    /// its drop around it: bursts of a tenth of a second at its share pass
    /// whole, where the bucket of a client sent the rate report (10 ms of
    /// tolerance) passes a few of each (RFC 7683 §6: a loss client drops at
    /// random; RFC 8582 §8.3: a rate client sends evenly).
    #[test]
    fn a_loss_client_s_peaks_pass_within_its_share() {
        let t0 = Instant::now();
        let shares = BTreeMap::from([("loss".to_owned(), 200), ("rate".to_owned(), 200)]);
        let g = Gates::revise(None, (t0, t0), 400, &shares, &config());
        assert!(g.mark_doic(t0, "loss", true));
        assert!(g.mark_doic(t0, "rate", false));
        let mut passed = [0u32; 2];
        // 5 s at 200/s each, in bursts of 20 every 100 ms.
        for tenth in 0..50 {
            let now = t0 + Duration::from_millis(100 * tenth);
            for (i, who) in ["loss", "rate"].into_iter().enumerate() {
                for _ in 0..20 {
                    passed[i] += u32::from(g.admit(now, Some(who), Priority::Normal));
                }
            }
        }
        assert!(passed[0] >= 990, "loss client: {} of 1,000", passed[0]);
        assert!(passed[1] <= 500, "rate client: {} of 1,000", passed[1]);
    }

    /// A DOIC client above its share is held to it, a light DOIC client
    /// within its share loses nothing, the clients without DOIC share the
    /// rest, and the server's total stays at its limit.
    #[test]
    fn each_doic_client_is_held_to_its_share_and_the_others_to_the_rest() {
        let t0 = Instant::now();
        let shares = BTreeMap::from([
            ("heavy".to_owned(), 60),
            ("light".to_owned(), 20),
            ("plain".to_owned(), 120),
        ]);
        let g = Gates::revise(None, (t0, t0), 200, &shares, &config());
        assert!(g.mark_doic(t0, "heavy", false));
        assert!(g.mark_doic(t0, "light", false));
        assert!(!g.mark_doic(t0, "light", false), "marked once");
        assert!(!g.mark_doic(t0, "stranger", false), "no share, no gate");
        assert_eq!(g.rest_rate(), 120);
        assert_eq!(g.share_of("heavy"), Some(60));
        assert_eq!(g.share_of("plain"), None, "not a DOIC client");
        let secs = 10;
        let (passed, sent) = run(
            &g,
            t0,
            secs,
            &[
                (Some("heavy"), 600),
                (Some("light"), 15),
                (None, 400),
                (Some("stranger"), 100),
            ],
        );
        let per_s = |n: u64| n as f64 / secs as f64;
        // The heavy DOIC client: its share, no more (plus the bucket's
        // tolerance, TAU1 = 5 T, once).
        assert!(
            (59.0..=61.0).contains(&per_s(passed[0])),
            "heavy {}",
            per_s(passed[0])
        );
        // The light one within its share: every request.
        assert_eq!(passed[1], sent[1], "light");
        // The rest (120/s) between the client without DOIC and the DOIC
        // client that has no share in this version.
        let rest = per_s(passed[2] + passed[3]);
        assert!((119.0..=121.5).contains(&rest), "rest {rest}");
        // The server's total: its limit.
        let total = per_s(passed.iter().sum());
        assert!(total <= 201.0, "total {total}");
        // One bucket at the limit for every client, as before: whoever
        // comes first is admitted, and the light client loses requests to
        // the others' excess.
        let shared = RateControl::new(t0, t0, 200, &config());
        let (mut light, mut sent) = (0, 0);
        for ms in 0..secs * 1000 {
            let now = t0 + Duration::from_millis(ms);
            for _ in 0..(ms + 1) * 1100 / 1000 - ms * 1100 / 1000 {
                let _ = shared.admit(now, Priority::Normal);
            }
            while sent < (ms + 1) * 15 / 1000 {
                sent += 1;
                light += u64::from(shared.admit(now, Priority::Normal));
            }
        }
        assert!(light * 2 < sent, "shared bucket: light {light} of {sent}");
    }

    /// RFC 8582 §6.1 shares split by demand: a client that abates to its
    /// share keeps it from version to version, even from a deep first cut
    /// as the limit recovers, where its arrivals alone shrink it at every
    /// version under a client that does not abate.
    #[test]
    fn a_client_abating_to_its_share_keeps_it_across_versions() {
        use crate::own_load::split;
        let t = (Duration::from_millis(500), Duration::from_secs(10));
        // Demands 40 (abating to its share) and 600 (not abating, held by
        // its bucket); the first cut at 20/s, then 200/s.
        let mut d = [40.0, 600.0];
        let first = split(20, &[("light", d[0]), ("heavy", d[1])]);
        let (mut naive, mut shares) = (first[0].1, [first[0].1, first[1].1]);
        for _ in 0..20 {
            // The light client arrives at its share, the heavy at 600.
            naive = split(200, &[("light", f64::from(naive)), ("heavy", 600.0)])[0].1;
            d = [
                source_demand(f64::from(shares[0]), Some((shares[0], d[0])), t),
                source_demand(600.0, Some((shares[1], d[1])), t),
            ];
            let s = split(200, &[("light", d[0]), ("heavy", d[1])]);
            shares = [s[0].1, s[1].1];
        }
        assert_eq!(first[0].1, 2);
        assert!(naive <= 2, "arrivals as demand: {naive}");
        assert_eq!(shares, [13, 187], "demand kept while at the share");
        // A held client arriving below half its share is forgotten toward
        // its arrivals with time; one not held is its arrivals.
        let ten = (Duration::from_secs(10), Duration::from_secs(10));
        let f = source_demand(3.0, Some((20, 40.0)), ten);
        assert!((16.0..17.0).contains(&f), "3 + 37 / e: {f}");
        assert_eq!(source_demand(3.0, None, t), 3.0);
        assert_eq!(source_demand(900.0, Some((193, 600.0)), t), 900.0);
    }

    /// The light client's unused share is not given to the others (it is
    /// its allocation), the limit moving each tick moves the rest, and a new
    /// version keeps a client's mark and its bucket.
    #[test]
    fn the_rest_follows_the_limit_and_a_new_version_keeps_the_marks() {
        let t0 = Instant::now();
        let shares = BTreeMap::from([("a".to_owned(), 50), ("b".to_owned(), 50)]);
        let g = Gates::revise(None, (t0, t0), 200, &shares, &config());
        assert_eq!(g.rest_rate(), 200, "no DOIC client marked yet");
        g.mark_doic(t0, "a", false);
        assert_eq!(g.rest_rate(), 150);
        g.follow(t0, 180);
        assert_eq!(g.rest_rate(), 130);
        // Shares above the limit leave the rest at 1/s, never 0.
        g.follow(t0, 40);
        assert_eq!(g.rest_rate(), 1);
        // A new version: a's share is 80, its mark kept; c is new.
        let t1 = t0 + Duration::from_secs(1);
        let shares = BTreeMap::from([("a".to_owned(), 80), ("c".to_owned(), 20)]);
        let h = Gates::revise(Some(&g), (t0, t1), 200, &shares, &config());
        assert_eq!(h.share_of("a"), Some(80));
        assert_eq!(h.share_of("b"), None);
        assert_eq!(h.rest_rate(), 120);
        // A DOIC client with a share is marked at its first request; a
        // client without DOIC passes the rest.
        let (passed, _) = run(
            &h,
            t1,
            2,
            &[(None, 150), (Some("a"), 300), (Some("c"), 100)],
        );
        assert!(
            (159..=166).contains(&passed[1]),
            "a held to 80/s: {}",
            passed[1]
        );
        assert!(
            (39..=46).contains(&passed[2]),
            "c held to 20/s: {}",
            passed[2]
        );
        assert_eq!(h.share_of("c"), Some(20));
        assert!(
            (199..=206).contains(&passed[0]),
            "the rest 100/s: {}",
            passed[0]
        );
    }
}

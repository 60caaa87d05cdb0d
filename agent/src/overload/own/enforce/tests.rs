//! Enforcement against RFC 8582 §6.1 / §8.3.2 and RFC 7683 §5.2.2: a client
//! held to its allocation has its excess answered 3004, normal priority
//! before high (DRMP, RFC 7944), a client that receives the report after
//! its grace and with the report in the answer (RFC 8581 §6.2.4).

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use diameter::codec::avp::Avp;
use diameter::codec::{Header, Routing};
use diameter::dictionary::code;
use doic::features::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use doic::own_load::{OwnLoad, OwnLoadParams};
use doic::{DoicConfig, OcSupportedFeatures, ReportType};

use super::super::super::Overload;
use super::super::super::cores::with_core;
use super::super::super::request::Route;
use super::{client_params, enforce, update};
use crate::peer::table::{PeerSlot, PeerTable};
use crate::routing::Router;

const ME: &str = "agent.example.com";
const CLIENT: &str = "client.example.org";
/// RFC 7944: lower is more important; `drmp_high_at_most` is 4 by default.
const DRMP_LOW: u32 = 15;
const DRMP_HIGH: u32 = 0;

fn request(hbh: u32, drmp: u32, features: Option<&OcSupportedFeatures>) -> Bytes {
    let mut m = diameter::codec::Message::request(272, 4, true)
        .with(Avp::str(code::SESSION_ID, &format!("{CLIENT};{hbh}")))
        .with(Avp::str(code::ORIGIN_HOST, CLIENT))
        .with(Avp::str(code::ORIGIN_REALM, "example.org"))
        .with(Avp::str(code::DESTINATION_REALM, "example.net"))
        .with(Avp::u32(code::DRMP, drmp));
    if let Some(f) = features {
        m = m.with(f.to_avp());
    }
    m.to_bytes().unwrap().freeze()
}

fn config() -> DoicConfig {
    let mut cfg = DoicConfig {
        algorithms: vec![doic::Algorithm::Loss, doic::Algorithm::Rate],
        ..DoicConfig::default()
    };
    cfg.peers.insert(
        CLIENT.into(),
        doic::config::PeerPolicy {
            trusted: true,
            receive_reports: true,
            ..doic::config::PeerPolicy::default()
        },
    );
    cfg
}

struct World {
    ov: Overload,
    slot: PeerSlot,
    load: OwnLoad,
    table: PeerTable,
    router: Router,
}

impl World {
    /// The agent reporting with `CLIENT` allocated 10 requests/s.
    fn overloaded() -> Self {
        let ov = Overload::new(ME, Some(config()), 1).unwrap();
        let slot = PeerSlot::new(CLIENT, "example.org", None);
        let now = ov.clock.now();
        let mut load = OwnLoad::new(ME, OwnLoadParams::new(10), now, 1_700_000_000_000);
        load.handle_load(now, &vec![(CLIENT.to_owned(), 100.0)]);
        assert_eq!(load.allocation(CLIENT), Some(10));
        assert!(!ov.own_enforcing(), "nothing held before the control tick");
        update(&ov, &load, std::iter::once(&slot), now);
        Self {
            ov,
            slot,
            load,
            table: PeerTable::default(),
            router: Router::new(),
        }
    }

    /// The answer the agent makes at once, if any.
    fn send(&self, msg: &Bytes) -> Option<(Bytes, u32)> {
        let route = Route {
            router: &self.router,
            table: &self.table,
            origin: (ME, "example.com"),
        };
        let routing = Routing::scan(msg).unwrap();
        let mut out = BytesMut::new();
        let code = enforce(
            &mut out,
            &self.ov,
            &route,
            &self.slot,
            msg,
            Header::read(msg),
            &routing,
        )?;
        Some((out.freeze(), code))
    }

    /// How many of `n` requests of `drmp` go on.
    fn admitted(&self, n: u32, drmp: u32, features: Option<&OcSupportedFeatures>) -> u32 {
        (0..n)
            .filter(|i| self.send(&request(*i, drmp, features)).is_none())
            .count() as u32
    }
}

/// The features of a client that supports the rate algorithm and peer
/// reports.
fn rate_client() -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT),
        source_id: Some(CLIENT.into()),
        peer_algo: None,
    }
}

/// The one OC-OLR an answer carries, a peer report.
fn peer_report(answer: &Bytes) -> diameter::codec::doic::OcOlr {
    let r = Routing::scan_answer(answer).unwrap();
    let olrs: Vec<_> = r
        .oc_olrs()
        .map(|o| diameter::codec::doic::OcOlr::from_raw(&o).unwrap())
        .collect();
    assert_eq!(olrs.len(), 1, "{olrs:?}");
    assert_eq!(olrs[0].report_type, ReportType::Peer);
    olrs.into_iter().next().unwrap()
}

#[test]
fn the_excess_of_a_client_without_doic_is_answered_3004_higher_priority_last() {
    let w = World::overloaded();
    assert!(w.ov.own_enforcing());
    assert_eq!(w.slot.own_limit.allocated(), Some(10));
    // RFC 8582 §8.3.2 with TAU1 = 25 T and TAU2 = 50 T (five times the
    // reacting node's) at 10/s: a burst of normal requests gets about
    // 1 + 25 through (the randomised phase adds up to one), high-priority
    // ones 25 more on top.
    let normal = w.admitted(60, DRMP_LOW, None);
    assert!((25..=28).contains(&normal), "{normal}");
    let high = w.admitted(60, DRMP_HIGH, None);
    assert!(
        (24..=27).contains(&high),
        "high priority still admitted: {high}"
    );
    let after = w.admitted(60, DRMP_LOW, None);
    assert!(after <= 1, "{after}");
    assert_eq!(
        w.slot.own_limit.throttled(),
        u64::from(180 - normal - high - after),
        "every refused request counted"
    );
    // The answer: 3004 DIAMETER_TOO_BUSY (RFC 7683 §5.2.2, `throttle_result
    // = auto` for a peer overload), no DOIC AVP toward a client without
    // DOIC (RFC 7683 §5.1.2).
    let (a, code) = w.send(&request(99, DRMP_LOW, None)).expect("throttled");
    assert_eq!(code, 3004);
    let r = Routing::scan_answer(&a).unwrap();
    assert_eq!(r.result_code(), Some(3004));
    assert!(r.oc_supported_features().is_none() && r.oc_olrs().next().is_none());
}

#[test]
fn a_doic_client_gets_its_grace_then_3004_with_the_agents_peer_report() {
    let w = World::overloaded();
    let now = w.ov.clock.now();
    // The workers hold the agent's own report (`own::apply` at their tick).
    with_core(&w.ov, |core, _| {
        for r in w.load.reports() {
            core.put_own_peer_report(now, r.peer.as_deref(), r.report.clone(), r.until);
        }
    });
    let f = rate_client();
    // Within its grace a client that receives the report is not held yet.
    assert_eq!(w.admitted(60, DRMP_LOW, Some(&f)), 60);
    assert!(w.slot.own_limit.receives());
    // The grace over, it is held like any other client ...
    w.slot
        .own_limit
        .grace_until
        .store(0, std::sync::atomic::Ordering::Relaxed);
    let normal = w.admitted(60, DRMP_LOW, Some(&f));
    assert!((25..=28).contains(&normal), "{normal}");
    // ... and its 3004 carries the agent's peer report (RFC 8581 §6.2.4:
    // in every answer to a peer that supports them), SourceID the agent.
    let (a, code) = w.send(&request(99, DRMP_LOW, Some(&f))).expect("throttled");
    assert_eq!(code, 3004);
    let olr = peer_report(&a);
    assert_eq!(olr.source_id.as_deref(), Some(ME));
    assert_eq!(olr.maximum_rate, Some(10));
}

#[test]
fn a_worker_whose_tick_has_not_run_answers_with_the_report_published() {
    // The controller published its report; this worker has not run its
    // tick since (a worker that relays without end in a small CPU share),
    // so its core does not hold the report yet. Its 3004 carries it all the
    // same: an answer without it leaves the client sending (RFC 8581
    // §6.2.4), and at ten times the capacity the client's edge never
    // learnt and never abated (docs/own-overload.md).
    let w = World::overloaded();
    let reports: std::sync::Arc<[doic::own_load::OwnReport]> = w.load.reports().cloned().collect();
    *w.ov.own.published.lock().unwrap() = reports;
    w.ov.own
        .generation
        .store(w.load.generation(), std::sync::atomic::Ordering::Release);
    let f = rate_client();
    w.slot
        .own_limit
        .grace_until
        .store(0, std::sync::atomic::Ordering::Relaxed);
    let (a, code) = (0..100)
        .find_map(|i| w.send(&request(i, DRMP_LOW, Some(&f))))
        .expect("throttled");
    assert_eq!(code, 3004);
    assert_eq!(peer_report(&a).maximum_rate, Some(10));
}

#[test]
fn limits_are_lifted_when_the_reports_end() {
    let mut w = World::overloaded();
    let t = w.ov.clock.now();
    // Load far below capacity for longer than `end_after`: the reports end.
    for s in 1..=3 {
        w.load.handle_load(
            t + std::time::Duration::from_secs(s),
            &vec![(CLIENT.to_owned(), 1.0)],
        );
    }
    assert!(!w.load.is_reporting());
    update(&w.ov, &w.load, std::iter::once(&w.slot), Instant::now());
    assert!(!w.ov.own_enforcing());
    assert_eq!(w.slot.own_limit.allocated(), None);
    assert_eq!(w.admitted(100, DRMP_LOW, None), 100);
}

#[test]
fn a_client_read_once_per_cgroup_period_keeps_its_allocation() {
    use doic::rate::{Priority, RateControl, RateParams};
    use std::time::Duration;
    // 5,726/s allocated, the requests read in batches 50 ms apart (a worker
    // in 1 ms of CPU per 50 ms), each batch stamped with one time and holding
    // 50 ms of the allocation: five seconds of it.
    let admitted = |params: RateParams, per_batch: u32| {
        let config = params.bucket_config().unwrap();
        let t0 = Instant::now();
        let r = RateControl::new(t0, t0, 5_726, &config);
        let mut n = 0u32;
        for k in 1..=100u32 {
            let now = t0 + Duration::from_millis(50) * k;
            n += (0..per_batch)
                .filter(|_| r.admit(now, Priority::Normal))
                .count() as u32;
        }
        n
    };
    let kept = admitted(client_params(RateParams::default()), 286);
    assert!(
        kept >= 27_170,
        "{kept} of 28,600 within the allocation passed"
    );
    // With the reacting node's floor alone (10 ms), about a fifth.
    let floor_only = RateParams {
        tau1_floor_ms: RateParams::default().tau1_floor_ms,
        ..client_params(RateParams::default())
    };
    let short = admitted(floor_only, 286);
    assert!(short < 14_300, "{short}");
    // Still a rate: twice the allocation in the same batches is held to it
    // (plus one tolerance).
    let twice = admitted(client_params(RateParams::default()), 572);
    assert!(twice <= 28_600 + 600, "{twice}");
}

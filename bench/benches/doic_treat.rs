//! Cost of the DOIC core's per-request decision, `Doic::treat`, with no
//! matching overload state (the anchor: routing bookkeeping only), with a loss
//! host report, and with a rate host report on the shared lock-free bucket.
//! Prints the median of several runs of each and the ratio to the anchor.
//!
//! Run: `cargo bench -p bench --bench doic_treat`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use diameter::codec::doic::{OcOlr, OcSupportedFeatures, ReportType};
use diameter::dictionary::doic::OLR_RATE_ALGORITHM;
use doic::{AnswerView, Candidate, Doic, DoicConfig, PeerPolicy, PendingTx, RequestView};

const APP: u32 = 16_777_238;
const N: u32 = 1_000_000;
const RUNS: usize = 7;

/// A report to install before measuring, with the answer's features.
type Setup = Option<(OcOlr, Option<OcSupportedFeatures>)>;

fn core(report: Setup, t0: Instant) -> Doic {
    let mut cfg = DoicConfig::default();
    cfg.peers.insert(
        "s1".into(),
        PeerPolicy {
            trusted: true,
            receive_reports: true,
            ..PeerPolicy::default()
        },
    );
    let mut core = Doic::new("agent", cfg, 1, 0).expect("valid configuration");
    if let Some((olr, features)) = report {
        let olrs = [olr];
        let tx = PendingTx {
            app_id: APP,
            client: "client".into(),
            client_features: None,
            client_peer_report: false,
            dest_realm: "realm".into(),
            upstream: "s1".into(),
        };
        let view = AnswerView {
            app_id: APP,
            origin_host: "s1",
            origin_realm: "realm",
            result_code: Some(2001),
            experimental_result_code: None,
            features: features.as_ref(),
            olrs: &olrs,
        };
        let _ = core.on_answer(t0, &tx, "s1", &view);
    }
    core
}

fn run(core: &mut Doic, t0: Instant) -> Duration {
    let req = RequestView {
        app_id: APP,
        command_code: 272,
        from_peer: "client",
        dest_realm: "realm",
        dest_host: Some("s1"),
        features: None,
        drmp: None,
    };
    let cands = [Candidate {
        peer: "s1",
        server: Some("s1"),
    }];
    let start = Instant::now();
    for i in 0..N {
        let now = t0 + Duration::from_micros(u64::from(i));
        black_box(core.treat(now, black_box(&req), &cands));
    }
    start.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let t0 = Instant::now();
    let mut loss = OcOlr::new(1, ReportType::Host);
    loss.reduction_percentage = Some(30);
    loss.validity_duration = Some(86_400);
    let mut rate = OcOlr::new(1, ReportType::Host);
    rate.maximum_rate = Some(100_000);
    rate.validity_duration = Some(86_400);
    let rate_features = OcSupportedFeatures {
        feature_vector: Some(OLR_RATE_ALGORITHM),
        ..OcSupportedFeatures::default()
    };
    let cases: [(&str, Setup); 3] = [
        ("no overload state (anchor)", None),
        ("loss host report 30 %", Some((loss, None))),
        ("rate host report 100k/s", Some((rate, Some(rate_features)))),
    ];
    let mut anchor = None;
    for (name, report) in cases {
        let samples: Vec<f64> = (0..RUNS)
            .map(|_| {
                let mut c = core(report.clone(), t0);
                run(&mut c, t0).as_secs_f64() * 1e9 / f64::from(N)
            })
            .collect();
        let m = median(samples);
        let base = *anchor.get_or_insert(m);
        println!(
            "{name:<30} {m:8.1} ns/request (median of {RUNS}), ratio {:.2}",
            m / base
        );
    }
}

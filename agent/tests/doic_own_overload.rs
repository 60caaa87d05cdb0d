//! The agent as reporting node for its own overload, end to end over real
//! TCP on loopback (RFC 8581 §6.2.4, RFC 8582 §6.1/§6.5/§7.2.1, RFC 7683
//! §5.2.3): a DOIC client sending above `[doic] own_capacity` receives the
//! agent's peer report with the rate algorithm, abates to the rate it is
//! given, and sees the report end when its load falls.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use diameter::codec::doic::OcSupportedFeatures;
use diameter::dictionary::doic::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use support::*;
use tools::loadgen::{Client, Identity, TEST_APP};

const S1: &str = "server1.example.net";
const CAPACITY: u32 = 100;

/// Sends `features`-carrying requests at `rate` per second for at most
/// `max`, stopping early after the first answer for which `stop` holds.
/// Returns the answers and whether `stop` held.
async fn paced(
    c: &mut Client,
    hbh: &mut u32,
    rate: f64,
    max: Duration,
    features: Option<&OcSupportedFeatures>,
    mut stop: impl FnMut(&Bytes) -> bool,
) -> (Vec<Bytes>, bool) {
    let t0 = Instant::now();
    let mut sent = 0u32;
    let mut all = Vec::new();
    while t0.elapsed() < max {
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let due = (t0.elapsed().as_secs_f64() * rate) as u32;
        if due <= sent {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let k = due - sent;
        let a = exchange(c, *hbh, k, k.min(64), features).await;
        *hbh += k;
        sent += k;
        let hit = a.iter().any(&mut stop);
        all.extend(a);
        if hit {
            return (all, true);
        }
    }
    (all, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_overload_rate_report_is_honoured_then_ended() {
    let s1 = Reporter::spawn(S1).await;
    let doic = format!(
        "own_capacity = {CAPACITY}\n[doic.peers.\"{CLIENT}\"]\ntrusted = true\n[doic.peers.\"client2.example.org\"]\ntrusted = true\n"
    );
    let agent = start_agent(agent_config(&[(&s1, true)], Some(&doic), 2), 1).await;
    let metrics = agent.metrics_addr().unwrap();
    let mut c = connect(agent.local_addrs()[0]).await;
    let cf = client_features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT);
    let mut hbh = 1;

    // Below capacity: no own report.
    let (a, _) = paced(
        &mut c,
        &mut hbh,
        50.0,
        Duration::from_millis(2500),
        Some(&cf),
        |_| false,
    )
    .await;
    assert!(
        a.iter().all(|m| own_reports(m).is_empty()),
        "no overload yet"
    );

    // Three times the capacity: the agent's own peer report arrives.
    let t_over = Instant::now();
    let (a, got) = paced(
        &mut c,
        &mut hbh,
        3.0 * f64::from(CAPACITY),
        Duration::from_secs(8),
        Some(&cf),
        |m| !own_reports(m).is_empty(),
    )
    .await;
    assert!(got, "no own peer report after {} requests", a.len());
    let t_report = t_over.elapsed().as_secs_f64();
    let first = a.iter().find(|m| !own_reports(m).is_empty()).unwrap();
    let r = own_reports(first);
    assert_eq!(r.len(), 1, "{r:?}");
    let olr = &r[0];
    // RFC 8581 §6.2.4 / §7.2: PEER_REPORT, SourceID = the agent.
    assert_eq!(olr.source_id.as_deref(), Some(AGENT));
    // RFC 8582 §6.5: OC-Maximum-Rate, no OC-Reduction-Percentage; one
    // sending peer: the whole capacity is its allocation.
    assert_eq!(olr.reduction_percentage, None);
    let max_rate = olr.maximum_rate.expect("OC-Maximum-Rate");
    assert_eq!(max_rate, CAPACITY);
    assert_eq!(olr.validity_duration, Some(10));
    // RFC 8581 §6.1.2: OC-Peer-Algo rate, the agent's SourceID.
    let f = features_of(first);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].source_id.as_deref(), Some(AGENT));
    assert_eq!(f[0].peer_algo, Some(OLR_RATE_ALGORITHM));
    assert_ne!(f[0].features() & OC_PEER_REPORT, 0);
    let seq0 = olr.sequence_number;

    // A client without DOIC gets no DOIC AVP (RFC 7683 §5.1.2), and one
    // with DOIC but no peer reports gets no peer report (RFC 7683 §5.2.3).
    let mut c2 = Client::connect(
        agent.local_addrs()[0],
        Identity::new("client2.example.org", "example.org"),
        vec![TEST_APP],
    )
    .await
    .unwrap();
    let a = exchange(&mut c2, 1, 1, 1, None).await;
    for m in &a {
        assert!(features_of(m).is_empty() && olrs_of(m).is_empty());
    }
    let no_pr = OcSupportedFeatures {
        source_id: Some("client2.example.org".into()),
        ..client_features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM)
    };
    let a = exchange(&mut c2, 10, 1, 1, Some(&no_pr)).await;
    for m in &a {
        assert!(own_reports(m).is_empty());
    }
    drop(c2);

    // The client honours the report: it sends at the rate given.
    let before = s1.requests();
    let t0 = Instant::now();
    let (a, _) = paced(
        &mut c,
        &mut hbh,
        f64::from(max_rate),
        Duration::from_secs(4),
        Some(&cf),
        |_| false,
    )
    .await;
    let secs = t0.elapsed().as_secs_f64();
    // RFC 8581 §6.2.4: the report is in every answer to the client.
    for m in &a {
        let r = own_reports(m);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].sequence_number >= seq0);
        assert!(r[0].validity_duration > Some(0), "not ended while abating");
        // Client 2's two requests may shift the split a little.
        let m = r[0].maximum_rate.unwrap();
        assert!((CAPACITY * 9 / 10..=CAPACITY).contains(&m), "{m}");
    }
    let reached = (s1.requests() - before) as f64 / secs;
    assert!(reached <= f64::from(CAPACITY) * 1.05 + 5.0, "{reached}/s");
    // The agent measures its arrival rate back under capacity and still
    // reports (hysteresis: not clearly below capacity).
    let body = http_get(metrics, "/metrics").await;
    let load = gauge(&body, "doic_own_load_rps").expect("doic_own_load_rps");
    assert!(load <= f64::from(CAPACITY) * 1.1, "own load {load}: {body}");
    assert!(load >= f64::from(CAPACITY) * 0.7, "own load {load}: {body}");
    assert_eq!(gauge(&body, "doic_own_overload"), Some(1.0), "{body}");
    assert_eq!(
        gauge(
            &body,
            &format!("doic_own_reports_active{{peer=\"{CLIENT}\"}}")
        ),
        Some(1.0),
        "{body}"
    );
    let allocated = gauge(
        &body,
        &format!("doic_own_rate_allocated_rps{{peer=\"{CLIENT}\"}}"),
    );
    assert!(allocated >= Some(f64::from(CAPACITY) * 0.9), "{body}");
    assert!(
        body.contains(&format!(
            "doic_own_peer_load_rps{{peer=\"{CLIENT}\",source=\"userspace\"}}"
        )),
        "{body}"
    );

    // Load falls clearly below capacity: the report ends with validity 0
    // and a greater sequence number (RFC 7683 §5.2.3, §5.2.1.4).
    let t_low = Instant::now();
    let (a, ended) = paced(
        &mut c,
        &mut hbh,
        20.0,
        Duration::from_secs(10),
        Some(&cf),
        |m| {
            own_reports(m)
                .iter()
                .any(|o| o.validity_duration == Some(0))
        },
    )
    .await;
    assert!(ended, "no end report after {} answers", a.len());
    eprintln!(
        "own overload: report after {t_report:.1} s at 3x capacity; honoured: {reached:.1}/s reached the server, own load {load:.1}/s (capacity {CAPACITY}); end report {:.1} s after the load fell to 20/s",
        t_low.elapsed().as_secs_f64()
    );
    let end = own_reports(a.last().unwrap());
    assert_eq!(end.len(), 1);
    assert!(end[0].sequence_number > seq0);
    assert_eq!(end[0].source_id.as_deref(), Some(AGENT));
    let body = http_get(metrics, "/metrics").await;
    assert_eq!(gauge(&body, "doic_own_overload"), Some(0.0), "{body}");
    stop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_own_capacity_a_light_load_is_not_reported() {
    let s1 = Reporter::spawn(S1).await;
    let doic = format!("[doic.peers.\"{CLIENT}\"]\ntrusted = true\n");
    let agent = start_agent(agent_config(&[(&s1, true)], Some(&doic), 2), 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let cf = client_features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT);
    let mut hbh = 1;
    let (a, _) = paced(
        &mut c,
        &mut hbh,
        500.0,
        Duration::from_secs(3),
        Some(&cf),
        |_| false,
    )
    .await;
    assert!(a.len() > 1000);
    assert!(a.iter().all(|m| own_reports(m).is_empty()));
    // Measured, not configured: 500/s is far from overloading the agent.
    let body = http_get(agent.metrics_addr().unwrap(), "/metrics").await;
    assert_eq!(gauge(&body, "doic_own_overload"), Some(0.0), "{body}");
    assert_eq!(
        gauge(&body, "doic_own_measured_overload"),
        Some(0.0),
        "{body}"
    );
    assert!(!body.contains("doic_own_client_allocated_rps{"), "{body}");
    stop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_share_the_capacity_in_proportion_to_their_load() {
    // RFC 8582 §6.1: a rate per reacting node; the agent's rule: shares in
    // proportion to demand, the sum within capacity.
    let s1 = Reporter::spawn(S1).await;
    let doic = format!(
        "own_capacity = 200\n[doic.peers.\"{CLIENT}\"]\ntrusted = true\n[doic.peers.\"client2.example.org\"]\ntrusted = true\n"
    );
    let agent = start_agent(agent_config(&[(&s1, true)], Some(&doic), 2), 1).await;
    let mut c1 = connect(agent.local_addrs()[0]).await;
    let mut c2 = Client::connect(
        agent.local_addrs()[0],
        Identity::new("client2.example.org", "example.org"),
        vec![TEST_APP],
    )
    .await
    .unwrap();
    let v = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;
    let f1 = client_features(v);
    let f2 = OcSupportedFeatures {
        source_id: Some("client2.example.org".into()),
        ..client_features(v)
    };
    let (mut h1, mut h2) = (1, 1);
    let run = Duration::from_secs(5);
    let ((a1, _), (a2, _)) = tokio::join!(
        paced(&mut c1, &mut h1, 300.0, run, Some(&f1), |_| false),
        paced(&mut c2, &mut h2, 100.0, run, Some(&f2), |_| false),
    );
    let last = |a: &[Bytes]| {
        let r = own_reports(a.last().unwrap());
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].source_id.as_deref(), Some(AGENT));
        r[0].maximum_rate.unwrap()
    };
    let (m1, m2) = (last(&a1), last(&a2));
    assert!(m1 + m2 <= 200, "{m1} + {m2}");
    assert!(m1 + m2 >= 180, "{m1} + {m2}");
    // 3:1 offered; measured over 1 s windows on a shared machine.
    let ratio = f64::from(m1) / f64::from(m2);
    assert!((2.0..4.5).contains(&ratio), "{m1}/{m2}");
    stop(agent);
}

/// With the kernel program on `lo`, the client's arrival rate comes from
/// the kernel (the connection's remote address), and drives the report.
/// Needs root; `cargo xtask test --only ebpf` runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: attaches the kernel program to lo"]
async fn kernel_arrival_rates_drive_the_own_peer_report() {
    let s1 = Reporter::spawn(S1).await;
    let doic = format!("own_capacity = {CAPACITY}\n[doic.peers.\"{CLIENT}\"]\ntrusted = true\n");
    let mut cfg = agent_config(&[(&s1, true)], Some(&doic), 2);
    cfg.ebpf = Some(agent::ebpf::Section {
        interfaces: Some(vec!["lo".into()]),
        ..agent::ebpf::Section::default()
    });
    let agent = start_agent(cfg, 1).await;
    assert!(agent.start_kernel_telemetry(), "program not attached");
    let kernel = agent.kernel().clone();
    let metrics = agent.metrics_addr().unwrap();
    let mut c = connect(agent.local_addrs()[0]).await;
    let cf = client_features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT);
    let mut hbh = 1;
    let offered = 3.0 * f64::from(CAPACITY);
    let (a, got) = paced(
        &mut c,
        &mut hbh,
        offered,
        Duration::from_secs(8),
        Some(&cf),
        |m| !own_reports(m).is_empty(),
    )
    .await;
    assert!(got, "no own peer report after {} requests", a.len());
    let r = own_reports(a.last().unwrap());
    assert_eq!(r[0].maximum_rate, Some(CAPACITY));
    assert_eq!(r[0].source_id.as_deref(), Some(AGENT));
    // The same load on for two control ticks more: a report can come
    // before the kernel has read the new connection twice (a rate needs
    // two readings), and was then made on the agent's own count.
    paced(
        &mut c,
        &mut hbh,
        offered,
        Duration::from_millis(2_500),
        Some(&cf),
        |_| false,
    )
    .await;
    let body = http_get(metrics, "/metrics").await;
    let series = format!("doic_own_peer_load_rps{{peer=\"{CLIENT}\",source=\"kernel\"}}");
    let rate = gauge(&body, &series).unwrap_or_else(|| panic!("no {series}: {body}"));
    assert!(
        rate > offered * 0.5 && rate < offered * 1.5,
        "kernel rate {rate} vs offered {offered}"
    );
    agent.shutdown();
    tokio::task::spawn_blocking(move || agent.join())
        .await
        .unwrap();
    assert!(!kernel.is_attached(), "detached once the agent is done");
}

#[test]
fn a_zero_own_capacity_is_refused_in_one_line() {
    let text = "[node]\norigin_host = \"a.example\"\norigin_realm = \"example\"\n[doic]\nown_capacity = 0\n";
    let e = agent::config::Config::from_str_named(text, std::path::Path::new("a.toml"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "a.toml: doic: doic.own_capacity must be at least 1 (requests per second)"
    );
}

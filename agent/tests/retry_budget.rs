//! The retry budget on real TCP loopback: 3004 retries never amplify an
//! overload (arrivals at the servers stay within the budget's share of
//! what the clients sent), and at light load a 3004 is still retried on
//! the alternate.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::*;
use tools::loadgen::{Pace, Report, ServerBehaviour, Traffic};

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

/// Two servers of 100 requests per second each, offered ten times their
/// capacity (2,000 per second for 2 s, open loop: many requests per write)
/// through an agent with `[retry]` as given. Returns the client's report and
/// the requests the servers received.
async fn ten_times_capacity(retry: &str) -> (Setup, Report, u64) {
    let servers = servers(
        2,
        ServerBehaviour {
            capacity: Some(100),
            ..Default::default()
        },
    )
    .await;
    let mut config = config_for(&servers, "");
    if !retry.is_empty() {
        let text = format!(
            "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\n[retry]\n{retry}\n"
        );
        config.retry = agent::config::Config::from_str_named(&text, "t.toml".as_ref())
            .unwrap()
            .retry;
    }
    let s = start(servers, config).await;
    let mut c = s.client().await;
    let stop = AtomicBool::new(false);
    let r = c
        .run(
            &traffic(),
            Pace::Open(2000),
            Duration::from_secs(2),
            Duration::from_secs(5),
            &stop,
        )
        .await
        .unwrap();
    assert!(r.sent >= 2000, "load ran: {} sent", r.sent);
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    assert_eq!(r.unmatched, 0, "no duplicate answers");
    let codes: u64 = [2001, 3004].iter().filter_map(|c| r.by_code.get(c)).sum();
    assert_eq!(codes, r.sent, "2001 or 3004 only: {:?}", r.by_code);
    assert!(
        r.by_code.get(&3004).copied().unwrap_or(0) > r.sent / 2,
        "the servers were overloaded: {:?}",
        r.by_code
    );
    let arrivals: u64 = s
        .servers
        .iter()
        .map(|v| v.stats.requests.load(Ordering::Relaxed))
        .sum();
    (s, r, arrivals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_servers_receive_no_more_than_the_offered_load_and_a_tenth() {
    let (s, r, arrivals) = ten_times_capacity("").await;
    // Without a budget every 3004 went to the alternate: 1.8x.
    assert!(
        arrivals * 10 <= r.sent * 11,
        "{arrivals} arrivals for {} sent",
        r.sent
    );
    let refused: f64 = ["budget", "overloaded", "no_alternate"]
        .iter()
        .filter_map(|w| {
            metric(
                s.agent(),
                &format!("doic_relay_retries_refused_total{{reason=\"{w}\"}}"),
            )
        })
        .sum();
    assert!(
        refused > 0.0,
        "3004s were forwarded without a retry, counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_overloaded_mark_the_budget_alone_holds_retries_to_its_share() {
    let (s, r, arrivals) = ten_times_capacity("overloaded_seconds = 0").await;
    let retried = metric(s.agent(), "doic_relay_retries_total{reason=\"too_busy\"}").unwrap();
    let refused = metric(
        s.agent(),
        "doic_relay_retries_refused_total{reason=\"budget\"}",
    )
    .unwrap();
    // 10 % of what was sent, or the minimum of 20 per second.
    let bound = r.sent + r.sent / 10 + 40;
    assert!(arrivals <= bound, "{arrivals} arrivals for {} sent", r.sent);
    assert_eq!(arrivals, r.sent + retried as u64, "each retry arrived once");
    assert!(
        retried >= (r.sent / 40) as f64,
        "the budget was used: {retried} retries"
    );
    assert!(refused > 0.0, "and it was spent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_light_load_a_3004_is_retried_on_the_alternate() {
    let s = setup(2).await;
    let mut c = s.client().await;
    s.servers[0].set_behaviour(ServerBehaviour {
        result_code: 3004,
        ..Default::default()
    });
    // One request at a time until server1 got one: its 3004 was retried on
    // server2, which answered 2001.
    let mut sent = 0;
    while s.servers[0].stats.requests.load(Ordering::Relaxed) == 0 {
        assert!(sent < 20, "the router never chose server1");
        c.write_raw(&request(100 + sent, "example.net", &[]))
            .await
            .unwrap();
        assert_eq!(result_code(&answer(&mut c).await), Some(2001));
        sent += 1;
    }
    assert_eq!(
        s.servers[1].stats.requests.load(Ordering::Relaxed),
        u64::from(sent),
        "server2 got its own and the retry"
    );
    assert_eq!(
        metric(s.agent(), "doic_relay_retries_total{reason=\"too_busy\"}"),
        Some(1.0)
    );
}

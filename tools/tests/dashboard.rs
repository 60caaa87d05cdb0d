//! The Grafana dashboard `deploy/grafana/doic-agent.json` against a running
//! agent: every metric name its queries use is a family in the `/metrics` of
//! an agent with `[doic]` on, two workers, an upstream server, traffic
//! relayed over TCP and the kernel program attached where the test may (as
//! root, with the program built), and the labels its panels group by or
//! show are on that family's samples where it has some. A query naming a
//! metric or label the agent does not export would draw an empty panel or a
//! blank legend; this test fails instead.

#[path = "../../agent/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;
use tools::loadgen::ServerBehaviour;

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/grafana/doic-agent.json"
);

/// PromQL functions and aggregation operators the dashboard may call.
const FUNCTIONS: &[&str] = &[
    "sum",
    "avg",
    "max",
    "min",
    "count",
    "topk",
    "rate",
    "irate",
    "increase",
    "label_values",
    "histogram_quantile",
    "clamp_min",
];

/// PromQL keywords that are neither metrics nor functions.
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
];

/// The metric names a PromQL expression selects: identifiers outside
/// label matchers (`{...}`), ranges (`[...]`), strings and Grafana
/// variables, that are not functions, keywords or the labels of a
/// `by (...)` / `without (...)` clause (or the label argument of
/// `label_values`). A function that is not in [`FUNCTIONS`] is an error:
/// a misspelt one would draw nothing as well.
fn metric_names(expr: &str) -> Result<Vec<String>, String> {
    parse(expr).map(|q| q.metrics)
}

/// What one PromQL expression names.
#[derive(Debug, Default)]
struct Query {
    /// The metrics it selects.
    metrics: Vec<String>,
    /// The labels it groups or matches by (`by (...)`, `on (...)`, the label
    /// of `label_values`).
    labels: Vec<String>,
}

/// [`metric_names`] and the labels of the clauses.
fn parse(expr: &str) -> Result<Query, String> {
    let b = expr.as_bytes();
    let mut names = Vec::new();
    let mut labels = Vec::new();
    let mut i = 0;
    // Depth of the parenthesis group holding labels (`by (`), if any.
    let mut labels_at: Option<usize> = None;
    let mut expect_labels = false;
    let mut depth = 0usize;
    let mut label_values_at: Option<usize> = None;
    let close = |b: &[u8], i: usize, open: u8, shut: u8| -> Result<usize, String> {
        let mut d = 0;
        for (k, &c) in b.iter().enumerate().skip(i) {
            if c == open {
                d += 1;
            } else if c == shut {
                d -= 1;
                if d == 0 {
                    return Ok(k + 1);
                }
            }
        }
        Err(format!("unbalanced {} in {expr:?}", open as char))
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'{' => i = close(b, i, b'{', b'}')?,
            b'[' => i = close(b, i, b'[', b']')?,
            b'"' => {
                let end = b[i + 1..]
                    .iter()
                    .position(|&c| c == b'"')
                    .ok_or(format!("unterminated string in {expr:?}"))?;
                i += end + 2;
            }
            b'$' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            b'(' => {
                depth += 1;
                if expect_labels {
                    labels_at = Some(depth);
                    expect_labels = false;
                }
                i += 1;
            }
            b')' => {
                if labels_at == Some(depth) {
                    labels_at = None;
                }
                if label_values_at == Some(depth) {
                    label_values_at = None;
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'0'..=b'9' | b'.' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':')
                {
                    i += 1;
                }
                let word = &expr[start..i];
                let rest = expr[i..].trim_start();
                // `f(...)`, or an aggregation with its clause first: `sum by (l) (...)`.
                let call = rest.starts_with('(')
                    || (FUNCTIONS.contains(&word)
                        && (rest.starts_with("by") || rest.starts_with("without")));
                if labels_at.is_some() {
                    labels.push(word.to_owned());
                    continue;
                }
                if KEYWORDS.contains(&word) {
                    expect_labels = matches!(
                        word,
                        "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                    );
                } else if call {
                    if !FUNCTIONS.contains(&word) {
                        return Err(format!("unknown function {word} in {expr:?}"));
                    }
                    if word == "label_values" {
                        label_values_at = Some(depth + 1);
                    }
                } else if label_values_at == Some(depth) && expr[..start].trim_end().ends_with(',')
                {
                    // label_values(metric, label): the label.
                    labels.push(word.to_owned());
                } else {
                    names.push(word.to_owned());
                }
            }
            _ => i += 1,
        }
    }
    Ok(Query {
        metrics: names,
        labels,
    })
}

/// Every expression of the dashboard, with the labels its legend shows
/// (`{{peer}}`): panel targets (rows' panels too) and query variables.
fn expressions(dashboard: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    fn panels(v: &serde_json::Value, out: &mut Vec<(String, Vec<String>)>) {
        for p in v.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().expect("a target without expr");
                let legend = t["legendFormat"].as_str().unwrap_or_default();
                let shown = legend
                    .split("{{")
                    .skip(1)
                    .filter_map(|r| Some(r.split_once("}}")?.0.trim().to_owned()))
                    .collect();
                out.push((expr.to_owned(), shown));
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if var["type"] == "query" {
            let q = &var["query"];
            let q = q["query"]
                .as_str()
                .or(q.as_str())
                .expect("a query variable");
            out.push((q.to_owned(), Vec::new()));
        }
    }
    out
}

/// Labels Prometheus adds to every series it scrapes.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// The labels a query groups by or shows that none of its metrics' samples
/// in `body` carry, when some of them have samples (a family without samples
/// cannot tell).
fn absent_labels(body: &str, query: &Query, shown: &[String]) -> Vec<String> {
    let samples: Vec<&str> = body
        .lines()
        .filter(|l| {
            query.metrics.iter().any(|m| {
                l.strip_prefix(m.as_str())
                    .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
            })
        })
        .collect();
    if samples.is_empty() {
        return Vec::new();
    }
    query
        .labels
        .iter()
        .chain(shown)
        .filter(|l| !TARGET_LABELS.contains(&l.as_str()))
        .filter(|l| !samples.iter().any(|s| s.contains(&format!("{l}=\""))))
        .cloned()
        .collect()
}

#[test]
fn the_expression_parser_finds_metrics_only() {
    let got = metric_names(
        "sum by (peer, result_code) (rate(doic_a_total{instance=~\"$instance\",x=\"y(z)\"}[$__rate_interval])) / ignoring (peer) doic_b > 0",
    )
    .unwrap();
    assert_eq!(got, ["doic_a_total", "doic_b"]);
    let q =
        parse("sum by (peer, result_code) (rate(doic_a_total[1m])) / ignoring (x) doic_b").unwrap();
    assert_eq!(q.labels, ["peer", "result_code", "x"]);
    let body = "doic_a_total{peer=\"p\",result_code=\"2001\"} 1\ndoic_b 2\n";
    assert_eq!(absent_labels(body, &q, &["y".into()]), ["x", "y"]);
    assert_eq!(
        metric_names("label_values(doic_ebpf_attached, instance)").unwrap(),
        ["doic_ebpf_attached"]
    );
    assert!(metric_names("rat(doic_a_total[5m])").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported_by_a_running_agent() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let exprs = expressions(&dashboard);
    let mut wanted = BTreeSet::new();
    let queries: Vec<(Query, &[String])> = exprs
        .iter()
        .map(|(e, shown)| (parse(e).unwrap(), shown.as_slice()))
        .collect();
    for (q, _) in &queries {
        wanted.extend(q.metrics.iter().cloned());
    }
    // Every section of the dashboard is drawn.
    for family in [
        "doic_peer_requests_received_total",
        "doic_peer_answers_sent_total",
        "doic_ocs_active",
        "doic_requests_treated_total",
        "doic_own_load_rps",
        "doic_own_client_allocated_rps",
        "doic_protect_limit",
        "doic_kernel_requests_total",
    ] {
        assert!(wanted.contains(family), "the dashboard draws {family}");
    }
    assert!(
        exprs
            .iter()
            .any(|(e, _)| e.contains("by (result_code)")
                && e.contains("doic_peer_answers_sent_total")),
        "answers by Result-Code"
    );

    let servers = servers(1, ServerBehaviour::default()).await;
    let config = agent_toml(
        Some(2),
        "",
        &[("server1.example.net", servers[0].addr, None)],
        "[metrics]\nlisten = \"127.0.0.1:0\"\n[doic]\n",
    );
    let agent = start_agent(config, 1).await;
    let attached = agent.start_kernel_telemetry();
    let mut c = connect(agent.local_addrs()[0]).await;
    let answers = exchange(&mut c, 1, 50, 8, Some(&client_features(1))).await;
    assert!(answers.iter().all(|a| code_of(a) == 2001));
    let addr = agent.metrics_addr().unwrap();

    // The per-upstream families appear with the control thread's first
    // look at the server, the kernel counters with its first read of the
    // program's maps (every 100 ms).
    let mut missing = Vec::new();
    let mut body = String::new();
    for _ in 0..100 {
        body = http_get(addr, "/metrics").await;
        let exported: BTreeSet<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
            .collect();
        missing = wanted
            .iter()
            .filter(|m| !exported.contains(m.as_str()))
            .cloned()
            .collect();
        let counted = !attached || body.contains("\ndoic_kernel_requests_total{");
        if missing.is_empty() && counted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the agent does not export: {missing:?}"
    );
    // The labels the panels group by and show are on the samples.
    for ((q, shown), (e, _)) in queries.iter().zip(&exprs) {
        let absent = absent_labels(&body, q, shown);
        assert!(absent.is_empty(), "{e}: no sample carries {absent:?}");
    }
    let answered = gauge(
        &body,
        "doic_peer_answers_sent_total{peer=\"client1.example.org\",result_code=\"2001\"}",
    );
    assert!(answered >= Some(50.0), "{body}");
    if attached {
        assert!(body.contains("\ndoic_kernel_requests_total{"), "{body}");
    } else {
        eprintln!("kernel program not attached (not root, or not built): its families only");
    }
    stop(agent);
}

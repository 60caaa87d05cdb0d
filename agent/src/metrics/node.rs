//! The node's metrics: per-peer requests, answers, failovers, pending and
//! state, the relay's retries, socket calls, connections waiting for CER
//! and the workers' load.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Sources;
use crate::peer::table::{ByCode, PeerStats};

/// A per-peer counter: name, help, where it is.
type Counter = (&'static str, &'static str, fn(&PeerStats) -> &AtomicU64);

/// The per-peer counters: requests (first on the page), then moved and
/// discarded requests and unmatched answers (after the answers).
const PER_PEER: [Counter; 5] = [
    (
        "doic_peer_requests_received_total",
        "Requests received from the peer.",
        |st| &st.requests_in,
    ),
    (
        "doic_peer_requests_sent_total",
        "Requests relayed to the peer (failovers included).",
        |st| &st.requests_out,
    ),
    (
        "doic_peer_failovers_total",
        "Requests moved from the peer to an alternate.",
        |st| &st.failovers,
    ),
    (
        "doic_peer_requests_discarded_total",
        "Requests left unanswered when a connection closed (read after the agent's FIN).",
        |st| &st.requests_discarded,
    ),
    (
        "doic_peer_answers_unmatched_total",
        "Answers from the peer matching no pending request (late after a timeout or failover): dropped.",
        |st| &st.answers_unmatched,
    ),
];

/// The peers', the relay's, the sockets', the admission's and the workers'
/// metrics.
pub(super) fn render(src: &Sources, o: &mut String) {
    let peers = src.table.present();
    per_peer_counters(o, &peers, &PER_PEER[..2]);
    type Pick = fn(&PeerStats) -> &ByCode;
    for (name, help, pick) in [
        (
            "doic_peer_answers_received_total",
            "Answers received from the peer, by Result-Code.",
            (|s| &s.answers_in) as Pick,
        ),
        (
            "doic_peer_answers_sent_total",
            "Answers sent to the peer (the agent's own included), by Result-Code.",
            |s| &s.answers_out,
        ),
        (
            "doic_peer_answers_malformed_total",
            "Malformed answers from the peer, not forwarded (the request answered 3002), by the Result-Code of the defect.",
            |s| &s.answers_malformed,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (_, p) in &peers {
            let map = pick(&p.stats).snapshot();
            for (code, n) in map {
                let _ = writeln!(
                    o,
                    "{name}{{peer=\"{}\",result_code=\"{code}\"}} {n}",
                    p.host
                );
            }
        }
    }
    per_peer_counters(o, &peers, &PER_PEER[2..]);
    let rs = &src.retry.stats;
    let _ = writeln!(
        o,
        "# HELP doic_relay_retries_total Requests sent a second time: after 3004 (too_busy) or with the T flag after a connection loss (failover).\n# TYPE doic_relay_retries_total counter"
    );
    for (reason, v) in [("too_busy", &rs.too_busy), ("failover", &rs.failover)] {
        let _ = writeln!(
            o,
            "doic_relay_retries_total{{reason=\"{reason}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_relay_retries_refused_total 3004 answers forwarded without a retry: the retry budget was spent, every alternate was overloaded, or there was none.\n# TYPE doic_relay_retries_refused_total counter"
    );
    for (reason, v) in [
        ("budget", &rs.refused_budget),
        ("overloaded", &rs.refused_overloaded),
        ("no_alternate", &rs.refused_no_alternate),
    ] {
        let _ = writeln!(
            o,
            "doic_relay_retries_refused_total{{reason=\"{reason}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_peer_pending Requests sent to the peer and not answered yet.\n# TYPE doic_peer_pending gauge"
    );
    for (_, p) in &peers {
        let _ = writeln!(
            o,
            "doic_peer_pending{{peer=\"{}\"}} {}",
            p.host,
            p.outstanding.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_peer_state Peer state: 0 closed, 1 connecting, 2 okay, 3 suspect, 4 closing.\n# TYPE doic_peer_state gauge"
    );
    for (_, p) in &peers {
        let _ = writeln!(o, "doic_peer_state{{peer=\"{}\"}} {}", p.host, p.state());
    }
    let _ = writeln!(
        o,
        "# HELP doic_peer_watchdog_messages_total Base protocol messages: DWR sent, DWA received, DPR sent, DPA received.\n# TYPE doic_peer_watchdog_messages_total counter"
    );
    for (_, p) in &peers {
        let st = &p.stats;
        for (m, v) in [
            ("dwr_sent", &st.dwr_sent),
            ("dwa_received", &st.dwa_received),
            ("dpr_sent", &st.dpr_sent),
            ("dpa_received", &st.dpa_received),
        ] {
            let _ = writeln!(
                o,
                "doic_peer_watchdog_messages_total{{peer=\"{}\",message=\"{m}\"}} {}",
                p.host,
                v.load(Ordering::Relaxed)
            );
        }
    }
    let io = &src.io;
    for (name, help, v) in [
        (
            "doic_io_reads_total",
            "Socket reads that returned data.",
            &io.reads,
        ),
        (
            "doic_io_messages_read_total",
            "Diameter messages completed by those reads.",
            &io.messages_read,
        ),
        (
            "doic_io_writes_total",
            "Socket writes that wrote data.",
            &io.writes,
        ),
        (
            "doic_io_bytes_written_total",
            "Bytes carried by those writes.",
            &io.bytes_written,
        ),
        (
            "doic_worker_handoffs_total",
            "Requests and answers queued from one worker onto a connection on another.",
            &io.handoffs,
        ),
    ] {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_queue_full_total Messages that found a queue between workers full: requests for a peer's connection (queue=\"upstream\", answered 3004 at once) and answers for a connection (queue=\"answers\", sized so that it cannot fill; queued all the same).\n# TYPE doic_queue_full_total counter"
    );
    for (_, p) in &peers {
        let _ = writeln!(
            o,
            "doic_queue_full_total{{queue=\"upstream\",peer=\"{}\"}} {}",
            p.host,
            p.stats.queue_full.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        o,
        "doic_queue_full_total{{queue=\"answers\"}} {}",
        io.answer_queue_full.load(Ordering::Relaxed)
    );
    render_admission(&src.admission, o);
    let _ = writeln!(
        o,
        "# HELP doic_worker_utilisation Busy share of each worker thread over the last second.\n# TYPE doic_worker_utilisation gauge"
    );
    for i in 0..src.workers.count() {
        let _ = writeln!(
            o,
            "doic_worker_utilisation{{worker=\"{i}\"}} {:.3}",
            src.workers.utilisation(i)
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_worker_connections Connections running on each worker: accepted ones (side=\"accepted\") and dial loops of configured peers (side=\"dialed\").\n# TYPE doic_worker_connections gauge"
    );
    for i in 0..src.workers.count() {
        let (accepted, dialed) = src.workers.connections(i);
        let _ = writeln!(
            o,
            "doic_worker_connections{{worker=\"{i}\",side=\"accepted\"}} {accepted}\ndoic_worker_connections{{worker=\"{i}\",side=\"dialed\"}} {dialed}"
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_worker_cpu_seconds_total CPU time used by each worker thread.\n# TYPE doic_worker_cpu_seconds_total counter"
    );
    for i in 0..src.workers.count() {
        if let Some(t) = src.workers.cpu_time(i) {
            let _ = writeln!(
                o,
                "doic_worker_cpu_seconds_total{{worker=\"{i}\"}} {:.6}",
                t.as_secs_f64()
            );
        }
    }
}

/// One counter per peer for each `(name, help, pick)`.
fn per_peer_counters(
    o: &mut String,
    peers: &[(
        crate::routing::PeerId,
        std::sync::Arc<crate::peer::table::PeerSlot>,
    )],
    counters: &[Counter],
) {
    for (name, help, pick) in counters {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (_, p) in peers {
            let n = pick(&p.stats).load(Ordering::Relaxed);
            let _ = writeln!(o, "{name}{{peer=\"{}\"}} {n}", p.host);
        }
    }
}

/// Connections waiting for CER and those closed before it.
fn render_admission<T>(a: &crate::admission::Admission<T>, o: &mut String) {
    let _ = writeln!(
        o,
        "# HELP doic_connections_waiting_cer Inbound connections that have not completed the capabilities exchange.\n# TYPE doic_connections_waiting_cer gauge\ndoic_connections_waiting_cer {}",
        a.waiting()
    );
    let name = "doic_connections_closed_before_cer_total";
    let _ = writeln!(
        o,
        "# HELP {name} Inbound connections closed before the capabilities exchange, by reason.\n# TYPE {name} counter"
    );
    let st = &a.stats;
    for (reason, v) in [
        (
            crate::admission::Refusal::PerSource.label(),
            &st.refused_per_source,
        ),
        (crate::admission::Refusal::Total.label(), &st.refused_total),
        ("evicted", &st.evicted),
        ("cer_timeout", &st.cer_timeouts),
    ] {
        let _ = writeln!(
            o,
            "{name}{{reason=\"{reason}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
}

//! Per-peer kernel counters as the agent sees them: summed over CPUs, named
//! for Prometheus, and turned into arrival rates for the overload logic
//! (RFC 7068 §3.1 asks for the load a node receives to be measured; RFC 8582
//! §5 allocates rates per peer from such measurements). Pure data, no aya.
//!
//! # Metric names
//!
//! [`render_prometheus`] writes, with `peer="address:port"` (IPv6 in
//! brackets) and `direction="in"` (from the peer) or `"out"` (to the peer):
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `doic_ebpf_attached` | gauge | 1 when the program is attached, else 0 |
//! | `doic_kernel_packets_total{peer,direction}` | counter | TCP segments |
//! | `doic_kernel_bytes_total{peer,direction}` | counter | frame bytes (link-layer header included) |
//! | `doic_kernel_requests_total{peer,direction}` | counter | Diameter requests arriving at the agent (every header in the stream; `in` only) |
//! | `doic_kernel_answers_total{peer,direction}` | counter | Diameter answers arriving at the agent (`in` only) |
//! | `doic_kernel_syn_total{peer,direction}` | counter | connection attempts (SYN without ACK) |
//! | `doic_kernel_syn_dropped_total{peer,direction}` | counter | attempts dropped by the SYN guard |
//! | `doic_kernel_unparsed_total` | counter | packets not parsed down to TCP ports |
//! | `doic_kernel_table_full_total` | counter | Diameter packets not counted: peer table full |
//! | `doic_kernel_inexact_segments_total{peer,direction}` | counter | segments whose requests and answers could not be counted exactly |
//! | `doic_kernel_inexact_total{cause}` | counter | the same segments, all peers, by cause |
//!
//! Messages are counted where they arrive at the agent (ingress, to a port
//! it listens on or from a port a peer listens on); what the agent sends it
//! counts itself as it writes, so `direction="out"` has packets and bytes
//! only.
//!
//! A peer whose inexact count grew between two reads has an inexact
//! request rate for that interval ([`PeerRate::exact`] false): the overload
//! logic then uses its own count for that peer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Instant;

use agent_ebpf_common::{INEXACT_CAUSES, INEXACT_NAMES, PeerKey, PeerStats};

use super::config::addr_from_key;

/// Which way the packets went, seen from the host running the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Received from the peer (XDP or TC ingress).
    FromPeer,
    /// Sent to the peer (TC egress).
    ToPeer,
}

impl Direction {
    /// The Prometheus label value: `in` or `out`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Direction::FromPeer => "in",
            Direction::ToPeer => "out",
        }
    }
}

/// One peer's counters in one direction, summed over all CPUs. The values
/// only grow while the program stays loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCounters {
    /// The peer's transport address: the source of received packets, the
    /// destination of sent ones (what `TcpStream::peer_addr` returns).
    pub peer: SocketAddr,
    /// Which way the counted packets went.
    pub direction: Direction,
    /// TCP segments.
    pub packets: u64,
    /// Frame bytes, link-layer header included.
    pub bytes: u64,
    /// Diameter requests: every request header in the segments' payloads.
    pub requests: u64,
    /// Diameter answers.
    pub answers: u64,
    /// Connection attempts (SYN without ACK).
    pub syn: u64,
    /// Connection attempts dropped by the SYN guard.
    pub syn_dropped: u64,
    /// Segments whose requests and answers could not be counted exactly.
    pub inexact: u64,
}

impl PeerCounters {
    /// Sums the per-CPU values of one entry of the map of `direction`. An
    /// IPv4-mapped address is an IPv4 peer (the program stores IPv4 so).
    #[must_use]
    pub fn from_kernel<'a>(
        key: &PeerKey,
        direction: Direction,
        per_cpu: impl IntoIterator<Item = &'a PeerStats>,
    ) -> Self {
        let ip = addr_from_key(key.addr, 4);
        let mut c = PeerCounters {
            peer: SocketAddr::new(ip, key.port),
            direction,
            packets: 0,
            bytes: 0,
            requests: 0,
            answers: 0,
            syn: 0,
            syn_dropped: 0,
            inexact: 0,
        };
        for s in per_cpu {
            c.add_values([
                s.packets,
                s.bytes,
                s.requests,
                s.answers,
                s.syn,
                s.syn_dropped,
                s.inexact,
            ]);
        }
        c
    }

    /// Adds `other`'s counts (another flow of the same peer and direction).
    pub(crate) fn add(&mut self, other: &PeerCounters) {
        self.add_values(other.values());
    }

    /// Adds counts in the order of [`Self::values`].
    fn add_values(&mut self, v: [u64; 7]) {
        let mine = [
            &mut self.packets,
            &mut self.bytes,
            &mut self.requests,
            &mut self.answers,
            &mut self.syn,
            &mut self.syn_dropped,
            &mut self.inexact,
        ];
        for (m, v) in mine.into_iter().zip(v) {
            *m = m.wrapping_add(v);
        }
    }

    fn values(&self) -> [u64; 7] {
        [
            self.packets,
            self.bytes,
            self.requests,
            self.answers,
            self.syn,
            self.syn_dropped,
            self.inexact,
        ]
    }
}

/// Counters not tied to a peer, summed over all CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalCounters {
    /// Packets not parsed down to TCP ports (IPv6 extension headers, IPv4
    /// non-first fragments, truncated headers).
    pub unparsed: u64,
    /// Diameter packets not counted per peer because the peer table was full.
    pub table_full: u64,
    /// Segments whose requests and answers could not be counted exactly, by
    /// cause (index `agent_ebpf_common::INEXACT_*`, names in
    /// `INEXACT_NAMES`).
    pub inexact: [u64; INEXACT_CAUSES as usize],
}

const PEER_METRICS: [(&str, &str); 7] = [
    (
        "doic_kernel_packets_total",
        "TCP segments to or from a Diameter port, per peer",
    ),
    (
        "doic_kernel_bytes_total",
        "Frame bytes (link-layer header included), per peer",
    ),
    (
        "doic_kernel_requests_total",
        "Diameter requests arriving from the peer (every header in the byte stream; 0 for direction out, which the agent counts as it writes), per peer",
    ),
    (
        "doic_kernel_answers_total",
        "Diameter answers arriving from the peer (every header in the byte stream; 0 for direction out, which the agent counts as it writes), per peer",
    ),
    (
        "doic_kernel_syn_total",
        "TCP connection attempts (SYN without ACK), per peer",
    ),
    (
        "doic_kernel_syn_dropped_total",
        "Connection attempts dropped by the SYN guard, per peer",
    ),
    (
        "doic_kernel_inexact_segments_total",
        "Segments whose Diameter requests and answers could not be counted exactly, per peer",
    ),
];

/// Appends the kernel metrics in the Prometheus text exposition format
/// (version 0.0.4) to `out`: the `doic_ebpf_attached` gauge always, the peer
/// counters sorted by peer and direction, and the global counters when given.
pub fn render_prometheus(
    out: &mut String,
    attached: bool,
    peers: &[PeerCounters],
    global: Option<&GlobalCounters>,
) {
    let _ = writeln!(
        out,
        "# HELP doic_ebpf_attached Whether the kernel telemetry program is attached (1) or not (0)"
    );
    let _ = writeln!(out, "# TYPE doic_ebpf_attached gauge");
    let _ = writeln!(out, "doic_ebpf_attached {}", u8::from(attached));
    let mut sorted: Vec<&PeerCounters> = peers.iter().collect();
    sorted.sort_by_key(|c| (c.peer, c.direction));
    for (i, (name, help)) in PEER_METRICS.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for c in &sorted {
            let _ = writeln!(
                out,
                "{name}{{peer=\"{}\",direction=\"{}\"}} {}",
                c.peer,
                c.direction.label(),
                c.values()[i]
            );
        }
    }
    if let Some(g) = global {
        for (name, help, v) in [
            (
                "doic_kernel_unparsed_total",
                "Packets not parsed down to TCP ports",
                g.unparsed,
            ),
            (
                "doic_kernel_table_full_total",
                "Diameter packets not counted because the peer table was full",
                g.table_full,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {v}");
        }
        let name = "doic_kernel_inexact_total";
        let _ = writeln!(
            out,
            "# HELP {name} Segments whose Diameter requests and answers could not be counted exactly, by cause"
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for (cause, v) in INEXACT_NAMES.iter().zip(g.inexact) {
            let _ = writeln!(out, "{name}{{cause=\"{cause}\"}} {v}");
        }
    }
}

/// Per-second rates of one peer and direction between two reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerRate {
    /// The peer's transport address.
    pub peer: SocketAddr,
    /// Which way the packets went.
    pub direction: Direction,
    /// Segments per second.
    pub packets: f64,
    /// Bytes per second.
    pub bytes: f64,
    /// Diameter requests per second (arrival rate when `direction` is
    /// [`Direction::FromPeer`]).
    pub requests: f64,
    /// Diameter answers per second.
    pub answers: f64,
    /// Connection attempts per second.
    pub syn: f64,
    /// False when some segment of the interval could not be counted exactly
    /// (the peer's inexact count grew): `requests` and `answers` are then
    /// not to be trusted for it.
    pub exact: bool,
}

/// Turns successive reads of the counters into per-peer rates. Sans-io: the
/// caller reads the counters and the clock.
///
/// Call [`RateMeter::handle_read`] with each read; it returns the rates since
/// the previous read (none on the first). A counter that went down (program
/// reloaded, entry removed) counts from zero.
#[derive(Debug, Default)]
pub struct RateMeter {
    last: Option<(Instant, Snapshot)>,
}

type Snapshot = HashMap<(SocketAddr, Direction), PeerCounters>;

impl RateMeter {
    /// A meter without a previous read.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a read taken at `now` and returns the rates since the previous
    /// read. Returns nothing on the first read or when `now` is not after the
    /// previous read. Peers new since the previous read count from zero.
    pub fn handle_read(&mut self, now: Instant, counters: &[PeerCounters]) -> Vec<PeerRate> {
        let current: Snapshot = counters
            .iter()
            .map(|c| ((c.peer, c.direction), *c))
            .collect();
        let mut rates = Vec::new();
        if let Some((then, prev)) = &self.last {
            let dt = now.saturating_duration_since(*then).as_secs_f64();
            if dt > 0.0 {
                for (k, c) in &current {
                    let before = prev.get(k).map(PeerCounters::values).unwrap_or_default();
                    let now = c.values();
                    let d = |i: usize| {
                        let delta = if now[i] >= before[i] {
                            now[i] - before[i]
                        } else {
                            now[i]
                        };
                        delta as f64 / dt
                    };
                    rates.push(PeerRate {
                        peer: c.peer,
                        direction: c.direction,
                        packets: d(0),
                        bytes: d(1),
                        requests: d(2),
                        answers: d(3),
                        syn: d(4),
                        exact: now[6] == before[6],
                    });
                }
                rates.sort_by_key(|r| (r.peer, r.direction));
            }
        }
        self.last = Some((now, current));
        rates
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A key of the map of `direction`, and that direction.
    fn key(addr: [u8; 16], port: u16, direction: Direction) -> (PeerKey, Direction) {
        (
            PeerKey {
                addr,
                port,
                ..PeerKey::default()
            },
            direction,
        )
    }

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a);
        m
    }

    fn stats(n: u64) -> PeerStats {
        PeerStats {
            packets: n,
            bytes: 100 * n,
            requests: n / 2,
            answers: n / 3,
            syn: 1,
            syn_dropped: 0,
            inexact: 0,
        }
    }

    #[test]
    fn sums_per_cpu_values_and_decodes_the_key() {
        let k = key(v4([10, 0, 0, 1]), 3868, Direction::FromPeer);
        let c = PeerCounters::from_kernel(&k.0, k.1, &[stats(4), stats(6)]);
        assert_eq!(c.peer, "10.0.0.1:3868".parse().unwrap());
        assert_eq!(c.direction, Direction::FromPeer);
        assert_eq!(
            (c.packets, c.bytes, c.requests, c.answers, c.syn),
            (10, 1000, 5, 3, 2)
        );
        let k6 = key(
            std::net::Ipv6Addr::LOCALHOST.octets(),
            40000,
            Direction::ToPeer,
        );
        let c6 = PeerCounters::from_kernel(&k6.0, k6.1, &[stats(1)]);
        assert_eq!(c6.peer, "[::1]:40000".parse().unwrap());
        assert_eq!(c6.direction, Direction::ToPeer);
    }

    #[test]
    fn renders_prometheus_text() {
        let a = PeerCounters::from_kernel(
            &key(v4([10, 0, 0, 2]), 3868, Direction::ToPeer).0,
            Direction::ToPeer,
            &[stats(2)],
        );
        let b = PeerCounters::from_kernel(
            &key(v4([10, 0, 0, 1]), 51000, Direction::FromPeer).0,
            Direction::FromPeer,
            &[stats(8)],
        );
        let mut out = String::new();
        render_prometheus(
            &mut out,
            true,
            &[a, b],
            Some(&GlobalCounters {
                unparsed: 3,
                table_full: 0,
                inexact: [0, 2, 0, 0, 0, 0],
            }),
        );
        assert!(out.contains("doic_ebpf_attached 1\n"));
        assert!(out.contains("# TYPE doic_kernel_packets_total counter\n"));
        assert!(
            out.contains("doic_kernel_packets_total{peer=\"10.0.0.1:51000\",direction=\"in\"} 8\n")
        );
        assert!(
            out.contains("doic_kernel_bytes_total{peer=\"10.0.0.2:3868\",direction=\"out\"} 200\n")
        );
        assert!(
            out.contains(
                "doic_kernel_requests_total{peer=\"10.0.0.1:51000\",direction=\"in\"} 4\n"
            )
        );
        assert!(
            out.contains("doic_kernel_answers_total{peer=\"10.0.0.1:51000\",direction=\"in\"} 2\n")
        );
        assert!(out.contains(
            "doic_kernel_syn_dropped_total{peer=\"10.0.0.2:3868\",direction=\"out\"} 0\n"
        ));
        assert!(out.contains("doic_kernel_unparsed_total 3\n"));
        assert!(out.contains("doic_kernel_inexact_total{cause=\"gap\"} 2\n"));
        assert!(out.contains("doic_kernel_inexact_total{cause=\"no_flow\"} 0\n"));
        assert!(out.contains(
            "doic_kernel_inexact_segments_total{peer=\"10.0.0.1:51000\",direction=\"in\"} 0\n"
        ));
        // Sorted by peer: 10.0.0.1 before 10.0.0.2 within each metric.
        let first = out.find("10.0.0.1:51000").unwrap();
        let second = out.find("10.0.0.2:3868").unwrap();
        assert!(first < second);
        // Every sample line is `name{labels} value` or `name value`.
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            value.parse::<u64>().unwrap();
        }
        let mut off = String::new();
        render_prometheus(&mut off, false, &[], None);
        assert!(off.contains("doic_ebpf_attached 0\n"));
        assert!(!off.contains("unparsed"));
    }

    #[test]
    fn rates_are_deltas_over_elapsed_time() {
        let k = key(v4([10, 0, 0, 1]), 3868, Direction::FromPeer);
        let t0 = Instant::now();
        let mut m = RateMeter::new();
        assert!(
            m.handle_read(t0, &[PeerCounters::from_kernel(&k.0, k.1, &[stats(10)])])
                .is_empty()
        );
        let r = m.handle_read(
            t0 + Duration::from_secs(2),
            &[PeerCounters::from_kernel(&k.0, k.1, &[stats(50)])],
        );
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].packets, 20.0);
        assert_eq!(r[0].bytes, 2000.0);
        assert_eq!(r[0].requests, 10.0); // (25 - 5) / 2
        assert_eq!(r[0].syn, 0.0);
        assert!(r[0].exact);
        // A reset (reload) counts from zero rather than going negative.
        let r = m.handle_read(
            t0 + Duration::from_secs(3),
            &[PeerCounters::from_kernel(&k.0, k.1, &[stats(4)])],
        );
        assert_eq!(r[0].packets, 4.0);
        // A new peer counts from zero; a read at the same instant gives nothing.
        let k2 = key(v4([10, 0, 0, 9]), 3868, Direction::FromPeer);
        let both = [
            PeerCounters::from_kernel(&k.0, k.1, &[stats(4)]),
            PeerCounters::from_kernel(&k2.0, k2.1, &[stats(6)]),
        ];
        let r = m.handle_read(t0 + Duration::from_secs(5), &both);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].packets, 0.0);
        assert_eq!(r[1].packets, 3.0);
        assert!(m.handle_read(t0 + Duration::from_secs(5), &both).is_empty());
        // An interval in which the inexact count grew is not exact; the next
        // one, in which it did not, is again.
        let mut worse = stats(4);
        worse.inexact = 1;
        let r = m.handle_read(
            t0 + Duration::from_secs(6),
            &[PeerCounters::from_kernel(&k.0, k.1, &[worse])],
        );
        assert!(!r[0].exact);
        let r = m.handle_read(
            t0 + Duration::from_secs(7),
            &[PeerCounters::from_kernel(&k.0, k.1, &[worse])],
        );
        assert!(r[0].exact, "exact again once it stops growing");
    }
}

//! The kernel program's parse path, frame by frame, through the kernel's test
//! run (`BPF_PROG_TEST_RUN`): what is counted and for whom, every Diameter
//! request and answer of a byte stream (RFC 6733 §3 headers, followed
//! through their lengths across segments), what the program cannot count
//! exactly and why, what is counted as unparsed, what the SYN guard drops,
//! and that no frame, however malformed or truncated, is ever dropped
//! otherwise.
//!
//! Needs root (CAP_BPF), so every test is ignored by plain `cargo test`;
//! `cargo xtask test --only ebpf` runs them.

#[path = "support/handmade.rs"]
#[expect(
    dead_code,
    reason = "shared with ebpf_netns; the socket helpers are unused here"
)]
mod handmade;
#[path = "support/packets.rs"]
mod packets;

use std::net::SocketAddr;

use agent::ebpf::{Config, Direction, GlobalCounters, PeerCounters, Probe, ProbeHook, Sides};
use agent_ebpf_common::{
    INEXACT_BAD_HEADER, INEXACT_CAUSES, INEXACT_GAP, INEXACT_NO_FLOW, INEXACT_UNREADABLE,
    INEXACT_UNSYNCED,
};
use packets::{ACK, Frame, PSH_ACK, SYN, SYN_ACK, Stream};

const XDP_DROP: i32 = 1;
const XDP_PASS: i32 = 2;
const TC_ACT_UNSPEC: i32 = -1;
const TC_ACT_SHOT: i32 = 2;

fn probe(cfg: &Config) -> Probe {
    Probe::load(cfg)
        .unwrap_or_else(|e| panic!("Probe::load: {e} ({:?})", std::error::Error::source(&e)))
}

fn run(p: &Probe, hook: ProbeHook, frame: &[u8]) -> i32 {
    p.run(hook, frame).expect("test run")
}

fn peer(p: &Probe, addr: &str, direction: Direction) -> Option<PeerCounters> {
    let addr: SocketAddr = addr.parse().unwrap();
    p.read()
        .unwrap()
        .into_iter()
        .find(|c| c.peer == addr && c.direction == direction)
}

fn request() -> Vec<u8> {
    handmade::request(1, "client.example.net", 24)
}

fn answer() -> Vec<u8> {
    handmade::answer(&request(), "server.example.net")
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn counts_segments_bytes_requests_and_answers_per_source() {
    for (client, server) in [
        ("10.0.0.1:40000", "10.0.0.2:3868"),
        ("[fd00::1]:40000", "[fd00::2]:3868"),
    ] {
        let p = probe(&Config::default());
        let mut s = Stream::new(client, server, 999);
        let frames = [
            s.syn(SYN),
            Frame::new(client, server, ACK, &[]).build(),
            s.data(&request()[..20]),
            // The rest of the message: starts with AVP bytes, not a header.
            s.data(&request()[20..]),
            s.data(&answer()),
        ];
        for f in &frames {
            assert_eq!(run(&p, ProbeHook::Xdp, f), XDP_PASS);
        }
        let c = peer(&p, client, Direction::FromPeer).expect("client counted");
        let bytes: usize = frames.iter().map(Vec::len).sum();
        assert_eq!(
            (
                c.packets,
                c.bytes,
                c.requests,
                c.answers,
                c.syn,
                c.syn_dropped
            ),
            (5, bytes as u64, 1, 1, 1, 0),
            "{client}"
        );
        assert_eq!(c.inexact, 0, "{client}");
        assert_eq!(p.read().unwrap().len(), 1, "only the source is a peer");
        let mut p = p;
        assert_eq!(p.forget(client.parse().unwrap()).unwrap(), 1);
        assert!(p.read().unwrap().is_empty(), "forgotten");
        assert_eq!(p.forget(client.parse().unwrap()).unwrap(), 0);
    }
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn tc_keys_ingress_by_source_and_egress_by_destination() {
    let p = probe(&Config::default());
    let to_client = Frame::new("10.0.0.2:3868", "10.0.0.1:40000", PSH_ACK, &answer()).build();
    assert_eq!(run(&p, ProbeHook::TcEgress, &to_client), TC_ACT_UNSPEC);
    let from_server = Frame::new("10.0.0.3:3868", "10.0.0.2:50000", PSH_ACK, &answer()).build();
    assert_eq!(run(&p, ProbeHook::TcIngress, &from_server), TC_ACT_UNSPEC);
    let out = peer(&p, "10.0.0.1:40000", Direction::ToPeer).expect("egress keyed by destination");
    // What the host sends: packets and bytes; its messages the agent counts
    // as it writes them.
    assert_eq!(
        (out.packets, out.bytes, out.requests, out.answers),
        (1, to_client.len() as u64, 0, 0)
    );
    let inn = peer(&p, "10.0.0.3:3868", Direction::FromPeer).expect("ingress keyed by source");
    assert_eq!((inn.packets, inn.answers), (1, 1));
    assert_eq!(p.read().unwrap().len(), 2);
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn recognises_only_sane_headers_at_segment_start() {
    let p = probe(&Config::default());
    let src = "10.0.0.1:40000";
    let dst = "10.0.0.2:3868";
    // No SYN: each segment is taken where it starts (a hole before each),
    // so each is checked as the first of a stream.
    let mut sent = 0;
    let mut send = |payload: &[u8]| {
        sent += 1;
        let mut f = Frame::new(src, dst, PSH_ACK, payload);
        f.seq = sent * 100_000;
        run(&p, ProbeHook::Xdp, &f.build())
    };
    let good = request();
    // RFC 6733 §3: version 1 only.
    let mut v2 = good.clone();
    v2[0] = 2;
    send(&v2);
    // Message length below the 20-byte header, or not a multiple of 4.
    let mut short = good.clone();
    short[1..4].copy_from_slice(&[0, 0, 16]);
    send(&short);
    let mut odd = good.clone();
    odd[3] = odd[3].wrapping_add(1);
    send(&odd);
    // Reserved flag bits set.
    let mut reserved = good.clone();
    reserved[4] |= 0x01;
    send(&reserved);
    // Fewer than 20 payload bytes, even if they start like a header.
    send(&good[..19]);
    let c = peer(&p, src, Direction::FromPeer).unwrap();
    assert_eq!((c.packets, c.requests, c.answers), (5, 0, 0));
    // Exactly a header (a message split right after it) is a request.
    send(&good[..20]);
    // An answer: R clear; with the P and T flags set it is still an answer.
    let mut ans = answer();
    ans[4] |= 0x50;
    send(&ans);
    let c = peer(&p, src, Direction::FromPeer).unwrap();
    assert_eq!((c.packets, c.requests, c.answers), (7, 1, 1));
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn ethernet_padding_is_not_payload() {
    let p = probe(&Config::default());
    // A pure ACK whose frame is followed by bytes that look like a header:
    // the IPv4 total length says there is no payload.
    let mut f = Frame::new("10.0.0.1:40000", "10.0.0.2:3868", ACK, &[]);
    f.trailer = request()[..24].to_vec();
    let frame = f.build();
    assert_eq!(run(&p, ProbeHook::Xdp, &frame), XDP_PASS);
    let c = peer(&p, "10.0.0.1:40000", Direction::FromPeer).unwrap();
    assert_eq!((c.packets, c.bytes, c.requests), (1, frame.len() as u64, 0));
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn vlan_tags_and_ipv4_options_are_parsed() {
    let p = probe(&Config::default());
    let mut vlan = Frame::new("10.0.0.1:40000", "10.0.0.2:3868", PSH_ACK, &request());
    vlan.vlan = true;
    let mut options = Frame::new("10.0.0.5:40001", "10.0.0.2:3868", PSH_ACK, &request());
    options.ipv4_options = true;
    let mut vlan6 = Frame::new("[fd00::1]:40000", "[fd00::2]:3868", PSH_ACK, &answer());
    vlan6.vlan = true;
    for f in [&vlan, &options, &vlan6] {
        assert_eq!(run(&p, ProbeHook::Xdp, &f.build()), XDP_PASS);
    }
    assert_eq!(
        peer(&p, "10.0.0.1:40000", Direction::FromPeer)
            .unwrap()
            .requests,
        1
    );
    assert_eq!(
        peer(&p, "10.0.0.5:40001", Direction::FromPeer)
            .unwrap()
            .requests,
        1
    );
    assert_eq!(
        peer(&p, "[fd00::1]:40000", Direction::FromPeer)
            .unwrap()
            .answers,
        1
    );
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn unparsable_packets_are_counted_apart_and_passed() {
    let p = probe(&Config::default());
    let mut hbh = Frame::new("[fd00::1]:40000", "[fd00::2]:3868", PSH_ACK, &request());
    hbh.ipv6_hop_by_hop = true;
    let mut fragment = Frame::new("10.0.0.1:40000", "10.0.0.2:3868", PSH_ACK, &request());
    fragment.fragment_offset = 185;
    let truncated = {
        let mut f = Frame::new("10.0.0.1:40000", "10.0.0.2:3868", PSH_ACK, &[]).build();
        f.truncate(14 + 20 + 10);
        f
    };
    for f in [hbh.build(), fragment.build(), truncated] {
        assert_eq!(run(&p, ProbeHook::Xdp, &f), XDP_PASS);
    }
    assert_eq!(p.global().unwrap().unparsed, 3);
    assert!(p.read().unwrap().is_empty(), "nothing counted per peer");
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn only_configured_ports_are_counted() {
    let cfg = Config {
        ports: vec![3868, 5868],
        ..Config::default()
    };
    let p = probe(&cfg);
    for (src, dst) in [
        ("10.0.0.1:40000", "10.0.0.2:3868"),
        ("10.0.0.1:40001", "10.0.0.2:5868"),
        ("10.0.0.1:40002", "10.0.0.2:3869"),
        ("10.0.0.1:40003", "10.0.0.2:80"),
        ("10.0.0.1:3868", "10.0.0.2:40004"),
    ] {
        assert_eq!(
            run(
                &p,
                ProbeHook::Xdp,
                &Frame::new(src, dst, PSH_ACK, &request()).build()
            ),
            XDP_PASS
        );
    }
    let mut peers: Vec<String> = p
        .read()
        .unwrap()
        .iter()
        .map(|c| c.peer.to_string())
        .collect();
    peers.sort();
    assert_eq!(peers, ["10.0.0.1:3868", "10.0.0.1:40000", "10.0.0.1:40001"]);
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn syn_guard_drops_only_unlisted_connection_attempts() {
    let cfg = Config {
        syn_guard: true,
        syn_allow: vec!["10.0.0.0/24".parse().unwrap(), "fd00::1".parse().unwrap()],
        ..Config::default()
    };
    let p = probe(&cfg);
    let listed = Frame::new("10.0.0.7:40000", "10.0.0.2:3868", SYN, &[]).build();
    let listed6 = Frame::new("[fd00::1]:40000", "[fd00::2]:3868", SYN, &[]).build();
    let unlisted = Frame::new("10.0.1.7:40000", "10.0.0.2:3868", SYN, &[]).build();
    let unlisted6 = Frame::new("[fd00::3]:40000", "[fd00::2]:3868", SYN, &[]).build();
    assert_eq!(run(&p, ProbeHook::Xdp, &listed), XDP_PASS);
    assert_eq!(run(&p, ProbeHook::Xdp, &listed6), XDP_PASS);
    assert_eq!(run(&p, ProbeHook::Xdp, &unlisted), XDP_DROP);
    assert_eq!(run(&p, ProbeHook::Xdp, &unlisted6), XDP_DROP);
    assert_eq!(run(&p, ProbeHook::TcIngress, &unlisted), TC_ACT_SHOT);
    // Not connection attempts to a Diameter port: passed.
    let syn_ack = Frame::new("10.0.1.7:3868", "10.0.0.2:40000", SYN_ACK, &[]).build();
    let other_port = Frame::new("10.0.1.8:40000", "10.0.0.2:22", SYN, &[]).build();
    let data = Frame::new("10.0.1.7:40000", "10.0.0.2:3868", PSH_ACK, &request()).build();
    assert_eq!(run(&p, ProbeHook::Xdp, &syn_ack), XDP_PASS);
    assert_eq!(run(&p, ProbeHook::Xdp, &other_port), XDP_PASS);
    assert_eq!(run(&p, ProbeHook::Xdp, &data), XDP_PASS);
    // The agent's own outgoing attempt, seen on egress: passed.
    let outgoing = Frame::new("10.0.0.2:40000", "10.0.1.7:3868", SYN, &[]).build();
    assert_eq!(run(&p, ProbeHook::TcEgress, &outgoing), TC_ACT_UNSPEC);

    let c = peer(&p, "10.0.1.7:40000", Direction::FromPeer).unwrap();
    assert_eq!((c.syn, c.syn_dropped, c.packets, c.requests), (2, 2, 3, 1));
    let c6 = peer(&p, "[fd00::3]:40000", Direction::FromPeer).unwrap();
    assert_eq!((c6.syn, c6.syn_dropped), (1, 1));
    let ok = peer(&p, "10.0.0.7:40000", Direction::FromPeer).unwrap();
    assert_eq!((ok.syn, ok.syn_dropped), (1, 0));
    let out = peer(&p, "10.0.1.7:3868", Direction::ToPeer).unwrap();
    assert_eq!((out.syn, out.syn_dropped), (1, 0));
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn malformed_and_truncated_frames_always_pass() {
    let p = probe(&Config::default());
    let mut frames = Vec::new();
    for f in [
        Frame::new("10.0.0.1:40000", "10.0.0.2:3868", PSH_ACK, &request()),
        Frame::new("[fd00::1]:40000", "[fd00::2]:3868", PSH_ACK, &request()),
    ] {
        let full = f.build();
        for len in 14..=full.len() {
            frames.push(full[..len].to_vec());
        }
    }
    // Deterministic pseudo-random frames, some with an IPv4 or IPv6 type.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..2000 {
        let len = 14 + (i * 7) % 200;
        let mut f: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        match i % 3 {
            0 => f[12..14].copy_from_slice(&[0x08, 0x00]),
            1 => f[12..14].copy_from_slice(&[0x86, 0xdd]),
            _ => {}
        }
        frames.push(f);
    }
    for f in &frames {
        assert_eq!(run(&p, ProbeHook::Xdp, f), XDP_PASS, "XDP dropped {f:02x?}");
        match p.run(ProbeHook::TcIngress, f) {
            Ok(tc) => assert_eq!(tc, TC_ACT_UNSPEC, "TC returned {tc} for {f:02x?}"),
            // The kernel builds no skb from a frame too short for its IP
            // header, so no TC hook can see one.
            Err(e) => assert!(f.len() < 14 + 40, "{e:?} for {f:02x?}"),
        }
    }
}

/// A small request (60 bytes and up, by `pad`) with hop-by-hop id `i`.
fn small_request(i: u32, pad: usize) -> Vec<u8> {
    handmade::request(i, "c", pad)
}

/// `n` requests and answers of assorted lengths, mixed, in one byte string,
/// and how many of each.
fn batch(n: u32, seed: u32) -> (Vec<u8>, u64, u64) {
    let mut bytes = Vec::new();
    let (mut requests, mut answers) = (0, 0);
    for i in 0..n {
        let req = small_request(seed + i, ((seed + i) as usize * 4) % 12);
        if (seed + i) % 5 == 4 {
            bytes.extend_from_slice(&handmade::answer(&req, "s"));
            answers += 1;
        } else {
            bytes.extend_from_slice(&req);
            requests += 1;
        }
    }
    (bytes, requests, answers)
}

fn counters(p: &Probe, addr: &str, direction: Direction) -> PeerCounters {
    peer(p, addr, direction).unwrap_or_else(|| panic!("{addr} {direction:?} not counted"))
}

fn inexact_causes(g: &GlobalCounters) -> [u64; INEXACT_CAUSES as usize] {
    g.inexact
}

const FLOWS: [(&str, &str); 2] = [
    ("10.0.0.1:40000", "10.0.0.2:3868"),
    ("[fd00::1]:40000", "[fd00::2]:3868"),
];

/// The hooks that count the messages arriving at the agent.
const HOOKS: [ProbeHook; 2] = [ProbeHook::Xdp, ProbeHook::TcIngress];

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn counts_every_message_of_a_segment() {
    for hook in HOOKS {
        for (src, dst) in FLOWS {
            let p = probe(&Config::default());
            let mut s = Stream::new(src, dst, 0xffff_ff00);
            run(&p, hook, &s.syn(SYN));
            let (mut requests, mut answers) = (0, 0);
            // 10 to 50 messages per segment; the sequence numbers wrap.
            for (k, n) in [10, 23, 50, 37, 1, 44].into_iter().enumerate() {
                let (bytes, r, a) = batch(n, 100 * k as u32);
                requests += r;
                answers += a;
                run(&p, hook, &s.data(&bytes));
            }
            let c = counters(&p, src, Direction::FromPeer);
            assert_eq!(
                (c.requests, c.answers, c.inexact, c.packets),
                (requests, answers, 0, 7),
                "{hook:?} {src}"
            );
            assert_eq!(
                inexact_causes(&p.global().unwrap()),
                [0; INEXACT_CAUSES as usize],
                "{hook:?}"
            );
        }
    }
}

/// The agent listens on 3868 and connects to a peer listening on 3869.
fn agent_and_peer_ports() -> Config {
    Config {
        ports: vec![3868, 3869],
        sides: Some(Sides {
            agent: vec![3868],
            peers: vec![3869],
        }),
        ..Config::default()
    }
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn only_segments_arriving_at_the_agent_have_their_messages_counted() {
    let p = probe(&agent_and_peer_ports());
    let (bytes, requests, answers) = batch(12, 3);
    // Arriving: a client's requests to the listen port, a peer's answers
    // from its port; both walked, from the SYN (or SYN-ACK) on.
    let client = "10.0.0.1:40000";
    let mut s = Stream::new(client, "10.0.0.2:3868", 7);
    run(&p, ProbeHook::TcIngress, &s.syn(SYN));
    run(&p, ProbeHook::TcIngress, &s.data(&bytes));
    let server = "10.0.0.3:3869";
    let mut s = Stream::new(server, "10.0.0.2:50000", 9);
    run(&p, ProbeHook::TcIngress, &s.syn(SYN_ACK));
    run(&p, ProbeHook::TcIngress, &s.data(&bytes));
    for peer_addr in [client, server] {
        let c = counters(&p, peer_addr, Direction::FromPeer);
        assert_eq!(
            (c.requests, c.answers, c.inexact, c.packets),
            (requests, answers, 0, 2),
            "{peer_addr}"
        );
    }
    // Sent by the agent and looped back (on `lo` ingress sees them too):
    // from its listen port, to its peer's port. Packets and bytes only.
    let mut s = Stream::new("10.0.0.2:3868", "10.0.0.9:40001", 11);
    let from_listener = s.data(&bytes);
    run(&p, ProbeHook::TcIngress, &from_listener);
    let mut s = Stream::new("10.0.0.2:50001", "10.0.0.3:3869", 13);
    run(&p, ProbeHook::TcIngress, &s.syn(SYN));
    run(&p, ProbeHook::TcIngress, &s.data(&bytes));
    for (peer_addr, packets) in [("10.0.0.2:3868", 1), ("10.0.0.2:50001", 2)] {
        let c = counters(&p, peer_addr, Direction::FromPeer);
        assert_eq!(
            (c.packets, c.requests, c.answers, c.inexact),
            (packets, 0, 0, 0),
            "{peer_addr}"
        );
    }
    assert_eq!(
        peer(&p, "10.0.0.2:3868", Direction::FromPeer)
            .unwrap()
            .bytes,
        from_listener.len() as u64
    );
    assert_eq!(
        inexact_causes(&p.global().unwrap()),
        [0; INEXACT_CAUSES as usize]
    );
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn a_message_split_over_segments_counts_once() {
    let (whole, requests, answers) = batch(12, 7);
    let len = whole.len();
    // Cuts within the second header (after 0 to 23 bytes of it), inside a
    // body, three-way splits, and pieces of 1 to 7 bytes, with or without
    // the start or the rest of a header.
    let first = small_request(7, (7 * 4) % 12).len();
    let mut cuts: Vec<Vec<usize>> = (0..24).map(|k| vec![first + k]).collect();
    cuts.push(vec![first - 1, first + 9]);
    cuts.push(vec![first + 3, first + 11]);
    cuts.push(vec![first + 4, first + 12, first + 30]);
    cuts.push(vec![9, first + 8, len - 3]);
    cuts.push(vec![len / 3, 2 * len / 3]);
    cuts.push(vec![first - 1, first + 2]);
    cuts.push(vec![first + 1, first + 2, first + 3, first + 40]);
    cuts.push(vec![first + 2, first + 4, first + 11]);
    cuts.push(vec![first, first + 7, first + 14]);
    for hook in HOOKS {
        for (src, dst) in FLOWS {
            // One program, one connection (client port) per cut.
            let p = probe(&Config::default());
            for (j, cut) in cuts.iter().enumerate() {
                let (ip, port) = src.rsplit_once(':').unwrap();
                let port: u16 = port.parse().unwrap();
                let client = format!("{ip}:{}", port + j as u16);
                let mut s = Stream::new(&client, dst, 5000 + 977 * j as u32);
                run(&p, hook, &s.syn(SYN));
                let mut at = 0;
                for &c in cut.iter().chain([len].iter()) {
                    run(&p, hook, &s.data(&whole[at..c]));
                    at = c;
                }
                let c = counters(&p, &client, Direction::FromPeer);
                assert_eq!(
                    (c.requests, c.answers, c.inexact),
                    (requests, answers, 0),
                    "{hook:?} {client} cut at {cut:?}"
                );
            }
            assert_eq!(
                inexact_causes(&p.global().unwrap()),
                [0; INEXACT_CAUSES as usize],
                "{hook:?}"
            );
        }
    }
}

/// Runs `f` on CPU `cpu` (the test run runs the program on the calling
/// thread's CPU).
fn on_cpu<T>(cpu: usize, f: impl FnOnce() -> T) -> T {
    assert!(
        core_affinity::set_for_current(core_affinity::CoreId { id: cpu }),
        "cannot move to CPU {cpu}"
    );
    f()
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn a_flow_that_moves_between_cpus_stays_exact() {
    let cpus = core_affinity::get_core_ids().expect("CPUs").len();
    assert!(cpus >= 2, "needs two CPUs, has {cpus}");
    for hook in HOOKS {
        for (src, dst) in FLOWS {
            let p = probe(&Config::default());
            let mut s = Stream::new(src, dst, 77);
            let (mut requests, mut answers) = (0, 0);
            on_cpu(0, || run(&p, hook, &s.syn(SYN)));
            // Whole batches and a header split across the move, on CPU 0,
            // 1, 0, 1: each CPU takes the position over from the other.
            let (whole, r, a) = batch(20, 5);
            requests += 4 * r;
            answers += 4 * a;
            let cut = 7 + whole.len() / 2;
            for (k, cpu) in [0, 1, 0, 1].into_iter().enumerate() {
                if k % 2 == 0 {
                    on_cpu(cpu, || run(&p, hook, &s.data(&whole)));
                } else {
                    on_cpu(cpu, || run(&p, hook, &s.data(&whole[..cut])));
                    on_cpu(1 - cpu, || run(&p, hook, &s.data(&whole[cut..])));
                }
            }
            // A retransmission of the last bytes on the CPU that gave the
            // position up: not counted again.
            let mut again = Frame::new(src, dst, PSH_ACK, &whole[cut..]);
            again.seq = s.seq - (whole.len() - cut) as u32;
            on_cpu(1, || run(&p, hook, &again.build()));
            let c = counters(&p, src, Direction::FromPeer);
            assert_eq!(
                (c.requests, c.answers, c.inexact),
                (requests, answers, 0),
                "{hook:?} {src}"
            );
            assert_eq!(
                inexact_causes(&p.global().unwrap()),
                [0; INEXACT_CAUSES as usize],
                "{hook:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn retransmissions_are_not_counted_again() {
    for (src, dst) in FLOWS {
        let p = probe(&Config::default());
        let mut s = Stream::new(src, dst, 1);
        run(&p, ProbeHook::Xdp, &s.syn(SYN));
        let (a, ra, _) = batch(10, 0);
        let (b, rb, _) = batch(10, 50);
        let first = s.data(&a);
        run(&p, ProbeHook::Xdp, &first);
        run(&p, ProbeHook::Xdp, &first);
        // A retransmission that also carries new bytes: only those count.
        let start = s.seq - a.len() as u32;
        let mut both = a.clone();
        both.extend_from_slice(&b);
        let mut f = Frame::new(src, dst, PSH_ACK, &both);
        f.seq = start;
        run(&p, ProbeHook::Xdp, &f.build());
        s.seq += b.len() as u32;
        let (c3, r3, _) = batch(10, 90);
        run(&p, ProbeHook::Xdp, &s.data(&c3));
        let c = counters(&p, src, Direction::FromPeer);
        assert_eq!((c.requests, c.inexact), (ra + rb + r3, 0), "{src}");
    }
}

/// The kernel program says through aya-log what it could not count (the
/// kind of event and one peer it happened to), at most once a second per
/// CPU and kind; the counters keep every occurrence.
#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn what_cannot_be_counted_is_logged_at_most_once_a_second_per_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    for (src, dst) in FLOWS {
        for hook in HOOKS {
            let mut p = probe(&Config::default());
            let (a, _, _) = batch(5, 0);
            // Segments of flows the program has no state for (no SYN seen),
            // 20 of them within well under a second.
            let from = |port: u16| {
                let ip = src.rsplit_once(':').unwrap().0;
                format!("{ip}:{port}")
            };
            for port in 41_000..41_020 {
                run(&p, hook, &Stream::new(&from(port), dst, 9).data(&a));
            }
            assert_eq!(p.global().unwrap().inexact[INEXACT_NO_FLOW as usize], 20);
            let lines = p.take_log();
            assert!(
                (1..=cpus).contains(&lines.len()),
                "{hook:?} {src}: {} lines for 20 events on {cpus} CPUs: {lines:?}",
                lines.len()
            );
            let ip = src.rsplit_once(':').unwrap().0.trim_matches(['[', ']']);
            for l in &lines {
                assert!(l.contains("no flow state"), "{l}");
                assert!(l.contains(ip) && l.contains("port 410"), "{ip} in {l}");
            }
            // Another kind of event has its own line.
            let mut s = Stream::new(src, dst, 77);
            run(&p, hook, &s.syn(SYN));
            run(&p, hook, &s.data(&[0xEE; 64]));
            let lines = p.take_log();
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains("no Diameter header"), "{}", lines[0]);
            // A second later the first kind is told again.
            std::thread::sleep(std::time::Duration::from_millis(1100));
            run(&p, hook, &Stream::new(&from(42_000), dst, 9).data(&a));
            let lines = p.take_log();
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains("port 42000"), "{}", lines[0]);
        }
    }
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn what_cannot_be_exact_is_counted_inexact_with_its_cause() {
    for (src, dst) in FLOWS {
        for hook in [ProbeHook::Xdp, ProbeHook::TcIngress] {
            let p = probe(&Config::default());
            let cause = |i: u32| p.global().unwrap().inexact[i as usize];
            let mut s = Stream::new(src, dst, 77);
            run(&p, hook, &s.syn(SYN));
            let (a, ra, _) = batch(10, 0);
            run(&p, hook, &s.data(&a));
            // A hole: the next segment is lost (or late).
            let (lost, _, _) = batch(20, 10);
            let _ = s.data(&lost);
            let (b, rb, _) = batch(15, 30);
            run(&p, hook, &s.data(&b));
            assert_eq!(cause(INEXACT_GAP), 1, "{hook:?} {src}");
            let c = counters(&p, src, Direction::FromPeer);
            // The segment after the hole starts with a header: the walk
            // takes up there, but the count is marked inexact.
            assert_eq!((c.requests, c.inexact), (ra + rb, 1), "{hook:?} {src}");

            // A segment after a hole that starts inside a message: nothing
            // can be counted until a segment starts with a header again.
            let (d, _, _) = batch(10, 50);
            let _ = s.data(&d[..7]);
            run(&p, hook, &s.data(&d[7..]));
            let (e, re, _) = batch(10, 70);
            run(&p, hook, &s.data(&e));
            assert_eq!(cause(INEXACT_GAP), 2);
            assert_eq!(cause(INEXACT_UNSYNCED), 1);
            let c = counters(&p, src, Direction::FromPeer);
            assert_eq!((c.requests, c.inexact), (ra + rb + re, 3));
            // Once it has taken up again, it is exact again.
            let (f, rf, _) = batch(10, 90);
            run(&p, hook, &s.data(&f));
            let c = counters(&p, src, Direction::FromPeer);
            assert_eq!((c.requests, c.inexact), (ra + rb + re + rf, 3));

            // A segment whose headers go on past what the packet holds (the
            // IP length says more than the frame carries).
            let (g, _, _) = batch(20, 110);
            let mut tail = s.data(&g);
            tail.truncate(tail.len() - g.len() / 2);
            run(&p, hook, &tail);
            assert_eq!(cause(INEXACT_UNREADABLE), 1, "{hook:?} {src}");
            // Taken up again at the next segment starting with a header.
            let (h, _, _) = batch(5, 130);
            run(&p, hook, &s.data(&h));
            assert_eq!(cause(INEXACT_UNSYNCED), 2);

            // Bytes that are not a Diameter header where one must start.
            run(&p, hook, &s.data(&[0xEE; 64]));
            assert_eq!(cause(INEXACT_BAD_HEADER), 1);

            // A flow the program has no state for (no SYN seen).
            let other = if src.starts_with('[') {
                "[fd00::1]:40001"
            } else {
                "10.0.0.1:40001"
            };
            let mut t = Stream::new(other, dst, 9);
            run(&p, hook, &t.data(&a));
            run(&p, hook, &t.data(&b));
            assert_eq!(cause(INEXACT_NO_FLOW), 1);
            let c = counters(&p, other, Direction::FromPeer);
            assert_eq!((c.requests, c.inexact), (ra + rb, 1), "{hook:?} {other}");
        }
    }
}

#[test]
#[ignore = "needs root; run by `cargo xtask test --only ebpf`"]
fn loopback_counts_arrivals_in_and_the_agents_own_segments_out() {
    // On loopback one program stands for both hooks: arrivals at the agent
    // counted for their source, the agent's own segments for their destination.
    let p = probe(&agent_and_peer_ports());
    let (bytes, requests, answers) = batch(12, 3);
    let agent = "10.0.0.2";
    let client = "10.0.0.1:40000";
    let server = "10.0.0.3:3869";
    // Arriving: walked, counted for the source.
    let mut c2a = Stream::new(client, &format!("{agent}:3868"), 7);
    let mut s2a = Stream::new(server, &format!("{agent}:50000"), 9);
    // Sent by the agent: packets and bytes, counted for the destination.
    let mut a2c = Stream::new(&format!("{agent}:3868"), client, 11);
    let mut a2s = Stream::new(&format!("{agent}:50000"), server, 13);
    let mut sent = [0u64; 2];
    for (s, flags) in [(&mut c2a, SYN), (&mut s2a, SYN_ACK)] {
        assert_eq!(run(&p, ProbeHook::TcLoopback, &s.syn(flags)), TC_ACT_UNSPEC);
        assert_eq!(
            run(&p, ProbeHook::TcLoopback, &s.data(&bytes)),
            TC_ACT_UNSPEC
        );
    }
    for (i, (s, flags)) in [(&mut a2c, SYN_ACK), (&mut a2s, SYN)]
        .into_iter()
        .enumerate()
    {
        for f in [s.syn(flags), s.data(&bytes)] {
            sent[i] += f.len() as u64;
            assert_eq!(run(&p, ProbeHook::TcLoopback, &f), TC_ACT_UNSPEC);
        }
    }
    for addr in [client, server] {
        let c = counters(&p, addr, Direction::FromPeer);
        assert_eq!(
            (c.packets, c.requests, c.answers, c.inexact),
            (2, requests, answers, 0),
            "{addr} in"
        );
    }
    assert_eq!(counters(&p, client, Direction::FromPeer).syn, 1);
    for (addr, bytes, syn) in [(client, sent[0], 0), (server, sent[1], 1)] {
        let c = counters(&p, addr, Direction::ToPeer);
        let got = (c.packets, c.bytes, c.requests, c.answers, c.inexact, c.syn);
        assert_eq!(got, (2, bytes, 0, 0, 0, syn), "{addr} out");
    }
    // Nothing is counted for the agent's own endpoints.
    assert_eq!(p.read().unwrap().len(), 4, "{:#?}", p.read().unwrap());
    assert_eq!(
        inexact_causes(&p.global().unwrap()),
        [0; INEXACT_CAUSES as usize]
    );
}

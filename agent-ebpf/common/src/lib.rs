//! Map layout shared by the kernel program (`agent-ebpf`) and the agent's
//! loader (`agent::ebpf`): names, key and value types, indices.
//!
//! The program counts Diameter traffic (RFC 6733 §3 message header, carried
//! over TCP per RFC 6733 §2.1) per peer. Every type here is `#[repr(C)]` with
//! explicit sizes and no implicit padding, so both sides read the same bytes;
//! the size assertions at the end of this file fail the build otherwise.
//! With the `user` feature the types also implement `aya::Pod`.

#![no_std]
#![warn(missing_docs, unreachable_pub)]

/// Name of the XDP program in the object file.
pub const PROG_XDP: &str = "doic_xdp";
/// Name of the TC ingress classifier in the object file.
pub const PROG_TC_INGRESS: &str = "doic_tc_ingress";
/// Name of the TC egress classifier in the object file.
pub const PROG_TC_EGRESS: &str = "doic_tc_egress";
/// Name of the TC ingress classifier of a loopback interface, which counts
/// both directions (in place of the ingress and egress classifiers).
pub const PROG_TC_LOOPBACK: &str = "doic_tc_loopback";
/// Name of an XDP program that passes every packet and does nothing else:
/// the anchor the benchmarks subtract.
pub const PROG_XDP_PASS: &str = "doic_xdp_pass";
/// Name of the XDP program the benchmarks run instead of `PROG_XDP`: the same
/// code, except that a segment of a known flow is taken as the next one in
/// sequence, so that replaying one packet measures the steady-state path
/// (flow found, headers walked) rather than the retransmission path.
pub const PROG_XDP_BENCH: &str = "doic_xdp_bench";

/// Per-CPU hash map `PeerKey -> PeerEntry`: the counters of what comes
/// from each peer (XDP, TC ingress), and for the segments that arrive at the
/// agent, of each of the peer's TCP flows, with the flow's position in its
/// byte stream.
pub const MAP_PEERS: &str = "DOIC_PEERS";
/// Per-CPU hash map `PeerKey -> PeerEntry`: the counters of what goes to
/// each peer (TC egress). One map per direction keeps the key short.
pub const MAP_PEERS_OUT: &str = "DOIC_PEERS_OUT";
/// Global `[u64; PORT_WORDS]` in `.rodata`: two bits per TCP port, its
/// `PORT_*` roles (port `p`: word `p / 32`, bits `2 * (p % 32)` and up); a
/// port with a role carries Diameter. The agent fills it when it loads the
/// program (a frozen array map: the parse path reads it with one load, no
/// map lookup); changing the ports means reloading.
pub const GLOBAL_PORT_BITS: &str = "DOIC_PORT_BITS";
/// Array of one `u32`: the `FLAG_*` bits.
pub const MAP_CONFIG: &str = "DOIC_CONFIG";
/// Longest-prefix-match trie `Key<[u8; 16]> -> u8`: sources allowed to open
/// connections to a Diameter port when the SYN guard is on. IPv4 addresses
/// are stored IPv4-mapped (`::ffff:a.b.c.d`, prefix length + 96).
pub const MAP_SYN_ALLOW: &str = "DOIC_SYN_ALLOW";
/// Per-CPU array of `u64` counters not tied to a peer, indexed by `GLOBAL_*`.
pub const MAP_GLOBAL: &str = "DOIC_GLOBAL";

/// Capacity of each peer map (peers, and the flows that arrive at the
/// agent). When it is full, the packets of new ones are counted in
/// `GLOBAL_TABLE_FULL` instead.
pub const MAX_PEERS: u32 = 65_536;
/// Most CPUs whose entries a flow's position is looked for in when the flow
/// moves to another CPU (`PeerEntry::owner`); on a machine with more, a flow
/// that moves to one past them counts as `INEXACT_NO_FLOW` until it is in
/// step again.
pub const MAX_CPUS: u32 = 256;
/// Most Diameter headers walked in one packet. A GSO super-segment or a
/// frame with more counts `INEXACT_TOO_MANY`.
pub const MAX_HEADERS: u32 = 256;
/// Number of `u64` words in the port bitmap (two bits for each of 65 536
/// ports).
pub const PORT_WORDS: u32 = 2048;
/// Port role: the agent listens on it. A segment to it arrives at the agent.
pub const PORT_LISTEN: u64 = 1;
/// Port role: a peer the agent connects to listens on it. A segment from it
/// arrives at the agent.
pub const PORT_PEER: u64 = 2;
/// Capacity of the SYN allow trie.
pub const MAX_SYN_ALLOW: u32 = 1024;

/// `MAP_CONFIG` bit: drop SYNs to a Diameter port from sources not in the
/// allow trie.
pub const FLAG_SYN_GUARD: u32 = 1;

/// Packets that could not be parsed down to TCP ports: IPv6 with extension
/// headers, IPv4 non-first fragments, headers outside the linear buffer.
pub const GLOBAL_UNPARSED: u32 = 0;
/// Diameter packets not counted per peer because the peer map was full.
pub const GLOBAL_TABLE_FULL: u32 = 1;
/// First of the `INEXACT_*` causes in `MAP_GLOBAL`: segments whose
/// requests and answers the program could not count exactly, by cause, at
/// index `GLOBAL_INEXACT + cause`.
pub const GLOBAL_INEXACT: u32 = 2;
/// Cause: a data segment of a flow whose position no CPU holds (a
/// connection older than the program, or one forgotten by the agent).
pub const INEXACT_NO_FLOW: u32 = 0;
/// Cause: a segment that does not follow the expected sequence number (a
/// hole before it: loss or reordering).
pub const INEXACT_GAP: u32 = 1;
/// Cause: a header the program cannot read (beyond the readable part of the
/// packet, or split over segments of fewer than 8 bytes).
pub const INEXACT_UNREADABLE: u32 = 2;
/// Cause: more headers in the packet than `MAX_HEADERS`.
pub const INEXACT_TOO_MANY: u32 = 3;
/// Cause: no valid Diameter header where the stream says one starts (not
/// Diameter, e.g. TLS, or a stream the program lost track of).
pub const INEXACT_BAD_HEADER: u32 = 4;
/// Cause: a segment of a flow that lost track of its headers, before a
/// segment starting with a valid header set it right again.
pub const INEXACT_UNSYNCED: u32 = 5;
/// Number of `INEXACT_*` causes.
pub const INEXACT_CAUSES: u32 = 6;
/// The causes' names, by index (the `cause` label of the metric).
pub const INEXACT_NAMES: [&str; INEXACT_CAUSES as usize] = [
    "no_flow",
    "gap",
    "unreadable",
    "too_many",
    "bad_header",
    "unsynced",
];
/// Least time between two log lines of the kernel program (aya-log) for
/// the same `GLOBAL_*` event on the same CPU, nanoseconds.
pub const LOG_INTERVAL_NS: u64 = 1_000_000_000;
/// Number of entries in `MAP_GLOBAL`.
pub const GLOBAL_COUNT: u32 = GLOBAL_INEXACT + INEXACT_CAUSES;

/// One peer transport endpoint (the map says the direction), and for the
/// segments that arrive at the agent, one TCP flow of that endpoint (its
/// local port and address too): userspace sums a peer's flows.
///
/// The peer is the remote end as seen from the interface: the source on
/// ingress, the destination on egress. That is the address a socket's
/// `peer_addr()` returns, so userspace can join the counters to its own
/// connections. 24 bytes: the key is hashed on every packet (a 32-byte one
/// cost about 4 ns more per packet, a 40-byte one 9 ns), and 8-aligned (the
/// program builds it on its stack, where LLVM, allowed misaligned accesses
/// for packet reads, would merge narrower stores into 8-byte ones the
/// verifier refuses when misaligned).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerKey {
    /// IPv6 address, or IPv4-mapped IPv6 (`::ffff:a.b.c.d`) for IPv4 (an
    /// IPv4-mapped address is IPv4: RFC 4291 §2.5.5.2 keeps them off the
    /// IPv6 wire).
    pub addr: [u8; 16],
    /// TCP port, host byte order.
    pub port: u16,
    /// The local TCP port (host byte order) of a flow arriving at the
    /// agent; 0 for the other segments.
    pub local_port: u16,
    /// The local address of a flow arriving at the agent, folded to 32
    /// bits (the XOR of its 32-bit words as loaded): exact for IPv4; two
    /// IPv6 flows of one peer endpoint to local addresses of the same fold
    /// would share an entry, and their segments would count as out of
    /// sequence (`INEXACT_GAP`), flagged, never miscounted silently. 0 for
    /// the other segments.
    pub local: u32,
}

/// Counters of one `PeerKey` on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Packets (TCP segments, with or without payload).
    pub packets: u64,
    /// Bytes, link-layer header included (the frame length).
    pub bytes: u64,
    /// Diameter request headers (R bit set) in the payloads of segments
    /// arriving at the agent (ingress, to a `PORT_LISTEN` port or from a
    /// `PORT_PEER` port). What the agent sends it counts itself: egress and
    /// the agent's own segments looped back on `lo` leave this at 0.
    pub requests: u64,
    /// Diameter answer headers (R bit clear), likewise.
    pub answers: u64,
    /// Connection attempts: SYN set, ACK clear.
    pub syn: u64,
    /// Connection attempts dropped by the SYN guard.
    pub syn_dropped: u64,
    /// Segments whose requests and answers could not be counted exactly
    /// (one of the `INEXACT_*` causes): while it grows, the request and
    /// answer counts are not exact.
    pub inexact: u64,
}

/// Where the next Diameter header of a flow starts. Every field is a `u64`
/// (the kernel program builds it on its stack, where LLVM, allowed
/// misaligned accesses for packet reads, would merge narrower stores into
/// misaligned ones the verifier refuses).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowState {
    /// TCP sequence number of the next header's first byte (low 32 bits).
    pub next: u64,
    /// The first `have` bytes of a split header, most significant first
    /// (low 32 bits).
    pub part: u64,
    /// How many bytes of the next header came in earlier segments (0-4):
    /// the segment that follows starts at `next + have`.
    pub have: u64,
    /// 1 while `next` is known; 0 after a loss of track.
    pub synced: u64,
}

/// The value of a `PeerKey` on one CPU: its counters on that CPU and, for
/// a flow arriving at the agent, the flow's position. One CPU at a time
/// holds the position (`owner` 1): the one that saw the flow's last
/// segment. A segment on another CPU takes it over from there
/// (`bpf_map_lookup_percpu_elem`), so a flow that moves between CPUs stays
/// exact, and every counter is added to on the CPU that sees the packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerEntry {
    /// This CPU's counters.
    pub stats: PeerStats,
    /// The flow's position, where `owner` is 1.
    pub flow: FlowState,
    /// 1 on the CPU whose `flow` is the flow's position, else 0.
    pub owner: u64,
}

const _: () = assert!(size_of::<PeerKey>() == 24);
const _: () = assert!(align_of::<PeerKey>() == 8);
const _: () = assert!(size_of::<PeerStats>() == 56);
const _: () = assert!(size_of::<FlowState>() == 32);
const _: () = assert!(size_of::<PeerEntry>() == 96);

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain `#[repr(C)]` data without padding (sizes asserted above);
    // every bit pattern is a valid value.
    unsafe impl aya::Pod for super::PeerKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PeerStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PeerEntry {}
}

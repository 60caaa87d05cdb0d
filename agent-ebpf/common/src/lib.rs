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
/// Name of an XDP program that passes every packet and does nothing else:
/// the anchor the benchmarks subtract.
pub const PROG_XDP_PASS: &str = "doic_xdp_pass";
/// Name of the XDP program the benchmarks run instead of `PROG_XDP`: the same
/// code, except that a segment of a known flow is taken as the next one in
/// sequence, so that replaying one packet measures the steady-state path
/// (flow found, headers walked) rather than the retransmission path.
pub const PROG_XDP_BENCH: &str = "doic_xdp_bench";

/// Per-CPU hash map `PeerKey -> PeerStats`.
pub const MAP_PEERS: &str = "DOIC_PEERS";
/// Global `[u64; PORT_WORDS]` in `.rodata`: two bits per TCP port, its
/// `PORT_*` roles (port `p`: word `p / 32`, bits `2 * (p % 32)` and up); a
/// port with a role carries Diameter. The agent fills it when it loads the
/// program (a frozen array map: the parse path reads it with one load, no
/// map lookup); changing the ports means reloading.
pub const GLOBAL_PORT_BITS: &str = "DOIC_PORT_BITS";
/// LRU hash map `FlowKey -> FlowState`: per TCP flow arriving at the agent, where the
/// next Diameter header starts in the byte stream (RFC 6733 §3: the header's
/// length field gives the next one). Least recently used flows are evicted
/// when it is full; a flow seen again after that counts `INEXACT_NO_FLOW`.
pub const MAP_FLOWS: &str = "DOIC_FLOWS";
/// Array of one `u32`: the `FLAG_*` bits.
pub const MAP_CONFIG: &str = "DOIC_CONFIG";
/// Longest-prefix-match trie `Key<[u8; 16]> -> u8`: sources allowed to open
/// connections to a Diameter port when the SYN guard is on. IPv4 addresses
/// are stored IPv4-mapped (`::ffff:a.b.c.d`, prefix length + 96).
pub const MAP_SYN_ALLOW: &str = "DOIC_SYN_ALLOW";
/// Per-CPU array of `u64` counters not tied to a peer, indexed by `GLOBAL_*`.
pub const MAP_GLOBAL: &str = "DOIC_GLOBAL";

/// Capacity of the peer map. When it is full, new peers are counted in
/// `GLOBAL_TABLE_FULL` instead.
pub const MAX_PEERS: u32 = 16_384;
/// Capacity of the flow map (LRU).
pub const MAX_FLOWS: u32 = 65_536;
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
/// Cause: a data segment of a flow without state (evicted from the LRU flow
/// map, or a connection older than the program).
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
/// Cause: the flow's state could not be stored (flow map insert failed).
pub const INEXACT_FLOW_FULL: u32 = 6;
/// Number of `INEXACT_*` causes.
pub const INEXACT_CAUSES: u32 = 7;
/// The causes' names, by index (the `cause` label of the metric).
pub const INEXACT_NAMES: [&str; INEXACT_CAUSES as usize] = [
    "no_flow",
    "gap",
    "unreadable",
    "too_many",
    "bad_header",
    "unsynced",
    "flow_full",
];
/// Number of entries in `MAP_GLOBAL`.
pub const GLOBAL_COUNT: u32 = GLOBAL_INEXACT + INEXACT_CAUSES;

/// `PeerKey::direction`: the packet came from the peer (XDP, TC ingress).
pub const DIR_FROM_PEER: u8 = 0;
/// `PeerKey::direction`: the packet went to the peer (TC egress).
pub const DIR_TO_PEER: u8 = 1;

/// One peer transport endpoint and a direction.
///
/// The peer is the remote end as seen from the interface: the source on
/// ingress, the destination on egress. That is the address a socket's
/// `peer_addr()` returns, so userspace can join the counters to its own
/// connections.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerKey {
    /// IPv6 address, or IPv4-mapped IPv6 (`::ffff:a.b.c.d`) for IPv4.
    pub addr: [u8; 16],
    /// TCP port, host byte order.
    pub port: u16,
    /// 4 or 6.
    pub family: u8,
    /// `DIR_FROM_PEER` or `DIR_TO_PEER`.
    pub direction: u8,
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

/// A TCP flow arriving at the agent, as the hook sees it. 24 bytes: the
/// key is hashed and compared on every segment that arrives, and a 40-byte
/// key (both addresses whole) cost about 9 ns more per packet. The local
/// (destination) address is folded to 32 bits: exact for IPv4; two IPv6
/// flows that differ only in local addresses of the same fold would share
/// a state, and their segments would count as out of sequence (`gap`),
/// flagged, never miscounted silently. Every field is a `u64` (the kernel
/// program builds it on its stack, where LLVM, allowed misaligned accesses
/// for packet reads, would merge narrower stores into misaligned ones the
/// verifier refuses).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address, IPv6 or IPv4-mapped, as loaded (network byte order).
    pub src: [u64; 2],
    /// The TCP header's first 4 bytes (source and destination port) as
    /// loaded, and the destination address folded to 32 bits (the XOR of
    /// its 32-bit words as loaded) << 32.
    pub ports_dst: u64,
}

/// Where the next Diameter header of a flow starts. `u64` fields, as in
/// `FlowKey`.
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

const _: () = assert!(size_of::<PeerKey>() == 20);
const _: () = assert!(align_of::<PeerKey>() == 2);
const _: () = assert!(size_of::<PeerStats>() == 56);
const _: () = assert!(size_of::<FlowKey>() == 24);
const _: () = assert!(size_of::<FlowState>() == 32);

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain `#[repr(C)]` data without padding (sizes asserted above);
    // every bit pattern is a valid value.
    unsafe impl aya::Pod for super::PeerKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PeerStats {}
}

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

/// Per-CPU hash map `PeerKey -> PeerStats`.
pub const MAP_PEERS: &str = "DOIC_PEERS";
/// Global `[u64; PORT_WORDS]` in `.rodata`: bit `p` set means TCP port `p`
/// carries Diameter (word `p / 64`, bit `p % 64`). The agent fills it when it
/// loads the program (a frozen array map: the parse path reads it with one
/// load, no map lookup); changing the ports means reloading.
pub const GLOBAL_PORT_BITS: &str = "DOIC_PORT_BITS";
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
/// Number of `u64` words in the port bitmap (65 536 bits).
pub const PORT_WORDS: u32 = 1024;
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
/// Number of entries in `MAP_GLOBAL`.
pub const GLOBAL_COUNT: u32 = 2;

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
    /// Segments starting with a Diameter request header (R bit set).
    pub requests: u64,
    /// Segments starting with a Diameter answer header (R bit clear).
    pub answers: u64,
    /// Connection attempts: SYN set, ACK clear.
    pub syn: u64,
    /// Connection attempts dropped by the SYN guard.
    pub syn_dropped: u64,
}

const _: () = assert!(size_of::<PeerKey>() == 20);
const _: () = assert!(align_of::<PeerKey>() == 2);
const _: () = assert!(size_of::<PeerStats>() == 48);

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain `#[repr(C)]` data without padding (sizes asserted above);
    // every bit pattern is a valid value.
    unsafe impl aya::Pod for super::PeerKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PeerStats {}
}

//! Hand-built frames for the parse-path tests: Ethernet (optionally with a
//! VLAN tag), IPv4 (optionally with options or a fragment offset) or IPv6
//! (optionally with a hop-by-hop header), TCP, payload.

use std::net::{IpAddr, SocketAddr};

/// TCP flags.
pub(crate) const ACK: u8 = 0x10;
pub(crate) const PSH_ACK: u8 = 0x18;
pub(crate) const SYN: u8 = 0x02;
pub(crate) const SYN_ACK: u8 = 0x12;

/// One frame to build.
#[derive(Clone)]
pub(crate) struct Frame {
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    pub(crate) flags: u8,
    /// TCP sequence number (1000 unless set).
    pub(crate) seq: u32,
    pub(crate) payload: Vec<u8>,
    pub(crate) vlan: bool,
    pub(crate) ipv4_options: bool,
    pub(crate) fragment_offset: u16,
    pub(crate) ipv6_hop_by_hop: bool,
    /// Bytes appended after the IP packet (Ethernet padding).
    pub(crate) trailer: Vec<u8>,
}

impl Frame {
    pub(crate) fn new(src: &str, dst: &str, flags: u8, payload: &[u8]) -> Self {
        Frame {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            flags,
            seq: 1000,
            payload: payload.to_vec(),
            vlan: false,
            ipv4_options: false,
            fragment_offset: 0,
            ipv6_hop_by_hop: false,
            trailer: Vec::new(),
        }
    }

    pub(crate) fn build(&self) -> Vec<u8> {
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&self.src.port().to_be_bytes());
        tcp.extend_from_slice(&self.dst.port().to_be_bytes());
        tcp.extend_from_slice(&self.seq.to_be_bytes());
        tcp.extend_from_slice(&2000u32.to_be_bytes());
        // 32-byte header: 12 bytes of options (NOP, NOP, timestamps).
        tcp.push(8 << 4);
        tcp.push(self.flags);
        tcp.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        tcp.extend_from_slice(&self.payload);

        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        let ethertype: u16 = match self.src.ip() {
            IpAddr::V4(_) => 0x0800,
            IpAddr::V6(_) => 0x86dd,
        };
        if self.vlan {
            f.extend_from_slice(&0x8100u16.to_be_bytes());
            f.extend_from_slice(&100u16.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ihl = if self.ipv4_options { 6 } else { 5 };
                let total = ihl * 4 + tcp.len();
                f.push(0x40 | ihl as u8);
                f.push(0);
                f.extend_from_slice(&(total as u16).to_be_bytes());
                f.extend_from_slice(&[0, 1]);
                f.extend_from_slice(&(0x4000 | self.fragment_offset).to_be_bytes());
                f.extend_from_slice(&[64, 6, 0, 0]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
                if self.ipv4_options {
                    f.extend_from_slice(&[1, 1, 1, 0]); // NOP, NOP, NOP, EOL
                }
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ext = if self.ipv6_hop_by_hop { 8 } else { 0 };
                f.extend_from_slice(&[0x60, 0, 0, 0]);
                f.extend_from_slice(&((tcp.len() + ext) as u16).to_be_bytes());
                f.push(if self.ipv6_hop_by_hop { 0 } else { 6 });
                f.push(64);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
                if self.ipv6_hop_by_hop {
                    f.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // next: TCP, PadN
                }
            }
            _ => panic!("mixed families"),
        }
        f.extend_from_slice(&tcp);
        f.extend_from_slice(&self.trailer);
        f
    }
}

/// One direction of a TCP connection, frame by frame: a SYN, then data
/// segments numbered in sequence.
pub(crate) struct Stream {
    src: String,
    dst: String,
    /// Sequence number of the next data byte.
    pub(crate) seq: u32,
}

impl Stream {
    pub(crate) fn new(src: &str, dst: &str, isn: u32) -> Self {
        Stream {
            src: src.to_owned(),
            dst: dst.to_owned(),
            seq: isn.wrapping_add(1),
        }
    }

    /// The connection's SYN (or SYN-ACK with `flags`), at ISN = `seq - 1`.
    pub(crate) fn syn(&self, flags: u8) -> Vec<u8> {
        let mut f = Frame::new(&self.src, &self.dst, flags, &[]);
        f.seq = self.seq.wrapping_sub(1);
        f.build()
    }

    /// The next data segment, carrying `payload`.
    pub(crate) fn data(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut f = Frame::new(&self.src, &self.dst, PSH_ACK, payload);
        f.seq = self.seq;
        self.seq = self.seq.wrapping_add(payload.len() as u32);
        f.build()
    }
}

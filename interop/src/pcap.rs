//! A minimal libpcap file writer, so Diameter messages built in memory can
//! be handed to tshark without sending any traffic.
//!
//! Format: the classic libpcap file (magic `0xa1b2c3d4`, microsecond
//! timestamps, version 2.4), link type 1 (Ethernet), frames carrying IPv4
//! (RFC 791) and TCP (RFC 9293) with correct header checksums. Each TCP
//! stream starts with a three-way handshake; payloads are cut into segments
//! of at most [`MSS`] bytes and acknowledged by the other side, so tshark's
//! TCP analysis sees an ordinary conversation and reassembles Diameter
//! messages (RFC 6733 §3) that span segments.

use std::io;
use std::net::SocketAddrV4;
use std::path::Path;

/// Largest TCP payload per frame (the loopback MSS).
pub const MSS: usize = 65_483;

const LINKTYPE_ETHERNET: u32 = 1;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;

/// Which way a segment goes on a [`TcpFlow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the side that opened the connection.
    ToServer,
    /// From the side that accepted it.
    ToClient,
}

/// One TCP connection inside a capture: its endpoints and next sequence
/// numbers.
#[derive(Debug, Clone)]
pub struct TcpFlow {
    client: SocketAddrV4,
    server: SocketAddrV4,
    client_seq: u32,
    server_seq: u32,
    ip_id: u16,
}

/// An in-memory pcap file.
#[derive(Debug, Clone)]
pub struct PcapWriter {
    buf: Vec<u8>,
    ts_us: u64,
}

impl Default for PcapWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl PcapWriter {
    /// A capture with only the file header.
    #[must_use]
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(&0xa1b2_c3d4_u32.to_le_bytes());
        buf.extend_from_slice(&2_u16.to_le_bytes());
        buf.extend_from_slice(&4_u16.to_le_bytes());
        buf.extend_from_slice(&0_i32.to_le_bytes()); // thiszone
        buf.extend_from_slice(&0_u32.to_le_bytes()); // sigfigs
        buf.extend_from_slice(&262_144_u32.to_le_bytes()); // snaplen
        buf.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        Self {
            buf,
            ts_us: 1_700_000_000_000_000,
        }
    }

    /// Opens a TCP connection from `client` to `server` (SYN, SYN-ACK, ACK).
    pub fn open(&mut self, client: SocketAddrV4, server: SocketAddrV4) -> TcpFlow {
        let mut f = TcpFlow {
            client,
            server,
            client_seq: 1000,
            server_seq: 5000,
            ip_id: 1,
        };
        self.segment(&mut f, Dir::ToServer, TCP_SYN, &[]);
        f.client_seq = f.client_seq.wrapping_add(1);
        self.segment(&mut f, Dir::ToClient, TCP_SYN | TCP_ACK, &[]);
        f.server_seq = f.server_seq.wrapping_add(1);
        self.segment(&mut f, Dir::ToServer, TCP_ACK, &[]);
        f
    }

    /// Sends `payload` on `flow` in `dir` (segments of at most [`MSS`]),
    /// each acknowledged by the other side.
    pub fn send(&mut self, flow: &mut TcpFlow, dir: Dir, payload: &[u8]) {
        for chunk in payload.chunks(MSS) {
            self.segment(flow, dir, TCP_PSH | TCP_ACK, chunk);
            let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            let back = match dir {
                Dir::ToServer => {
                    flow.client_seq = flow.client_seq.wrapping_add(len);
                    Dir::ToClient
                }
                Dir::ToClient => {
                    flow.server_seq = flow.server_seq.wrapping_add(len);
                    Dir::ToServer
                }
            };
            self.segment(flow, back, TCP_ACK, &[]);
        }
    }

    /// Closes `flow` (FIN from each side, acknowledged).
    pub fn close(&mut self, flow: &mut TcpFlow) {
        self.segment(flow, Dir::ToServer, TCP_FIN | TCP_ACK, &[]);
        flow.client_seq = flow.client_seq.wrapping_add(1);
        self.segment(flow, Dir::ToClient, TCP_FIN | TCP_ACK, &[]);
        flow.server_seq = flow.server_seq.wrapping_add(1);
        self.segment(flow, Dir::ToServer, TCP_ACK, &[]);
    }

    /// The file contents so far.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Writes the file.
    ///
    /// # Errors
    /// Any I/O error.
    pub fn write_to(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, &self.buf)
    }

    fn segment(&mut self, flow: &mut TcpFlow, dir: Dir, flags: u8, payload: &[u8]) {
        let (src, dst, seq, ack) = match dir {
            Dir::ToServer => (flow.client, flow.server, flow.client_seq, flow.server_seq),
            Dir::ToClient => (flow.server, flow.client, flow.server_seq, flow.client_seq),
        };
        let ack = if flags & TCP_ACK != 0 { ack } else { 0 };
        let tcp = tcp_segment(src, dst, seq, ack, flags, payload);
        let ip = ipv4_packet(src, dst, flow.ip_id, &tcp);
        flow.ip_id = flow.ip_id.wrapping_add(1);
        let mut frame = Vec::with_capacity(14 + ip.len());
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // dst MAC (locally administered)
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // src MAC
        frame.extend_from_slice(&0x0800_u16.to_be_bytes());
        frame.extend_from_slice(&ip);
        self.record(&frame);
    }

    fn record(&mut self, frame: &[u8]) {
        self.ts_us += 10;
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let secs = u32::try_from(self.ts_us / 1_000_000).unwrap_or(u32::MAX);
        let usecs = u32::try_from(self.ts_us % 1_000_000).unwrap_or(0);
        self.buf.extend_from_slice(&secs.to_le_bytes());
        self.buf.extend_from_slice(&usecs.to_le_bytes());
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(frame);
    }
}

/// The ones' complement sum of RFC 1071 over `data`, folded to 16 bits,
/// starting from `init`.
fn ones_sum(init: u32, data: &[u8]) -> u32 {
    let mut sum = init;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// The Internet checksum (RFC 1071) of `data` plus `init`.
fn checksum(init: u32, data: &[u8]) -> u16 {
    let folded = u16::try_from(ones_sum(init, data)).unwrap_or(0xffff);
    !folded
}

fn ipv4_packet(src: SocketAddrV4, dst: SocketAddrV4, id: u16, tcp: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + tcp.len()).unwrap_or(u16::MAX);
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = 64; // TTL
    h[9] = 6; // TCP
    h[12..16].copy_from_slice(&src.ip().octets());
    h[16..20].copy_from_slice(&dst.ip().octets());
    let c = checksum(0, &h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    let mut p = h.to_vec();
    p.extend_from_slice(tcp);
    p
}

fn tcp_segment(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut s = vec![0u8; 20];
    s[0..2].copy_from_slice(&src.port().to_be_bytes());
    s[2..4].copy_from_slice(&dst.port().to_be_bytes());
    s[4..8].copy_from_slice(&seq.to_be_bytes());
    s[8..12].copy_from_slice(&ack.to_be_bytes());
    s[12] = 5 << 4;
    s[13] = flags;
    s[14..16].copy_from_slice(&65_535_u16.to_be_bytes());
    s.extend_from_slice(payload);
    // RFC 9293 §3.1: pseudo-header of source, destination, protocol, TCP length.
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.ip().octets());
    pseudo.extend_from_slice(&dst.ip().octets());
    pseudo.extend_from_slice(&[0, 6]);
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    pseudo.extend_from_slice(&len.to_be_bytes());
    let c = checksum(ones_sum(0, &pseudo), &s);
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn addrs() -> (SocketAddrV4, SocketAddrV4) {
        (
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 40000),
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 3868),
        )
    }

    /// Frames of the file: (captured length, frame bytes).
    fn frames(file: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = 24;
        while at + 16 <= file.len() {
            let caplen = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
            out.push(&file[at + 16..at + 16 + caplen]);
            at += 16 + caplen;
        }
        assert_eq!(at, file.len());
        out
    }

    #[test]
    fn rfc1071_example_sum() {
        // RFC 1071 §3 worked example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_sum(0, &data), 0xddf2);
        assert_eq!(checksum(0, &data), !0xddf2);
    }

    #[test]
    fn header_is_libpcap_ethernet() {
        let w = PcapWriter::new();
        assert_eq!(&w.bytes()[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(w.bytes().len(), 24);
        assert_eq!(&w.bytes()[20..24], &1u32.to_le_bytes());
    }

    #[test]
    fn checksums_verify_and_sequence_numbers_advance() {
        let (c, s) = addrs();
        let mut w = PcapWriter::new();
        let mut f = w.open(c, s);
        w.send(&mut f, Dir::ToServer, b"hello, odd length");
        w.close(&mut f);
        let fr = frames(w.bytes());
        assert_eq!(fr.len(), 3 + 2 + 3);
        for frame in &fr {
            let ip = &frame[14..];
            assert_eq!(ones_sum(0, &ip[..20]), 0xffff, "ip header checksum");
            let tcp = &ip[20..];
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&ip[12..20]);
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&u16::try_from(tcp.len()).unwrap().to_be_bytes());
            assert_eq!(ones_sum(ones_sum(0, &pseudo), tcp), 0xffff, "tcp checksum");
        }
        let data = &fr[3][14 + 20..];
        assert_eq!(&data[20..], b"hello, odd length");
        assert_eq!(u32::from_be_bytes(data[4..8].try_into().unwrap()), 1001);
        let ack = &fr[4][14 + 20..];
        assert_eq!(
            u32::from_be_bytes(ack[8..12].try_into().unwrap()),
            1001 + 17
        );
    }

    #[test]
    fn large_payloads_are_segmented() {
        let (c, s) = addrs();
        let mut w = PcapWriter::new();
        let mut f = w.open(c, s);
        w.send(&mut f, Dir::ToClient, &vec![7u8; MSS + 10]);
        let fr = frames(w.bytes());
        assert_eq!(fr.len(), 3 + 4);
        assert_eq!(fr[3].len(), 14 + 20 + 20 + MSS);
        assert_eq!(fr[5].len(), 14 + 20 + 20 + 10);
    }
}

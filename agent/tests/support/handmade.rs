//! Hand-written Diameter messages (RFC 6733 §3 header, §4 AVPs): a Device-
//! Watchdog-Request/Answer pair with a padding AVP to vary the size.

use std::io::{Read, Write};
use std::net::TcpStream;

pub(crate) use diameter::codec::HEADER_LEN;
use diameter::codec::{AvpFlags, put_avp};
use diameter::dictionary::cmd::DEVICE_WATCHDOG as CMD_DEVICE_WATCHDOG;
use diameter::dictionary::code::{
    ORIGIN_HOST as AVP_ORIGIN_HOST, ORIGIN_REALM as AVP_ORIGIN_REALM,
    PROXY_STATE as AVP_PROXY_INFO_STATE, RESULT_CODE as AVP_RESULT_CODE,
};

fn avp(out: &mut Vec<u8>, code: u32, data: &[u8]) {
    put_avp(out, code, AvpFlags(AvpFlags::MANDATORY), None, data).unwrap();
}

fn message(request: bool, hop_by_hop: u32, avps: &[u8]) -> Vec<u8> {
    let len = (HEADER_LEN + avps.len()) as u32;
    let mut m = Vec::with_capacity(len as usize);
    m.push(1);
    m.extend_from_slice(&len.to_be_bytes()[1..]);
    m.push(if request { 0x80 } else { 0x00 });
    m.extend_from_slice(&CMD_DEVICE_WATCHDOG.to_be_bytes()[1..]);
    m.extend_from_slice(&0u32.to_be_bytes()); // Application-Id: common messages
    m.extend_from_slice(&hop_by_hop.to_be_bytes());
    m.extend_from_slice(&(hop_by_hop ^ 0x5a5a_0000).to_be_bytes());
    m.extend_from_slice(avps);
    m
}

/// A DWR with `pad` bytes of Proxy-State.
pub(crate) fn request(hop_by_hop: u32, host: &str, pad: usize) -> Vec<u8> {
    let mut avps = Vec::new();
    avp(&mut avps, AVP_ORIGIN_HOST, host.as_bytes());
    avp(&mut avps, AVP_ORIGIN_REALM, b"example.net");
    avp(&mut avps, AVP_PROXY_INFO_STATE, &vec![0xa5; pad]);
    message(true, hop_by_hop, &avps)
}

/// The DWA to `req`: same hop-by-hop id, Result-Code 2001.
pub(crate) fn answer(req: &[u8], host: &str) -> Vec<u8> {
    let hbh = u32::from_be_bytes([req[12], req[13], req[14], req[15]]);
    let mut avps = Vec::new();
    avp(&mut avps, AVP_RESULT_CODE, &2001u32.to_be_bytes());
    avp(&mut avps, AVP_ORIGIN_HOST, host.as_bytes());
    avp(&mut avps, AVP_ORIGIN_REALM, b"example.net");
    message(false, hbh, &avps)
}

/// Reads one whole message; `None` at end of stream.
pub(crate) fn read_message(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = [0u8; HEADER_LEN];
    if s.read_exact(&mut head).is_err() {
        return None;
    }
    assert_eq!(head[0], 1, "version");
    let len = u32::from_be_bytes([0, head[1], head[2], head[3]]) as usize;
    let mut m = head.to_vec();
    m.resize(len, 0);
    s.read_exact(&mut m[HEADER_LEN..]).expect("message body");
    Some(m)
}

/// True when `m` has the R bit set.
pub(crate) fn is_request(m: &[u8]) -> bool {
    m[4] & 0x80 != 0
}

/// Writes `m` in one write (one segment with TCP_NODELAY), or in two writes
/// split at `split` (the second segment starts inside the message).
pub(crate) fn send(s: &mut TcpStream, m: &[u8], split: Option<usize>) {
    match split {
        None => s.write_all(m).expect("write"),
        Some(at) => {
            s.write_all(&m[..at]).expect("write first part");
            s.write_all(&m[at..]).expect("write second part");
        }
    }
}

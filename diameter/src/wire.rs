//! The relay's view of a Diameter message (RFC 6733 §3 header, §4 AVPs):
//! framing, a one-pass scan of the top-level AVPs a relay routes on
//! (§6.1), in-place header rewrites (hop-by-hop id, T flag), Route-Record
//! append (§6.1.9) and the answers the agent builds itself (§6.2, §7.2
//! error answers with Failed-AVP, Proxy-Info copied). Everything else in a
//! message stays raw bytes and is relayed untouched.

use std::net::IpAddr;

use bytes::{Bytes, BytesMut};

use crate::codec;
use crate::peer::capx::Capabilities;

/// Diameter header length (RFC 6733 §3).
pub const HEADER_LEN: usize = 20;
/// Largest message the agent accepts.
pub const MAX_MESSAGE_LEN: usize = 1 << 20;

/// Command flags (RFC 6733 §3).
pub mod flags {
    /// R: request.
    pub const REQUEST: u8 = 0x80;
    /// P: proxiable.
    pub const PROXIABLE: u8 = 0x40;
    /// E: error.
    pub const ERROR: u8 = 0x20;
    /// T: potentially retransmitted.
    pub const RETRANSMIT: u8 = 0x10;
}

/// Command codes used by the base protocol (RFC 6733 §3.1).
pub mod cmd {
    /// Capabilities-Exchange.
    pub const CER: u32 = 257;
    /// Device-Watchdog.
    pub const DWR: u32 = 280;
    /// Disconnect-Peer.
    pub const DPR: u32 = 282;
}

/// AVP codes the relay reads or writes (RFC 6733 §4.5).
pub mod avp {
    /// Session-Id.
    pub const SESSION_ID: u32 = 263;
    /// Origin-Host.
    pub const ORIGIN_HOST: u32 = 264;
    /// Origin-Realm.
    pub const ORIGIN_REALM: u32 = 296;
    /// Destination-Host.
    pub const DESTINATION_HOST: u32 = 293;
    /// Destination-Realm.
    pub const DESTINATION_REALM: u32 = 283;
    /// Route-Record.
    pub const ROUTE_RECORD: u32 = 282;
    /// Proxy-Info.
    pub const PROXY_INFO: u32 = 284;
    /// Result-Code.
    pub const RESULT_CODE: u32 = 268;
    /// Experimental-Result.
    pub const EXPERIMENTAL_RESULT: u32 = 297;
    /// Experimental-Result-Code.
    pub const EXPERIMENTAL_RESULT_CODE: u32 = 298;
    /// Failed-AVP.
    pub const FAILED_AVP: u32 = 279;
    /// Error-Message.
    pub const ERROR_MESSAGE: u32 = 281;
    /// Host-IP-Address.
    pub const HOST_IP_ADDRESS: u32 = 257;
    /// Vendor-Id.
    pub const VENDOR_ID: u32 = 266;
    /// Product-Name.
    pub const PRODUCT_NAME: u32 = 269;
    /// Firmware-Revision.
    pub const FIRMWARE_REVISION: u32 = 267;
    /// Origin-State-Id.
    pub const ORIGIN_STATE_ID: u32 = 278;
    /// Auth-Application-Id.
    pub const AUTH_APPLICATION_ID: u32 = 258;
    /// Acct-Application-Id.
    pub const ACCT_APPLICATION_ID: u32 = 259;
    /// Vendor-Specific-Application-Id.
    pub const VENDOR_SPECIFIC_APPLICATION_ID: u32 = 260;
    /// Disconnect-Cause.
    pub const DISCONNECT_CAUSE: u32 = 273;
}

/// A defect in received bytes, with the Result-Code of RFC 6733 §7.1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why} (result-code {result_code})")]
pub struct WireError {
    /// The Result-Code the answer carries.
    pub result_code: u32,
    /// The Failed-AVP content (one encoded AVP), where §7.5 asks for one.
    pub failed_avp: Option<Bytes>,
    /// True when the stream cannot be framed any more: the connection must
    /// be closed.
    pub framing: bool,
    /// What is wrong.
    pub why: &'static str,
}

/// Length of the first message in `buf`: `Ok(None)` when more bytes are
/// needed.
///
/// # Errors
/// 5011 DIAMETER_UNSUPPORTED_VERSION or 5015 DIAMETER_INVALID_MESSAGE_LENGTH
/// (framing errors: the stream is lost).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    // the version is judged once the whole length field is there
    if buf.len() < 4 {
        return Ok(None);
    }
    codec::frame_len_max(buf, MAX_MESSAGE_LEN).map_err(|e| {
        let result_code = e.result_code();
        WireError {
            result_code,
            failed_avp: None,
            framing: true,
            why: if result_code == 5011 {
                "unsupported version"
            } else {
                "invalid message length"
            },
        }
    })
}

/// The fixed header fields (RFC 6733 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Command flags.
    pub flags: u8,
    /// Command code.
    pub cmd: u32,
    /// Application-ID.
    pub app: u32,
    /// Hop-by-Hop Identifier.
    pub hbh: u32,
    /// End-to-End Identifier.
    pub e2e: u32,
}

impl Head {
    /// Reads the header of a framed message (at least 20 bytes).
    #[must_use]
    pub fn read(m: &[u8]) -> Head {
        let u = |i: usize| u32::from_be_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
        Head {
            flags: m[4],
            cmd: u(4) & 0x00ff_ffff,
            app: u(8),
            hbh: u(12),
            e2e: u(16),
        }
    }

    /// True for a request.
    #[must_use]
    pub fn is_request(&self) -> bool {
        self.flags & flags::REQUEST != 0
    }
}

/// Overwrites the Hop-by-Hop Identifier of a framed message.
pub fn set_hbh(m: &mut [u8], hbh: u32) {
    m[12..16].copy_from_slice(&hbh.to_be_bytes());
}

/// Sets the T flag of a framed message (RFC 6733 §5.5.4 retransmission).
pub fn set_retransmit(m: &mut [u8]) {
    m[4] |= flags::RETRANSMIT;
}

/// Byte range of an AVP's data within its message.
type Span = (u32, u32);

/// The top-level AVPs a relay needs, found in one pass; ranges point into
/// the scanned message.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Session-Id data.
    pub session_id: Option<Span>,
    /// Origin-Host data.
    pub origin_host: Option<Span>,
    /// Origin-Realm data.
    pub origin_realm: Option<Span>,
    /// Destination-Host data.
    pub destination_host: Option<Span>,
    /// Destination-Realm data.
    pub destination_realm: Option<Span>,
    /// Result-Code value.
    pub result_code: Option<u32>,
    /// Experimental-Result-Code inside Experimental-Result.
    pub experimental_result_code: Option<u32>,
    /// Route-Record data ranges.
    pub route_records: Vec<Span>,
    /// Whole Proxy-Info AVPs (header included), in order.
    pub proxy_infos: Vec<Span>,
}

/// The data of `span` in `m`.
#[must_use]
pub fn slice(m: &[u8], span: Span) -> &[u8] {
    &m[span.0 as usize..span.1 as usize]
}

/// One AVP found by [`avps`]: code, flags, vendor, data range, whole range.
#[derive(Debug, Clone, Copy)]
pub struct RawAvp {
    /// AVP code.
    pub code: u32,
    /// AVP flags.
    pub flags: u8,
    /// Vendor-Id when the V bit is set.
    pub vendor: Option<u32>,
    /// Data range (unpadded).
    pub data: Span,
    /// Whole AVP range (header to end of padding, or of data for the last).
    pub whole: Span,
}

/// Iterates the AVPs in `m[start..end]` of a framed message `m`, checking
/// lengths (5014 with Failed-AVP on a bad length). The codec's
/// [`codec::AvpIter`] parses each AVP; the last AVP of a grouped value may
/// end unpadded at `end` (its padding is then the enclosing AVP's).
pub fn avps(
    m: &[u8],
    start: usize,
    end: usize,
) -> impl Iterator<Item = Result<RawAvp, WireError>> + '_ {
    // Failed-AVP: the AVP header with the length it should have had
    // (RFC 6733 §7.5 asks for the offending AVP; its header is what can be
    // trusted).
    let bad = move |at: usize| WireError {
        result_code: 5014,
        failed_avp: Some(Bytes::copy_from_slice(&m[at..(at + 8).min(end)])),
        framing: false,
        why: if end - at < 8 {
            "truncated avp header"
        } else {
            "invalid avp length"
        },
    };
    let padded_end = start
        .saturating_add(end.saturating_sub(start).next_multiple_of(4))
        .min(m.len());
    let mut it = codec::AvpIter::with_offset(m.get(start..padded_end).unwrap_or(&[]), start);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let a = match it.next()? {
            Ok(a) if a.offset + a.header_len() + a.data.len() <= end => a,
            Ok(a) => {
                failed = true;
                return Some(Err(bad(a.offset)));
            }
            Err(e) => {
                failed = true;
                return Some(Err(bad(e.offset())));
            }
        };
        let data = a.offset + a.header_len();
        Some(Ok(RawAvp {
            code: a.code,
            flags: a.flags.0,
            vendor: a.vendor_id,
            data: (data as u32, (data + a.data.len()) as u32),
            whole: (a.offset as u32, (a.offset + a.raw.len()).min(end) as u32),
        }))
    })
}

fn u32_of(m: &[u8], s: Span) -> Option<u32> {
    let d = slice(m, s);
    (d.len() == 4).then(|| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
}

/// Scans the top-level AVPs of a framed message.
///
/// # Errors
/// 5014 DIAMETER_INVALID_AVP_LENGTH with Failed-AVP when an AVP length is
/// wrong, 3008 DIAMETER_INVALID_HDR_BITS for an E bit on a request.
pub fn scan(m: &[u8]) -> Result<Scan, WireError> {
    let head = Head::read(m);
    if head.is_request() && head.flags & flags::ERROR != 0 {
        return Err(WireError {
            result_code: 3008,
            failed_avp: None,
            framing: false,
            why: "E bit set on a request",
        });
    }
    let mut s = Scan::default();
    for a in avps(m, HEADER_LEN, m.len()) {
        let a = a?;
        if a.vendor.is_some() {
            continue;
        }
        match a.code {
            avp::SESSION_ID => s.session_id = Some(a.data),
            avp::ORIGIN_HOST => s.origin_host = Some(a.data),
            avp::ORIGIN_REALM => s.origin_realm = Some(a.data),
            avp::DESTINATION_HOST => s.destination_host = Some(a.data),
            avp::DESTINATION_REALM => s.destination_realm = Some(a.data),
            avp::ROUTE_RECORD => s.route_records.push(a.data),
            avp::PROXY_INFO => s.proxy_infos.push((a.whole.0, a.data.1)),
            avp::RESULT_CODE => s.result_code = u32_of(m, a.data),
            avp::EXPERIMENTAL_RESULT => {
                for c in avps(m, a.data.0 as usize, a.data.1 as usize) {
                    let c = c?;
                    if c.code == avp::EXPERIMENTAL_RESULT_CODE && c.vendor.is_none() {
                        s.experimental_result_code = u32_of(m, c.data);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(s)
}

/// Writes one AVP (M bit set, no vendor) with padding, by the codec's
/// [`codec::put_avp`].
pub fn put_avp(out: &mut BytesMut, code: u32, data: &[u8]) {
    let m = codec::AvpFlags(codec::AvpFlags::MANDATORY);
    if let Err(e) = codec::put_avp(out, code, m, None, data) {
        avp_not_written(code, &e);
    }
}

/// Logs an AVP [`put_avp`] could not write (longer than 2^24 bytes): off
/// the per-request path.
#[cold]
#[inline(never)]
fn avp_not_written(code: u32, e: &codec::EncodeError) {
    tracing::error!(cause = %e, code, "cannot encode an agent avp");
}

/// Starts a message in `out`; returns its start offset for [`finish`].
pub fn begin(out: &mut BytesMut, flags: u8, cmd: u32, app: u32, hbh: u32, e2e: u32) -> usize {
    let start = out.len();
    codec_header(cmd, app, flags, hbh, e2e).encode_with_length(0, out);
    start
}

/// Writes the Message Length of the message begun at `start`.
pub fn finish(out: &mut BytesMut, start: usize) {
    let len = (out.len() - start) as u32;
    out[start + 1..start + 4].copy_from_slice(&len.to_be_bytes()[1..]);
}

/// Appends `msg` to `out` with a Route-Record AVP of `host` added at its
/// end (RFC 6733 §6.1.9) and the Hop-by-Hop Identifier replaced; sets the
/// T flag when `retransmit`.
pub fn put_relayed_request(out: &mut BytesMut, msg: &[u8], host: &str, hbh: u32, retransmit: bool) {
    let start = out.len();
    out.extend_from_slice(msg);
    put_avp(out, avp::ROUTE_RECORD, host.as_bytes());
    finish(out, start);
    set_hbh(&mut out[start..], hbh);
    if retransmit {
        set_retransmit(&mut out[start..]);
    }
}

/// [`put_relayed_request`] for `msg` without its bytes `cut.0..cut.1` (a
/// whole top-level AVP), in one pass.
#[inline(never)]
pub fn put_relayed_request_cut(
    out: &mut BytesMut,
    msg: &[u8],
    cut: (usize, usize),
    host: &str,
    hbh: u32,
    retransmit: bool,
) {
    let start = out.len();
    out.extend_from_slice(msg.get(..cut.0).unwrap_or(msg));
    out.extend_from_slice(msg.get(cut.1..).unwrap_or_default());
    put_avp(out, avp::ROUTE_RECORD, host.as_bytes());
    finish(out, start);
    set_hbh(&mut out[start..], hbh);
    if retransmit {
        set_retransmit(&mut out[start..]);
    }
}

/// A codec header with these fields.
fn codec_header(cmd: u32, app: u32, flags: u8, hbh: u32, e2e: u32) -> codec::Header {
    let mut c = codec::Header::new(cmd, app, codec::CommandFlags(flags));
    c.hop_by_hop = hbh;
    c.end_to_end = e2e;
    c
}

/// Encodes a codec message into `out`. The agent's own messages are small
/// and bounded, so encoding cannot fail; a failure would leave `out`
/// untouched and is logged.
fn put_message(out: &mut BytesMut, m: &codec::Message) {
    if let Err(e) = m.encode(out) {
        tracing::error!(cause = %e, "cannot encode an agent message");
    }
}

/// Appends an answer the agent generates for `req` (RFC 6733 §6.2, §7.2),
/// built by the codec's [`codec::builder::ErrorAnswer`]: Session-Id first
/// when the request has one, Origin-Host, Origin-Realm, Result-Code,
/// Error-Message, Failed-AVP when given, and the request's Proxy-Info AVPs
/// in order. The E bit is set for 3xxx protocol errors; the P bit is copied.
pub fn put_error_answer(
    out: &mut BytesMut,
    req: &[u8],
    origin: (&str, &str),
    result_code: u32,
    failed_avp: Option<&[u8]>,
    message: &str,
) {
    let h = Head::read(req);
    let h = codec_header(h.cmd, h.app, h.flags, h.hbh, h.e2e);
    let mut a = codec::builder::ErrorAnswer::new(&h, req, result_code, origin.0, origin.1);
    if !message.is_empty() {
        a = a.error_message(message);
    }
    if let Some(f) = failed_avp {
        a = a.failed_avp(Bytes::copy_from_slice(f));
    }
    put_message(out, &a.build());
}

/// The codec's form of the capabilities.
fn codec_caps(caps: &Capabilities) -> codec::builder::Capabilities {
    codec::builder::Capabilities {
        origin_host: caps.origin_host.clone(),
        origin_realm: caps.origin_realm.clone(),
        host_ip_addresses: caps.host_ip_addresses.clone(),
        vendor_id: caps.vendor_id,
        product_name: caps.product_name.clone(),
        auth_application_ids: caps.auth_applications.clone(),
        acct_application_ids: caps.acct_applications.clone(),
        firmware_revision: caps.firmware_revision,
        ..Default::default()
    }
}

/// Appends a CER (request) or CEA (answer with `result_code`) carrying the
/// local capabilities (RFC 6733 §5.3.1, §5.3.2), built by the codec.
pub fn put_capabilities(
    out: &mut BytesMut,
    caps: &Capabilities,
    answer_to: Option<(Head, u32)>,
    hbh: u32,
) {
    let c = codec_caps(caps);
    let m = match answer_to {
        None => codec::builder::cer(&c, hbh, hbh),
        Some((h, rc)) => {
            let req = codec_header(cmd::CER, 0, h.flags, h.hbh, h.e2e);
            codec::builder::cea(&req, rc, &c)
        }
    };
    put_message(out, &m);
}

/// Appends a CEA refusing the CER with header `h` for `error` (RFC 6733
/// §5.3.2, §7.1.5): its Result-Code, an Error-Message naming the defect and
/// the Failed-AVP the error carries.
pub fn put_refused_cea(
    out: &mut BytesMut,
    caps: &Capabilities,
    h: Head,
    error: &crate::peer::capx::ExchangeError,
) {
    use crate::codec::{Avp, AvpData};
    use crate::dictionary::code;
    let req = codec_header(cmd::CER, 0, h.flags, h.hbh, h.e2e);
    let mut m = codec::builder::cea(&req, error.result_code(), &codec_caps(caps));
    m.push(Avp::str(code::ERROR_MESSAGE, &error.to_string()));
    if let Some(f) = error.failed_avp() {
        // the offending AVP as grouped data holds it: padded (§4.1, §4.4)
        let mut padded = BytesMut::from(&f[..]);
        padded.resize(f.len().next_multiple_of(4), 0);
        m.push(Avp::new(
            code::FAILED_AVP,
            None,
            true,
            AvpData::Bytes(padded.freeze()),
        ));
    }
    put_message(out, &m);
}

/// Appends a DWR/DPR (request, `answer_to` None; DPR with `cause`) or
/// DWA/DPA (2001), built by the codec (RFC 6733 §5.4, §5.5).
pub fn put_base(
    out: &mut BytesMut,
    command: u32,
    origin: (&str, &str),
    answer_to: Option<Head>,
    hbh: u32,
    cause: Option<u32>,
) {
    let (host, realm) = origin;
    let m = match (command, answer_to) {
        (cmd::DWR, None) => codec::builder::dwr(host, realm, None, hbh, hbh),
        (cmd::DPR, None) => {
            let cause = i32::try_from(cause.unwrap_or(0)).unwrap_or(0);
            codec::builder::dpr(host, realm, cause, hbh, hbh)
        }
        (_, Some(h)) => {
            let req = codec_header(command, 0, h.flags, h.hbh, h.e2e);
            if command == cmd::DPR {
                codec::builder::dpa(&req, 2001, host, realm)
            } else {
                codec::builder::dwa(&req, 2001, host, realm, None)
            }
        }
        (other, None) => {
            tracing::error!(command = other, "not a base protocol request");
            return;
        }
    };
    put_message(out, &m);
}

/// Reads the capabilities and Result-Code of a CER or CEA.
///
/// # Errors
/// [`WireError`] for malformed AVPs, 5005 DIAMETER_MISSING_AVP when
/// Origin-Host or Origin-Realm is absent.
pub fn read_capabilities(m: &[u8]) -> Result<(Capabilities, Option<u32>), WireError> {
    let mut c = Capabilities::default();
    let mut rc = None;
    let text = |s| String::from_utf8_lossy(slice(m, s)).into_owned();
    for a in avps(m, HEADER_LEN, m.len()) {
        let a = a?;
        if a.vendor.is_some() {
            continue;
        }
        match a.code {
            avp::ORIGIN_HOST => c.origin_host = text(a.data),
            avp::ORIGIN_REALM => c.origin_realm = text(a.data),
            avp::RESULT_CODE => rc = u32_of(m, a.data),
            avp::VENDOR_ID => c.vendor_id = u32_of(m, a.data).unwrap_or(0),
            avp::PRODUCT_NAME => c.product_name = text(a.data),
            avp::FIRMWARE_REVISION => c.firmware_revision = u32_of(m, a.data),
            avp::HOST_IP_ADDRESS => {
                let d = slice(m, a.data);
                match (d.len(), d.first().zip(d.get(1))) {
                    (6, Some((0, 1))) => c
                        .host_ip_addresses
                        .push(IpAddr::from([d[2], d[3], d[4], d[5]])),
                    (18, Some((0, 2))) => {
                        let mut o = [0u8; 16];
                        o.copy_from_slice(&d[2..]);
                        c.host_ip_addresses.push(IpAddr::from(o));
                    }
                    _ => {}
                }
            }
            avp::AUTH_APPLICATION_ID => c.auth_applications.extend(u32_of(m, a.data)),
            avp::ACCT_APPLICATION_ID => c.acct_applications.extend(u32_of(m, a.data)),
            avp::VENDOR_SPECIFIC_APPLICATION_ID => {
                for i in avps(m, a.data.0 as usize, a.data.1 as usize) {
                    let i = i?;
                    match i.code {
                        avp::AUTH_APPLICATION_ID => c.auth_applications.extend(u32_of(m, i.data)),
                        avp::ACCT_APPLICATION_ID => c.acct_applications.extend(u32_of(m, i.data)),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let missing = |code: u32| {
        let mut f = BytesMut::new();
        put_avp(&mut f, code, &[]);
        WireError {
            result_code: 5005,
            failed_avp: Some(f.freeze()),
            framing: false,
            why: "missing avp",
        }
    };
    if c.origin_host.is_empty() {
        return Err(missing(avp::ORIGIN_HOST));
    }
    if c.origin_realm.is_empty() {
        return Err(missing(avp::ORIGIN_REALM));
    }
    Ok((c, rc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_with(avps: &[(u32, &[u8])]) -> BytesMut {
        let mut out = BytesMut::new();
        let s = begin(
            &mut out,
            flags::REQUEST | flags::PROXIABLE,
            16777214,
            16777215,
            7,
            9,
        );
        for (c, d) in avps {
            put_avp(&mut out, *c, d);
        }
        finish(&mut out, s);
        out
    }

    #[test]
    fn framing_needs_whole_messages_and_refuses_bad_headers() {
        let m = request_with(&[(avp::SESSION_ID, b"s;1")]);
        assert_eq!(frame_len(&m[..3]).unwrap(), None);
        assert_eq!(frame_len(&m[..m.len() - 1]).unwrap(), None);
        assert_eq!(frame_len(&m).unwrap(), Some(m.len()));
        let mut bad = m.clone();
        bad[0] = 2;
        assert_eq!(frame_len(&bad).unwrap_err().result_code, 5011);
        let mut bad = m.clone();
        bad[3] = 19;
        let e = frame_len(&bad).unwrap_err();
        assert_eq!((e.result_code, e.framing), (5015, true));
    }

    #[test]
    fn scan_finds_routing_avps() {
        let m = request_with(&[
            (avp::SESSION_ID, b"s;1"),
            (avp::DESTINATION_REALM, b"example.net"),
            (avp::ROUTE_RECORD, b"a.org"),
            (avp::ROUTE_RECORD, b"b.org"),
        ]);
        let s = scan(&m).unwrap();
        assert_eq!(slice(&m, s.destination_realm.unwrap()), b"example.net");
        assert_eq!(s.route_records.len(), 2);
        assert_eq!(slice(&m, s.route_records[1]), b"b.org");
        assert!(s.destination_host.is_none());
    }

    #[test]
    fn bad_avp_length_is_5014_with_failed_avp() {
        let mut m = request_with(&[
            (avp::SESSION_ID, b"s;1"),
            (avp::DESTINATION_REALM, b"x.net"),
        ]);
        // Second AVP (at 20 + 12) claims 200 bytes.
        m[32 + 7] = 200;
        let e = scan(&m).unwrap_err();
        assert_eq!(e.result_code, 5014);
        assert!(!e.framing);
        assert_eq!(
            &e.failed_avp.unwrap()[..4],
            &avp::DESTINATION_REALM.to_be_bytes()
        );
    }

    #[test]
    fn relayed_request_gets_route_record_new_hbh_and_t_flag() {
        let m = request_with(&[(avp::SESSION_ID, b"s;1")]);
        let mut out = BytesMut::new();
        put_relayed_request(&mut out, &m, "agent.example.com", 0xabcd, true);
        assert_eq!(frame_len(&out).unwrap(), Some(out.len()));
        let h = Head::read(&out);
        assert_eq!(h.hbh, 0xabcd);
        assert_eq!(h.e2e, 9);
        assert_ne!(h.flags & flags::RETRANSMIT, 0);
        let s = scan(&out).unwrap();
        assert_eq!(slice(&out, s.route_records[0]), b"agent.example.com");
        // Everything before the appended AVP is byte-identical.
        assert_eq!(&out[20..m.len()], &m[20..]);
    }

    #[test]
    fn error_answer_keeps_session_id_first_and_copies_proxy_info() {
        let mut pi = BytesMut::new();
        put_avp(&mut pi, 280, b"proxy.example.org"); // Proxy-Host
        let m = request_with(&[(avp::SESSION_ID, b"s;1"), (avp::PROXY_INFO, &pi)]);
        let s = scan(&m).unwrap();
        let mut out = BytesMut::new();
        put_error_answer(
            &mut out,
            &m,
            ("a.example.com", "example.com"),
            3002,
            None,
            "no route",
        );
        let h = Head::read(&out);
        assert_eq!(h.flags, flags::PROXIABLE | flags::ERROR);
        assert_eq!((h.hbh, h.e2e, h.cmd, h.app), (7, 9, 16777214, 16777215));
        let a = scan(&out).unwrap();
        assert_eq!(a.result_code, Some(3002));
        assert_eq!(a.proxy_infos.len(), 1);
        let first = avps(&out, HEADER_LEN, out.len()).next().unwrap().unwrap();
        assert_eq!(first.code, avp::SESSION_ID);
        assert_eq!(slice(&out, a.proxy_infos[0]), slice(&m, s.proxy_infos[0]));
    }

    #[test]
    fn capabilities_round_trip() {
        let caps = Capabilities {
            origin_host: "agent.example.com".into(),
            origin_realm: "example.com".into(),
            host_ip_addresses: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
            vendor_id: 0,
            product_name: "doic-agent".into(),
            firmware_revision: Some(100),
            auth_applications: vec![0xffff_ffff],
            acct_applications: vec![3],
        };
        let mut out = BytesMut::new();
        put_capabilities(&mut out, &caps, None, 1);
        let (back, rc) = read_capabilities(&out).unwrap();
        assert_eq!(back, caps);
        assert_eq!(rc, None);
        let mut cea = BytesMut::new();
        put_capabilities(&mut cea, &caps, Some((Head::read(&out), 3010)), 0);
        let (_, rc) = read_capabilities(&cea).unwrap();
        assert_eq!(rc, Some(3010));
        assert_ne!(Head::read(&cea).flags & flags::ERROR, 0);
    }

    #[test]
    fn cer_without_origin_host_is_5005() {
        let m = request_with(&[(avp::ORIGIN_REALM, b"x")]);
        assert_eq!(read_capabilities(&m).unwrap_err().result_code, 5005);
    }
}

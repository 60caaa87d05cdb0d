//! The messages a node writes itself, straight into a connection's output
//! buffer: answers to requests it cannot relay or will not (RFC 6733 §6.2,
//! §7.2 error answers with Failed-AVP, Proxy-Info copied; the answers to
//! throttled requests), CER/CEA (§5.3), DWR/DWA (§5.5) and DPR/DPA (§5.4).
//! The answers to requests are written AVP by AVP ([`put_local_answer`]):
//! under overload they are sent as fast as requests arrive. The others are
//! built by [`super::builder`] and encoded at the end of the buffer.

use bytes::BytesMut;

use super::avp::{AvpFlags, AvpIter, RawAvp, put_avp};
use super::builder::{self, Capabilities};
use super::header::{HEADER_LEN, Header, begin, finish};
use super::message::Message;
use crate::dictionary::{self, FlagRule, cmd, code, result};

/// Encodes a message into `out`. A node's own messages are small and
/// bounded, so encoding cannot fail; a failure would leave `out` untouched
/// and is logged.
pub fn put_message(out: &mut BytesMut, m: &Message) {
    if let Err(e) = m.encode(out) {
        message_not_written(&e);
    }
}

#[cold]
#[inline(never)]
fn message_not_written(e: &super::EncodeError) {
    tracing::error!(cause = %e, "cannot encode an agent message");
}

/// Appends an answer the node generates for `req` (RFC 6733 §6.2, §7.2),
/// as [`put_local_answer`] writes it: Session-Id first when the request has
/// one, Origin-Host, Origin-Realm, Result-Code, Error-Message, Failed-AVP
/// when given, and the request's Proxy-Info AVPs in order. The E bit is
/// set for 3xxx protocol errors; the P bit is copied.
pub fn put_error_answer(
    out: &mut BytesMut,
    req: &[u8],
    origin: (&str, &str),
    result_code: u32,
    failed_avp: Option<&[u8]>,
    message: &str,
) {
    put_local_answer(out, req, origin, Outcome::Result(result_code), |out| {
        if !message.is_empty() {
            put_base_avp(out, code::ERROR_MESSAGE, message.as_bytes());
        }
        if let Some(f) = failed_avp {
            put_checked(out, code::FAILED_AVP, AvpFlags(AvpFlags::MANDATORY), f);
        }
    });
}

/// What an answer the node gives itself reports (RFC 6733 §7.1, §7.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A Result-Code.
    Result(u32),
    /// An Experimental-Result (a vendor's code) and no Result-Code.
    Experimental {
        /// Its Vendor-Id.
        vendor_id: u32,
        /// Its Experimental-Result-Code.
        code: u32,
    },
}

impl Outcome {
    /// The result code, whichever AVP carries it.
    #[must_use]
    pub const fn code(self) -> u32 {
        match self {
            Outcome::Result(c) | Outcome::Experimental { code: c, .. } => c,
        }
    }
}

/// Appends the answer the node itself gives the request `req`, written AVP
/// by AVP into `out` with no message built: the first Session-Id of the
/// request (RFC 6733 §8.8), Origin-Host, Origin-Realm, `outcome`, the
/// encoded AVPs `more` appends, then the request's Proxy-Info AVPs in
/// order (§6.2 point 4). Only the AVPs before a defect in `req` are read:
/// a malformed request is answered too. The E bit is set for a 3xxx
/// protocol error (§7.1.3), the P bit copied, Hop-by-Hop and End-to-End
/// Identifiers kept (§6.2). The same bytes as [`builder::ErrorAnswer`]
/// with those AVPs, encoded.
pub fn put_local_answer(
    out: &mut BytesMut,
    req: &[u8],
    origin: (&str, &str),
    outcome: Outcome,
    more: impl FnOnce(&mut BytesMut),
) {
    let h = Header::read(req);
    let head = builder::answer_header(&h, result::is_protocol_error(outcome.code()));
    let start = begin(
        out,
        head.flags.0,
        h.command_code,
        h.application_id,
        h.hop_by_hop,
        h.end_to_end,
    );
    let body = req.get(HEADER_LEN..).unwrap_or_default();
    let avps = || AvpIter::with_offset(body, HEADER_LEN).map_while(Result::ok);
    if let Some(s) = avps().find(|r| is_base(r, code::SESSION_ID)) {
        put_checked(out, s.code, s.flags, s.data);
    }
    put_base_avp(out, code::ORIGIN_HOST, origin.0.as_bytes());
    put_base_avp(out, code::ORIGIN_REALM, origin.1.as_bytes());
    match outcome {
        Outcome::Result(c) => put_base_avp(out, code::RESULT_CODE, &c.to_be_bytes()),
        Outcome::Experimental { vendor_id, code: c } => {
            // Two Unsigned32 AVPs of 12 bytes each.
            let mut grouped = [0u8; 24];
            let mut at = &mut grouped[..];
            for (child, v) in [
                (code::VENDOR_ID, vendor_id),
                (code::EXPERIMENTAL_RESULT_CODE, c),
            ] {
                let flags = base_flags(child);
                // 12 bytes into the 24 left for them: cannot fail.
                let _ = put_avp(&mut at, child, flags, None, &v.to_be_bytes());
            }
            put_base_avp(out, code::EXPERIMENTAL_RESULT, &grouped);
        }
    }
    more(out);
    for p in avps().filter(|r| is_base(r, code::PROXY_INFO)) {
        put_checked(out, p.code, p.flags, p.data);
    }
    finish(out, start);
}

fn is_base(r: &RawAvp<'_>, code: u32) -> bool {
    r.vendor_id.is_none() && r.code == code
}

/// The flags of a base-protocol AVP the node sends: the M bit as the
/// dictionary says (set for MUST), as [`super::Avp::base`] sets it.
fn base_flags(code: u32) -> AvpFlags {
    let m = dictionary::avp(code, 0).is_some_and(|d| d.m == FlagRule::Must);
    AvpFlags(if m { AvpFlags::MANDATORY } else { 0 })
}

/// Appends base-protocol AVP `code` holding `data`.
fn put_base_avp(out: &mut BytesMut, code: u32, data: &[u8]) {
    put_checked(out, code, base_flags(code), data);
}

/// Appends an AVP without Vendor-ID (so without the V bit); one too long
/// for its length field (a value above 16 MiB, which no answer of the
/// node's carries) is left out and logged.
fn put_checked(out: &mut BytesMut, code: u32, flags: AvpFlags, data: &[u8]) {
    if let Err(e) = put_avp(out, code, flags, None, data) {
        message_not_written(&e);
    }
}

/// Appends a CER (request, `answer_to` None) or a CEA answering the CER
/// with header `answer_to.0` with Result-Code `answer_to.1`, carrying the
/// local capabilities (RFC 6733 §5.3.1, §5.3.2).
pub fn put_capabilities(
    out: &mut BytesMut,
    caps: &Capabilities,
    answer_to: Option<(Header, u32)>,
    hbh: u32,
) {
    let m = match answer_to {
        None => builder::cer(caps, hbh, hbh),
        Some((h, rc)) => builder::cea(&cer_header(&h), rc, caps),
    };
    put_message(out, &m);
}

/// The header of the CER `h` answers are built from: Command Code and
/// Application-ID of the base protocol whatever the received ones say.
fn cer_header(h: &Header) -> Header {
    Header {
        command_code: cmd::CAPABILITIES_EXCHANGE,
        application_id: 0,
        ..*h
    }
}

/// Appends a DWR/DPR (request, `answer_to` None; DPR with `cause`) or
/// DWA/DPA (2001) to the request with header `answer_to` (RFC 6733 §5.4,
/// §5.5).
pub fn put_base(
    out: &mut BytesMut,
    command: u32,
    origin: (&str, &str),
    answer_to: Option<Header>,
    hbh: u32,
    cause: Option<u32>,
) {
    let (host, realm) = origin;
    let m = match (command, answer_to) {
        (cmd::DEVICE_WATCHDOG, None) => builder::dwr(host, realm, None, hbh, hbh),
        (cmd::DISCONNECT_PEER, None) => {
            let cause = i32::try_from(cause.unwrap_or(0)).unwrap_or(0);
            builder::dpr(host, realm, cause, hbh, hbh)
        }
        (_, Some(h)) => {
            let req = Header {
                command_code: command,
                application_id: 0,
                ..h
            };
            if command == cmd::DISCONNECT_PEER {
                builder::dpa(&req, result::SUCCESS, host, realm)
            } else {
                builder::dwa(&req, result::SUCCESS, host, realm, None)
            }
        }
        (other, None) => {
            tracing::error!(command = other, "not a base protocol request");
            return;
        }
    };
    put_message(out, &m);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Avp;
    use crate::codec::header::CommandFlags;
    use crate::codec::relay::Routing;
    use crate::dictionary::code;

    fn request_with(avps: &[(u32, &[u8])]) -> BytesMut {
        let mut out = BytesMut::new();
        let f = CommandFlags::REQUEST | CommandFlags::PROXIABLE;
        let s = begin(&mut out, f, 16_777_214, 16_777_215, 7, 9);
        for (c, d) in avps {
            put_avp(&mut out, *c, AvpFlags(AvpFlags::MANDATORY), None, d).unwrap();
        }
        finish(&mut out, s);
        out
    }

    fn proxy_infos(m: &[u8]) -> Vec<&[u8]> {
        AvpIter::with_offset(&m[HEADER_LEN..], HEADER_LEN)
            .map(Result::unwrap)
            .filter(|a| a.code == code::PROXY_INFO)
            .map(|a| a.raw)
            .collect()
    }

    #[test]
    fn error_answer_keeps_session_id_first_and_copies_proxy_info() {
        let mut pi = BytesMut::new();
        let m = AvpFlags(AvpFlags::MANDATORY);
        put_avp(&mut pi, code::PROXY_HOST, m, None, b"proxy.example.org").unwrap();
        let req = request_with(&[(code::SESSION_ID, b"s;1"), (code::PROXY_INFO, &pi)]);
        let mut out = BytesMut::new();
        put_error_answer(
            &mut out,
            &req,
            ("a.example.com", "example.com"),
            3002,
            None,
            "no route",
        );
        let h = Header::read(&out);
        assert_eq!(
            h.flags,
            CommandFlags(CommandFlags::PROXIABLE | CommandFlags::ERROR)
        );
        let ids = (h.hop_by_hop, h.end_to_end, h.command_code, h.application_id);
        assert_eq!(ids, (7, 9, 16_777_214, 16_777_215));
        let a = Routing::scan_answer(&out).unwrap();
        assert_eq!(a.result_code(), Some(3002));
        let first = AvpIter::with_offset(&out[HEADER_LEN..], HEADER_LEN).next();
        assert_eq!(first.unwrap().unwrap().code, code::SESSION_ID);
        assert_eq!(proxy_infos(&out), proxy_infos(&req));
        assert_eq!(proxy_infos(&out).len(), 1);
    }

    /// The answer [`builder::ErrorAnswer`] builds for `req`, with `outcome`
    /// and the AVPs `more` (a throttle answer's DOIC AVPs, say), encoded.
    fn built(req: &[u8], outcome: Outcome, more: &[Avp]) -> BytesMut {
        let h = Header::read(req);
        let o = ("agent.example.com", "example.com");
        let mut a = builder::ErrorAnswer::new(&h, req, outcome.code(), o.0, o.1);
        if let Outcome::Experimental { vendor_id, code: c } = outcome {
            a = a.experimental_result(vendor_id, c);
        }
        for m in more {
            a = a.avp(m.clone());
        }
        let mut m = a.build();
        if matches!(outcome, Outcome::Experimental { .. }) {
            m.avps
                .retain(|x| !(x.vendor_id.is_none() && x.code == code::RESULT_CODE));
        }
        let mut out = BytesMut::new();
        put_message(&mut out, &m);
        out
    }

    fn written(req: &[u8], outcome: Outcome, more: &[Avp]) -> BytesMut {
        let mut out = BytesMut::from(&b"queued"[..]);
        put_local_answer(
            &mut out,
            req,
            ("agent.example.com", "example.com"),
            outcome,
            |o| {
                for m in more {
                    m.encode(o).unwrap();
                }
            },
        );
        assert_eq!(&out[..6], b"queued", "appended after what the buffer held");
        out.split_off(6)
    }

    #[test]
    fn a_local_answer_is_the_error_answer_byte_for_byte() {
        let mut pi = BytesMut::new();
        let m = AvpFlags(AvpFlags::MANDATORY);
        put_avp(&mut pi, code::PROXY_HOST, m, None, b"proxy.example.org").unwrap();
        put_avp(&mut pi, code::PROXY_STATE, m, None, b"st").unwrap();
        // Session-Id not first, two Proxy-Infos around other AVPs, a value
        // that needs padding.
        let req = request_with(&[
            (code::ORIGIN_HOST, b"client.example.org"),
            (code::PROXY_INFO, &pi),
            (code::SESSION_ID, b"client.example.org;1;2"),
            (code::DESTINATION_REALM, b"example.net"),
            (code::PROXY_INFO, &pi[..28]),
            (code::SESSION_ID, b"a second one"),
        ]);
        let olr = crate::codec::OcOlr {
            sequence_number: 7,
            report_type: crate::codec::ReportType::Host,
            reduction_percentage: Some(40),
            validity_duration: Some(30),
            source_id: Some("agent.example.com".into()),
            maximum_rate: None,
        };
        let more = [Avp::u32(code::ORIGIN_STATE_ID, 5), olr.to_avp()];
        for outcome in [
            Outcome::Result(3004),
            Outcome::Result(5012),
            Outcome::Experimental {
                vendor_id: 10_415,
                code: 5198,
            },
        ] {
            for more in [&more[..], &[]] {
                assert_eq!(
                    written(&req, outcome, more),
                    built(&req, outcome, more),
                    "{outcome:?}"
                );
            }
        }
        let a = written(&req, Outcome::Result(3004), &more);
        let h = Header::read(&a);
        assert_eq!(
            h.flags,
            CommandFlags(CommandFlags::PROXIABLE | CommandFlags::ERROR)
        );
        assert_eq!((h.hop_by_hop, h.end_to_end), (7, 9));
        assert_eq!(h.length as usize, a.len());
        assert_eq!(proxy_infos(&a), proxy_infos(&req));
        let e = written(
            &req,
            Outcome::Experimental {
                vendor_id: 10_415,
                code: 5198,
            },
            &[],
        );
        assert!(
            !Header::read(&e).flags.is_error(),
            "5198 is not a protocol error"
        );
        assert_eq!(Routing::scan_answer(&e).unwrap().result_code(), None);
    }

    #[test]
    fn a_local_answer_to_a_malformed_request_copies_what_precedes_the_defect() {
        let mut pi = BytesMut::new();
        let m = AvpFlags(AvpFlags::MANDATORY);
        put_avp(&mut pi, code::PROXY_HOST, m, None, b"proxy.example.org").unwrap();
        let mut req = request_with(&[
            (code::PROXY_INFO, &pi),
            (code::SESSION_ID, b"s;1"),
            (code::ORIGIN_HOST, b"c"),
            (code::PROXY_INFO, &pi),
        ]);
        // The Origin-Host AVP claims more than the message holds.
        let at = HEADER_LEN + pi.len() + 8 + 12;
        req[at + 5..at + 8].copy_from_slice(&[0, 0x7f, 0xff]);
        let a = written(&req, Outcome::Result(5014), &[]);
        assert_eq!(a, built(&req, Outcome::Result(5014), &[]));
        assert_eq!(
            proxy_infos(&a).len(),
            1,
            "the Proxy-Info after the defect is not read"
        );
    }

    #[test]
    fn an_error_answer_with_a_message_and_a_failed_avp_is_the_built_one() {
        let req = request_with(&[(code::SESSION_ID, b"s;9"), (code::DESTINATION_REALM, b"x")]);
        let mut failed = BytesMut::new();
        put_avp(
            &mut failed,
            code::DESTINATION_REALM,
            AvpFlags(AvpFlags::MANDATORY),
            None,
            b"x",
        )
        .unwrap();
        let mut out = BytesMut::new();
        put_error_answer(
            &mut out,
            &req,
            ("agent.example.com", "example.com"),
            3003,
            Some(&failed),
            "no realm x",
        );
        let h = Header::read(&req);
        let b = builder::ErrorAnswer::new(&h, &req, 3003, "agent.example.com", "example.com")
            .error_message("no realm x")
            .failed_avp(bytes::Bytes::copy_from_slice(&failed))
            .build();
        let mut expected = BytesMut::new();
        put_message(&mut expected, &b);
        assert_eq!(out, expected);
    }

    #[test]
    fn a_5011_answer_is_version_1_whatever_the_request_said() {
        let mut req = request_with(&[(code::SESSION_ID, b"s;1")]);
        req[0] = 2;
        let mut out = BytesMut::new();
        put_error_answer(&mut out, &req, ("a.example", "example"), 5011, None, "");
        assert_eq!(Header::read(&out).version, 1);
        assert_eq!(
            Routing::scan_answer(&out).unwrap().result_code(),
            Some(5011)
        );
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
            auth_application_ids: vec![0xffff_ffff],
            acct_application_ids: vec![3],
            ..Capabilities::default()
        };
        let mut out = BytesMut::new();
        put_capabilities(&mut out, &caps, None, 1);
        let (back, rc) = Capabilities::read(&out).unwrap();
        assert_eq!(back, caps);
        assert_eq!(rc, None);
        let mut cea = BytesMut::new();
        put_capabilities(&mut cea, &caps, Some((Header::read(&out), 3010)), 0);
        let (_, rc) = Capabilities::read(&cea).unwrap();
        assert_eq!(rc, Some(3010));
        assert!(Header::read(&cea).flags.is_error());
    }

    #[test]
    fn cer_without_origin_host_is_5005() {
        let m = request_with(&[(code::ORIGIN_REALM, b"x")]);
        assert_eq!(Capabilities::read(&m).unwrap_err().result_code(), 5005);
    }

    #[test]
    fn base_answers_copy_the_ids_with_2001() {
        let mut dwr = BytesMut::new();
        put_base(&mut dwr, cmd::DEVICE_WATCHDOG, ("a", "b"), None, 41, None);
        let h = Header::read(&dwr);
        assert!(h.is_request());
        let mut dwa = BytesMut::new();
        put_base(&mut dwa, cmd::DEVICE_WATCHDOG, ("c", "d"), Some(h), 0, None);
        let a = Routing::scan_answer(&dwa).unwrap();
        assert_eq!(a.result_code(), Some(result::SUCCESS));
        assert_eq!(a.header.hop_by_hop, 41);
        assert!(!a.header.is_request());
    }
}

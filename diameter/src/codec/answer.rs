//! The messages a node writes itself, straight into a connection's output
//! buffer: answers to requests it cannot relay (RFC 6733 §6.2, §7.2 error
//! answers with Failed-AVP, Proxy-Info copied), CER/CEA (§5.3), DWR/DWA
//! (§5.5) and DPR/DPA (§5.4). Each is built by [`super::builder`] and
//! encoded at the end of the buffer.

use bytes::{Bytes, BytesMut};

use super::builder::{self, Capabilities, ErrorAnswer};
use super::header::Header;
use super::message::Message;
use crate::dictionary::{cmd, result};

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
/// built by [`ErrorAnswer`]: Session-Id first when the request has one,
/// Origin-Host, Origin-Realm, Result-Code, Error-Message, Failed-AVP when
/// given, and the request's Proxy-Info AVPs in order. The E bit is set for
/// 3xxx protocol errors; the P bit is copied.
pub fn put_error_answer(
    out: &mut BytesMut,
    req: &[u8],
    origin: (&str, &str),
    result_code: u32,
    failed_avp: Option<&[u8]>,
    message: &str,
) {
    let h = Header::read(req);
    let mut a = ErrorAnswer::new(&h, req, result_code, origin.0, origin.1);
    if !message.is_empty() {
        a = a.error_message(message);
    }
    if let Some(f) = failed_avp {
        a = a.failed_avp(Bytes::copy_from_slice(f));
    }
    put_message(out, &a.build());
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
    use crate::codec::avp::{AvpFlags, AvpIter, put_avp};
    use crate::codec::header::{CommandFlags, HEADER_LEN, begin, finish};
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

//! Builders for the base protocol messages: CER/CEA (RFC 6733 §5.3),
//! DPR/DPA (§5.4), DWR/DWA (§5.5), and answers to any request (§6.2) including
//! protocol-error answers (§7.2: E bit, Result-Code, Failed-AVP,
//! Error-Message, Experimental-Result).

use std::net::IpAddr;

use bytes::Bytes;

use super::avp::{Avp, AvpData, AvpIter};
use super::error::DecodeError;
use super::header::{CommandFlags, HEADER_LEN, Header, VERSION};
use super::message::Message;
use crate::dictionary::{app, cmd, code, result};

/// What a node says about itself in CER/CEA (RFC 6733 §5.3.1-5.3.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Origin-Host.
    pub origin_host: String,
    /// Origin-Realm.
    pub origin_realm: String,
    /// Host-IP-Address (one or more).
    pub host_ip_addresses: Vec<IpAddr>,
    /// Vendor-Id.
    pub vendor_id: u32,
    /// Product-Name.
    pub product_name: String,
    /// Origin-State-Id.
    pub origin_state_id: Option<u32>,
    /// Supported-Vendor-Id values.
    pub supported_vendor_ids: Vec<u32>,
    /// Auth-Application-Id values.
    pub auth_application_ids: Vec<u32>,
    /// Acct-Application-Id values.
    pub acct_application_ids: Vec<u32>,
    /// Vendor-Specific-Application-Id values: (Vendor-Id, Auth-Application-Id).
    pub vendor_specific_auth_apps: Vec<(u32, u32)>,
    /// Inband-Security-Id values (0 = NO_INBAND_SECURITY).
    pub inband_security_ids: Vec<u32>,
    /// Firmware-Revision.
    pub firmware_revision: Option<u32>,
}

impl Capabilities {
    /// Reads the capabilities and the Result-Code of a CER or CEA: the
    /// applications inside Vendor-Specific-Application-Id join the plain
    /// ones; AVPs the exchange does not use are skipped. It checks AVP
    /// lengths and that Origin-Host and Origin-Realm are there and not
    /// empty, nothing more (the grammar is [`super::grammar::check`]'s).
    ///
    /// # Errors
    /// 5014 for a malformed AVP, 5005 DIAMETER_MISSING_AVP (Failed-AVP an
    /// example of it) when Origin-Host or Origin-Realm is absent or empty.
    pub fn read(m: &[u8]) -> Result<(Capabilities, Option<u32>), DecodeError> {
        let mut c = Capabilities::default();
        let mut rc = None;
        let text = |d: &[u8]| String::from_utf8_lossy(d).into_owned();
        let u32_of = |d: &[u8]| d.try_into().ok().map(u32::from_be_bytes);
        for a in AvpIter::with_offset(m.get(HEADER_LEN..).unwrap_or_default(), HEADER_LEN) {
            let a = a?;
            if a.vendor_id.is_some() {
                continue;
            }
            match a.code {
                code::ORIGIN_HOST => c.origin_host = text(a.data),
                code::ORIGIN_REALM => c.origin_realm = text(a.data),
                code::RESULT_CODE => rc = u32_of(a.data),
                code::VENDOR_ID => c.vendor_id = u32_of(a.data).unwrap_or(0),
                code::PRODUCT_NAME => c.product_name = text(a.data),
                code::FIRMWARE_REVISION => c.firmware_revision = u32_of(a.data),
                code::HOST_IP_ADDRESS => c.host_ip_addresses.extend(address(a.data)),
                code::AUTH_APPLICATION_ID => c.auth_application_ids.extend(u32_of(a.data)),
                code::ACCT_APPLICATION_ID => c.acct_application_ids.extend(u32_of(a.data)),
                code::VENDOR_SPECIFIC_APPLICATION_ID => {
                    for i in a.children() {
                        let i = i?;
                        match i.code {
                            code::AUTH_APPLICATION_ID => {
                                c.auth_application_ids.extend(u32_of(i.data));
                            }
                            code::ACCT_APPLICATION_ID => {
                                c.acct_application_ids.extend(u32_of(i.data));
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if c.origin_host.is_empty() {
            return Err(missing(code::ORIGIN_HOST));
        }
        if c.origin_realm.is_empty() {
            return Err(missing(code::ORIGIN_REALM));
        }
        Ok((c, rc))
    }

    fn push_avps(&self, m: &mut Message) {
        m.push(Avp::str(code::ORIGIN_HOST, &self.origin_host));
        m.push(Avp::str(code::ORIGIN_REALM, &self.origin_realm));
        for ip in &self.host_ip_addresses {
            m.push(Avp::address(code::HOST_IP_ADDRESS, *ip));
        }
        m.push(Avp::u32(code::VENDOR_ID, self.vendor_id));
        m.push(Avp::str(code::PRODUCT_NAME, &self.product_name));
        if let Some(s) = self.origin_state_id {
            m.push(Avp::u32(code::ORIGIN_STATE_ID, s));
        }
        for v in &self.supported_vendor_ids {
            m.push(Avp::u32(code::SUPPORTED_VENDOR_ID, *v));
        }
        for a in &self.auth_application_ids {
            m.push(Avp::u32(code::AUTH_APPLICATION_ID, *a));
        }
        for i in &self.inband_security_ids {
            m.push(Avp::u32(code::INBAND_SECURITY_ID, *i));
        }
        for a in &self.acct_application_ids {
            m.push(Avp::u32(code::ACCT_APPLICATION_ID, *a));
        }
        for (v, a) in &self.vendor_specific_auth_apps {
            m.push(Avp::grouped(
                code::VENDOR_SPECIFIC_APPLICATION_ID,
                vec![
                    Avp::u32(code::VENDOR_ID, *v),
                    Avp::u32(code::AUTH_APPLICATION_ID, *a),
                ],
            ));
        }
        if let Some(f) = self.firmware_revision {
            m.push(Avp::u32(code::FIRMWARE_REVISION, f));
        }
    }
}

/// A Host-IP-Address value (RFC 6733 §4.3.1 Address: family 1 IPv4, 2
/// IPv6); other families are skipped.
fn address(d: &[u8]) -> Option<IpAddr> {
    match (d.len(), d.first().zip(d.get(1))) {
        (6, Some((0, 1))) => Some(IpAddr::from([d[2], d[3], d[4], d[5]])),
        (18, Some((0, 2))) => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&d[2..]);
            Some(IpAddr::from(o))
        }
        _ => None,
    }
}

/// 5005 for an AVP the capabilities exchange needs (RFC 6733 §7.5:
/// Failed-AVP holds an example of it, with an empty value).
fn missing(code: u32) -> DecodeError {
    DecodeError::MissingAvp {
        code,
        vendor_id: None,
        name: crate::dictionary::avp(code, 0).map_or("AVP", |d| d.name),
        context: "capabilities exchange",
        offset: 0,
        failed_avp: super::avp::empty_avp(code),
    }
}

/// Capabilities-Exchange-Request (RFC 6733 §5.3.1).
pub fn cer(caps: &Capabilities, hop_by_hop: u32, end_to_end: u32) -> Message {
    let mut m = Message::request(cmd::CAPABILITIES_EXCHANGE, app::COMMON, false)
        .with_ids(hop_by_hop, end_to_end);
    caps.push_avps(&mut m);
    m
}

/// Capabilities-Exchange-Answer (RFC 6733 §5.3.2) to `request`.
pub fn cea(request: &Header, result_code: u32, caps: &Capabilities) -> Message {
    let mut m = Message {
        header: answer_header(request, result::is_protocol_error(result_code)),
        avps: Vec::new(),
    };
    m.push(Avp::u32(code::RESULT_CODE, result_code));
    caps.push_avps(&mut m);
    m
}

/// Device-Watchdog-Request (RFC 6733 §5.5.1).
pub fn dwr(
    origin_host: &str,
    origin_realm: &str,
    origin_state_id: Option<u32>,
    hop_by_hop: u32,
    end_to_end: u32,
) -> Message {
    let mut m = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, false)
        .with_ids(hop_by_hop, end_to_end)
        .with(Avp::str(code::ORIGIN_HOST, origin_host))
        .with(Avp::str(code::ORIGIN_REALM, origin_realm));
    if let Some(s) = origin_state_id {
        m.push(Avp::u32(code::ORIGIN_STATE_ID, s));
    }
    m
}

/// Device-Watchdog-Answer (RFC 6733 §5.5.2) to `request`.
pub fn dwa(
    request: &Header,
    result_code: u32,
    origin_host: &str,
    origin_realm: &str,
    origin_state_id: Option<u32>,
) -> Message {
    let mut m = Message {
        header: answer_header(request, result::is_protocol_error(result_code)),
        avps: Vec::new(),
    }
    .with(Avp::u32(code::RESULT_CODE, result_code))
    .with(Avp::str(code::ORIGIN_HOST, origin_host))
    .with(Avp::str(code::ORIGIN_REALM, origin_realm));
    if let Some(s) = origin_state_id {
        m.push(Avp::u32(code::ORIGIN_STATE_ID, s));
    }
    m
}

/// Disconnect-Peer-Request (RFC 6733 §5.4.1) with a Disconnect-Cause
/// (0 REBOOTING, 1 BUSY, 2 DO_NOT_WANT_TO_TALK_TO_YOU).
pub fn dpr(
    origin_host: &str,
    origin_realm: &str,
    disconnect_cause: i32,
    hop_by_hop: u32,
    end_to_end: u32,
) -> Message {
    Message::request(cmd::DISCONNECT_PEER, app::COMMON, false)
        .with_ids(hop_by_hop, end_to_end)
        .with(Avp::str(code::ORIGIN_HOST, origin_host))
        .with(Avp::str(code::ORIGIN_REALM, origin_realm))
        .with(Avp::i32(code::DISCONNECT_CAUSE, disconnect_cause))
}

/// Disconnect-Peer-Answer (RFC 6733 §5.4.2) to `request`.
pub fn dpa(request: &Header, result_code: u32, origin_host: &str, origin_realm: &str) -> Message {
    Message {
        header: answer_header(request, result::is_protocol_error(result_code)),
        avps: Vec::new(),
    }
    .with(Avp::u32(code::RESULT_CODE, result_code))
    .with(Avp::str(code::ORIGIN_HOST, origin_host))
    .with(Avp::str(code::ORIGIN_REALM, origin_realm))
}

/// The header of an answer to `request` (RFC 6733 §6.2): same Command Code,
/// Application-ID, Hop-by-Hop and End-to-End identifiers; R and T cleared, P
/// copied; E set when `error` (a 3xxx protocol error, §7.1.3). The version
/// is 1 whatever the request's (a 5011 answer to a version it does not
/// speak).
pub fn answer_header(request: &Header, error: bool) -> Header {
    let flags =
        CommandFlags(request.flags.0 & CommandFlags::PROXIABLE).with(CommandFlags::ERROR, error);
    Header {
        version: VERSION,
        flags,
        length: HEADER_LEN as u32,
        ..*request
    }
}

/// An answer to `request` with its Session-Id copied first (RFC 6733 §6.2,
/// §8.8), then Result-Code, Origin-Host and Origin-Realm; the E bit is set
/// for a protocol error. Proxy-Info AVPs of the request are copied at the
/// end, in order (§6.2 point 4). Add more AVPs with [`ErrorAnswer`] or
/// [`Message::push`] before the Proxy-Info ones if order matters to you.
pub fn answer(
    request: &Message,
    result_code: u32,
    origin_host: &str,
    origin_realm: &str,
) -> Message {
    let mut m = Message {
        header: answer_header(&request.header, result::is_protocol_error(result_code)),
        avps: Vec::new(),
    };
    if let Some(s) = request.find(code::SESSION_ID) {
        m.push(s.clone());
    }
    m.push(Avp::u32(code::RESULT_CODE, result_code));
    m.push(Avp::str(code::ORIGIN_HOST, origin_host));
    m.push(Avp::str(code::ORIGIN_REALM, origin_realm));
    for p in request.find_all(code::PROXY_INFO) {
        m.push(p.clone());
    }
    m
}

/// An answer built from the raw bytes of a request that may not decode
/// (RFC 6733 §7.2 error answer): every request gets one answer, even a
/// malformed one. The Session-Id and Proxy-Info AVPs are salvaged from the
/// top-level AVPs that precede the defect.
#[derive(Clone, Debug)]
pub struct ErrorAnswer {
    msg: Message,
    proxy_infos: Vec<Avp>,
}

impl ErrorAnswer {
    /// Starts an answer to the request whose header is `request` and whose
    /// bytes (as far as readable) are `raw`.
    pub fn new(
        request: &Header,
        raw: &[u8],
        result_code: u32,
        origin_host: &str,
        origin_realm: &str,
    ) -> ErrorAnswer {
        let mut msg = Message {
            header: answer_header(request, result::is_protocol_error(result_code)),
            avps: Vec::new(),
        };
        let mut proxy_infos = Vec::new();
        let mut session = None;
        if let Some(body) = raw.get(HEADER_LEN..) {
            for r in AvpIter::with_offset(body, HEADER_LEN) {
                let Ok(r) = r else { break };
                if r.vendor_id.is_none() && r.code == code::SESSION_ID && session.is_none() {
                    session = Some(Avp::from_raw(&r));
                } else if r.vendor_id.is_none() && r.code == code::PROXY_INFO {
                    proxy_infos.push(Avp::from_raw(&r));
                }
            }
        }
        if let Some(s) = session {
            msg.push(s);
        }
        msg.push(Avp::str(code::ORIGIN_HOST, origin_host));
        msg.push(Avp::str(code::ORIGIN_REALM, origin_realm));
        msg.push(Avp::u32(code::RESULT_CODE, result_code));
        ErrorAnswer { msg, proxy_infos }
    }

    /// Starts the answer for a decode error of the request `raw`: its
    /// Result-Code, and the Failed-AVP the error carries.
    pub fn for_decode_error(
        request: &Header,
        raw: &[u8],
        err: &super::DecodeError,
        origin_host: &str,
        origin_realm: &str,
    ) -> ErrorAnswer {
        let a = ErrorAnswer::new(request, raw, err.result_code(), origin_host, origin_realm);
        match err.failed_avp() {
            Some(f) => a.failed_avp(f.clone()),
            None => a,
        }
    }

    /// Adds an Error-Message (RFC 6733 §7.3).
    #[must_use]
    pub fn error_message(mut self, text: &str) -> ErrorAnswer {
        self.msg.push(Avp::str(code::ERROR_MESSAGE, text));
        self
    }

    /// Adds an Error-Reporting-Host (RFC 6733 §7.4).
    #[must_use]
    pub fn error_reporting_host(mut self, host: &str) -> ErrorAnswer {
        self.msg.push(Avp::str(code::ERROR_REPORTING_HOST, host));
        self
    }

    /// Adds a Failed-AVP (RFC 6733 §7.5) holding `encoded`, one or more
    /// encoded AVPs.
    #[must_use]
    pub fn failed_avp(mut self, encoded: Bytes) -> ErrorAnswer {
        self.msg.push(Avp::new(
            code::FAILED_AVP,
            None,
            true,
            AvpData::Bytes(encoded),
        ));
        self
    }

    /// Adds an Experimental-Result (RFC 6733 §7.6) with a vendor's code, e.g.
    /// 5198 DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY.
    #[must_use]
    pub fn experimental_result(mut self, vendor_id: u32, result_code: u32) -> ErrorAnswer {
        self.msg.push(experimental_result(vendor_id, result_code));
        self
    }

    /// Adds any AVP.
    #[must_use]
    pub fn avp(mut self, avp: Avp) -> ErrorAnswer {
        self.msg.push(avp);
        self
    }

    /// The answer, with the request's Proxy-Info AVPs last.
    pub fn build(mut self) -> Message {
        self.msg.avps.append(&mut self.proxy_infos);
        self.msg
    }
}

/// An Experimental-Result AVP (RFC 6733 §7.6): Vendor-Id and
/// Experimental-Result-Code.
pub fn experimental_result(vendor_id: u32, result_code: u32) -> Avp {
    Avp::grouped(
        code::EXPERIMENTAL_RESULT,
        vec![
            Avp::u32(code::VENDOR_ID, vendor_id),
            Avp::u32(code::EXPERIMENTAL_RESULT_CODE, result_code),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Message;

    fn caps() -> Capabilities {
        Capabilities {
            origin_host: "agent.example.net".into(),
            origin_realm: "example.net".into(),
            host_ip_addresses: vec!["127.0.0.1".parse().unwrap()],
            vendor_id: 0,
            product_name: "doic-agent".into(),
            origin_state_id: Some(7),
            auth_application_ids: vec![app::RELAY],
            ..Capabilities::default()
        }
    }

    #[test]
    fn cer_and_cea_round_trip() {
        let c = cer(&caps(), 11, 22);
        let b = c.to_bytes().unwrap().freeze();
        let d = Message::decode(b).unwrap();
        assert!(d.is_request());
        assert_eq!(d.header.command_code, 257);
        assert_eq!(d.header.hop_by_hop, 11);
        let a = cea(&d.header, result::SUCCESS, &caps());
        assert!(!a.header.flags.is_request());
        assert_eq!(a.header.end_to_end, 22);
        assert_eq!(a.result_code(), Some(2001));
        let a = Message::decode(a.to_bytes().unwrap().freeze()).unwrap();
        assert_eq!(a.origin_host(), Some("agent.example.net"));
    }

    #[test]
    fn answers_copy_ids_and_p_and_set_e_for_protocol_errors() {
        let mut req = Message::request(cmd::FD_TEST, app::FD_TEST, true)
            .with_ids(5, 6)
            .with(Avp::str(code::SESSION_ID, "s;1"))
            .with(Avp::grouped(
                code::PROXY_INFO,
                vec![
                    Avp::str(code::PROXY_HOST, "p.example"),
                    Avp::octets(code::PROXY_STATE, &b"x"[..]),
                ],
            ));
        req.header.flags = req.header.flags.with(CommandFlags::RETRANSMIT, true);
        let ok = answer(&req, result::SUCCESS, "s.example", "example");
        assert_eq!(ok.header.flags, CommandFlags(CommandFlags::PROXIABLE));
        assert_eq!((ok.header.hop_by_hop, ok.header.end_to_end), (5, 6));
        assert_eq!(ok.avps[0].as_str(), Some("s;1"));
        assert_eq!(ok.avps.last().unwrap().code, code::PROXY_INFO);
        let busy = answer(&req, result::TOO_BUSY, "s.example", "example");
        assert!(busy.header.flags.is_error());
        let raw = req.to_bytes().unwrap();
        let e = ErrorAnswer::new(&req.header, &raw, result::UNABLE_TO_COMPLY, "a", "b")
            .experimental_result(10415, result::OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY)
            .error_message("throttled")
            .build();
        assert!(!e.header.flags.is_error());
        assert_eq!(e.session_id(), Some("s;1"));
        assert_eq!(e.avps.last().unwrap().code, code::PROXY_INFO);
        let er = e
            .find(code::EXPERIMENTAL_RESULT)
            .unwrap()
            .children()
            .unwrap();
        assert_eq!(er[1].as_u32(), Some(5198));
        assert!(Message::decode(e.to_bytes().unwrap().freeze()).is_ok());
    }

    #[test]
    fn watchdog_and_disconnect() {
        let w = dwr("a.example", "example", Some(1), 1, 2);
        assert_eq!(w.header.command_code, 280);
        let wa = dwa(&w.header, 2001, "b.example", "example", None);
        assert_eq!(wa.result_code(), Some(2001));
        let d = dpr("a.example", "example", 2, 3, 4);
        assert_eq!(d.find(code::DISCONNECT_CAUSE).unwrap().as_u32(), Some(2));
        let da = dpa(&d.header, 2001, "b.example", "example");
        assert_eq!(da.header.command_code, 282);
        assert!(Message::decode(da.to_bytes().unwrap().freeze()).is_ok());
    }
}

//! RFC 6733 §5.3 capabilities exchange (CER/CEA): what the agent advertises
//! and how it judges what a peer advertises.
//!
//! A CER or CEA is read strictly ([`read_exchange`]): the command grammar of
//! §5.3.1/§5.3.2 as `doic-agent decode --check` applies it
//! ([`crate::codec::grammar::check`]: exactly one Origin-Host, one
//! Origin-Realm, one Vendor-Id, one Product-Name, at least one
//! Host-IP-Address; 5009 DIAMETER_AVP_OCCURS_TOO_MANY_TIMES with the first
//! extra occurrence in Failed-AVP, 5005 DIAMETER_MISSING_AVP with an example
//! of the missing AVP, §7.1.5), then the AVPs the exchange uses. §5.3: a
//! node that cannot accept the CER answers it with the reason and closes
//! the transport connection; several Origin-Host AVPs never pick an
//! identity.

use bytes::{Bytes, BytesMut};

use crate::codec::answer::put_message;
use crate::codec::builder::{Capabilities, cea};
use crate::codec::{Avp, AvpData, CheckOptions, DecodeError, Header};
use crate::dictionary::app::RELAY as RELAY_APPLICATION_ID;
use crate::dictionary::code;
use crate::dictionary::result::{NO_COMMON_APPLICATION, SUCCESS, UNKNOWN_PEER};

/// What the exchange judges in the capabilities of either side.
impl Capabilities {
    /// True when the node advertises the Relay application (0xffffffff).
    #[must_use]
    pub fn is_relay(&self) -> bool {
        self.auth_application_ids.contains(&RELAY_APPLICATION_ID)
            || self.acct_application_ids.contains(&RELAY_APPLICATION_ID)
    }

    /// The application ids both sides support. RFC 6733 §5.3: a node
    /// advertising Relay has common applications with every node, so the
    /// other side's applications are returned then.
    #[must_use]
    pub fn common_applications(&self, other: &Capabilities) -> Vec<u32> {
        let mine: Vec<u32> = self.all_applications().collect();
        let theirs: Vec<u32> = other.all_applications().collect();
        if self.is_relay() {
            return theirs;
        }
        if other.is_relay() {
            return mine;
        }
        mine.into_iter().filter(|a| theirs.contains(a)).collect()
    }

    fn all_applications(&self) -> impl Iterator<Item = u32> + '_ {
        self.auth_application_ids
            .iter()
            .chain(&self.acct_application_ids)
            .copied()
    }
}

/// The Firmware-Revision of this build: major * 10000 + minor * 100 + patch.
#[must_use]
pub fn firmware_revision() -> u32 {
    let v = |s: &str| s.parse::<u32>().unwrap_or(0);
    v(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + v(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + v(env!("CARGO_PKG_VERSION_PATCH"))
}

/// Why a received CER or CEA cannot be used (RFC 6733 §5.3.1-5.3.2,
/// §7.1.5): the Result-Code of the CEA the agent answers a CER with, and
/// its Failed-AVP and Error-Message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The message breaks the strict decode or its command grammar.
    #[error("{0}")]
    Grammar(#[from] DecodeError),
    /// An AVP the exchange uses is unusable (e.g. an empty Origin-Host).
    #[error("{why}")]
    Content {
        /// The Result-Code for the answer.
        result_code: u32,
        /// Failed-AVP content (one encoded AVP), where §7.5 asks for one.
        failed_avp: Option<Bytes>,
        /// What is wrong.
        why: &'static str,
    },
}

impl ExchangeError {
    /// The Result-Code of the CEA that refuses the CER.
    #[must_use]
    pub fn result_code(&self) -> u32 {
        match self {
            ExchangeError::Grammar(e) => e.result_code(),
            ExchangeError::Content { result_code, .. } => *result_code,
        }
    }

    /// The Failed-AVP content of that CEA, if any.
    #[must_use]
    pub fn failed_avp(&self) -> Option<&Bytes> {
        match self {
            ExchangeError::Grammar(e) => e.failed_avp(),
            ExchangeError::Content { failed_avp, .. } => failed_avp.as_ref(),
        }
    }
}

/// Reads a CER or CEA strictly: the capabilities and, for a CEA, its
/// Result-Code.
///
/// # Errors
/// [`ExchangeError::Grammar`] for the first defect `decode --check` finds
/// (5005, 5009, 5001, 3009, 5014, ...), [`ExchangeError::Content`] when an
/// AVP the exchange uses is unusable.
pub fn read_exchange(msg: &[u8]) -> Result<(Capabilities, Option<u32>), ExchangeError> {
    crate::codec::grammar::check(msg, CheckOptions::default())?;
    Capabilities::read(msg).map_err(|e| ExchangeError::Content {
        result_code: e.result_code(),
        failed_avp: e.failed_avp().cloned(),
        why: match e {
            DecodeError::MissingAvp { .. } => "missing avp",
            _ => "invalid avp length",
        },
    })
}

/// Appends a CEA refusing the CER with header `h` for `error` (RFC 6733
/// §5.3.2, §7.1.5): its Result-Code, an Error-Message naming the defect and
/// the Failed-AVP the error carries.
pub fn put_refused_cea(out: &mut BytesMut, caps: &Capabilities, h: &Header, error: &ExchangeError) {
    let req = Header {
        command_code: crate::dictionary::cmd::CAPABILITIES_EXCHANGE,
        application_id: 0,
        ..*h
    };
    let mut m = cea(&req, error.result_code(), caps);
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

/// The verdict on a received CER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CerVerdict {
    /// Accept: answer CEA 2001; the common applications.
    Accept(Vec<u32>),
    /// Refuse with this Result-Code in the CEA, then close.
    Refuse(u32),
}

/// Judges a CER (RFC 6733 §5.3): `known` says whether the peer's
/// Origin-Host is in the peer table or matches an accept pattern.
#[must_use]
pub fn judge_cer(local: &Capabilities, remote: &Capabilities, known: bool) -> CerVerdict {
    if !known {
        return CerVerdict::Refuse(UNKNOWN_PEER);
    }
    let common = local.common_applications(remote);
    if common.is_empty() {
        return CerVerdict::Refuse(NO_COMMON_APPLICATION);
    }
    CerVerdict::Accept(common)
}

/// Judges a CEA received by the initiator: success with common
/// applications, or the reason to close.
#[must_use]
pub fn judge_cea(local: &Capabilities, remote: &Capabilities, result_code: u32) -> CerVerdict {
    if result_code != SUCCESS {
        return CerVerdict::Refuse(result_code);
    }
    let common = local.common_applications(remote);
    if common.is_empty() {
        return CerVerdict::Refuse(NO_COMMON_APPLICATION);
    }
    CerVerdict::Accept(common)
}

/// RFC 6733 §5.6.4 election, held on the responder: the local node wins
/// when its Origin-Host lexicographically succeeds the peer's, compared as
/// octet strings with ASCII letters case-insensitive ("a" to "z" MUST
/// compare equally to "A" to "Z"). "The winner of the election MUST close
/// the connection it initiated": a winner keeps the responder connection.
#[must_use]
pub fn local_wins_election(local_host: &str, remote_host: &str) -> bool {
    let fold = |s: &str| {
        s.bytes()
            .map(|b| b.to_ascii_lowercase())
            .collect::<Vec<u8>>()
    };
    fold(local_host) > fold(remote_host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(apps: &[u32]) -> Capabilities {
        Capabilities {
            origin_host: "x.example.org".into(),
            origin_realm: "example.org".into(),
            auth_application_ids: apps.to_vec(),
            ..Capabilities::default()
        }
    }

    #[test]
    fn unknown_peer_is_refused_with_3010() {
        assert_eq!(
            judge_cer(&caps(&[RELAY_APPLICATION_ID]), &caps(&[4]), false),
            CerVerdict::Refuse(3010)
        );
    }

    #[test]
    fn relay_has_common_applications_with_everyone() {
        assert_eq!(
            judge_cer(&caps(&[RELAY_APPLICATION_ID]), &caps(&[16777215]), true),
            CerVerdict::Accept(vec![16777215])
        );
        assert_eq!(
            judge_cer(&caps(&[4]), &caps(&[RELAY_APPLICATION_ID]), true),
            CerVerdict::Accept(vec![4])
        );
    }

    #[test]
    fn disjoint_applications_are_refused_with_5010() {
        assert_eq!(
            judge_cer(&caps(&[4]), &caps(&[16777215]), true),
            CerVerdict::Refuse(5010)
        );
        assert_eq!(
            judge_cer(&caps(&[4, 5]), &caps(&[5]), true),
            CerVerdict::Accept(vec![5])
        );
        let mut acct = caps(&[]);
        acct.acct_application_ids = vec![3];
        assert_eq!(
            judge_cer(&caps(&[3]), &acct, true),
            CerVerdict::Accept(vec![3])
        );
    }

    #[test]
    fn cea_failure_code_is_passed_on() {
        assert_eq!(
            judge_cea(&caps(&[4]), &caps(&[4]), 3010),
            CerVerdict::Refuse(3010)
        );
        assert_eq!(
            judge_cea(&caps(&[4]), &caps(&[4]), 2001),
            CerVerdict::Accept(vec![4])
        );
    }

    #[test]
    fn election_compares_origin_hosts_as_octets() {
        assert!(local_wins_election("b.example.com", "a.example.com"));
        assert!(!local_wins_election("a.example.com", "b.example.com"));
        // case-insensitive: "B" succeeds "a" although 'B' < 'a' as octets
        assert!(local_wins_election("B.example.com", "a.example.com"));
        assert!(!local_wins_election("A.EXAMPLE.COM", "a.example.com"));
    }

    fn cer_bytes(extra: Vec<crate::codec::Avp>, drop: u32) -> Vec<u8> {
        let c = Capabilities {
            origin_host: "client1.example.org".into(),
            origin_realm: "example.org".into(),
            host_ip_addresses: vec!["127.0.0.1".parse().unwrap()],
            product_name: "p".into(),
            auth_application_ids: vec![4],
            ..Default::default()
        };
        let mut m = crate::codec::builder::cer(&c, 1, 2);
        m.avps.retain(|a| a.code != drop);
        for a in extra {
            m.push(a);
        }
        m.to_bytes().unwrap().to_vec()
    }

    fn host(h: &str) -> crate::codec::Avp {
        crate::codec::Avp::str(crate::dictionary::code::ORIGIN_HOST, h)
    }

    /// The AVP as Failed-AVP holds it: without padding.
    fn unpadded(a: &crate::codec::Avp) -> Bytes {
        let b = a.to_bytes().unwrap();
        let len = u32::from_be_bytes([0, b[5], b[6], b[7]]) as usize;
        b.slice(..len)
    }

    #[test]
    fn a_well_formed_cer_is_read() {
        let (c, rc) = read_exchange(&cer_bytes(vec![], 0)).unwrap();
        assert_eq!((c.origin_host.as_str(), rc), ("client1.example.org", None));
        assert_eq!(c.auth_application_ids, vec![4]);
    }

    #[test]
    fn a_second_origin_host_is_5009_with_it_in_failed_avp() {
        let second = host("other.example.org");
        let e = read_exchange(&cer_bytes(vec![second.clone()], 0)).unwrap_err();
        assert_eq!(e.result_code(), 5009);
        assert_eq!(e.failed_avp().unwrap(), &unpadded(&second));
        assert!(e.to_string().contains("Origin-Host"), "{e}");
        // the attacker's name first, then 63 acceptable ones: still 5009,
        // and never an identity
        let mut b = cer_bytes(vec![], crate::dictionary::code::ORIGIN_HOST);
        let mut m = crate::codec::Message::decode(Bytes::from(b)).unwrap();
        m.avps.insert(0, host("evil.attacker.net"));
        for i in 0..63 {
            m.push(host(&format!("c{i}.example.org")));
        }
        b = m.to_bytes().unwrap().to_vec();
        let e = read_exchange(&b).unwrap_err();
        assert_eq!(e.result_code(), 5009);
        assert_eq!(e.failed_avp().unwrap(), &unpadded(&host("c0.example.org")));
        // a second Origin-Realm likewise
        let realm = crate::codec::Avp::str(crate::dictionary::code::ORIGIN_REALM, "x.org");
        let e = read_exchange(&cer_bytes(vec![realm], 0)).unwrap_err();
        assert_eq!(e.result_code(), 5009);
    }

    #[test]
    fn a_missing_origin_realm_is_5005_with_an_example_in_failed_avp() {
        let b = cer_bytes(vec![], crate::dictionary::code::ORIGIN_REALM);
        let e = read_exchange(&b).unwrap_err();
        assert_eq!(e.result_code(), 5005);
        // Origin-Realm (296) header, M bit, length 8
        assert_eq!(
            e.failed_avp().unwrap().as_ref(),
            &[0, 0, 1, 40, 0x40, 0, 0, 8]
        );
        let b = cer_bytes(vec![], crate::dictionary::code::ORIGIN_HOST);
        assert_eq!(read_exchange(&b).unwrap_err().result_code(), 5005);
        // the rest of the grammar as `decode --check` applies it
        let b = cer_bytes(vec![], crate::dictionary::code::PRODUCT_NAME);
        assert_eq!(read_exchange(&b).unwrap_err().result_code(), 5005);
    }

    #[test]
    fn a_refused_cer_is_answered_with_the_defect_then_closed() {
        use crate::peer::fsm::{Fsm, Role, State, Transmit};
        let mut f = Fsm::new(
            std::time::Instant::now(),
            Role::Responder,
            caps(&[RELAY_APPLICATION_ID]),
        );
        let cer = cer_bytes(vec![host("other.example.org")], 0);
        f.handle_bad_cer(read_exchange(&cer).unwrap_err());
        assert_eq!(f.state(), State::Closed);
        let Some(Transmit::CeaRefused(e)) = f.poll_transmit() else {
            panic!("a CEA with the defect");
        };
        let mut local = caps(&[RELAY_APPLICATION_ID]);
        local.host_ip_addresses = vec!["127.0.0.1".parse().unwrap()];
        local.product_name = "doic-agent".into();
        let mut out = bytes::BytesMut::new();
        put_refused_cea(&mut out, &local, &Header::read(&cer), &e);
        // the CEA itself passes the strict check, with the extra AVPs
        crate::codec::grammar::check(&out, CheckOptions::default()).unwrap();
        let a = crate::codec::Message::decode(out.freeze()).unwrap();
        let code = crate::dictionary::code::RESULT_CODE;
        assert_eq!(a.find(code).unwrap().as_u32(), Some(5009));
        assert!(a.find(crate::dictionary::code::ERROR_MESSAGE).is_some());
        assert!(a.find(crate::dictionary::code::FAILED_AVP).is_some());
    }

    #[test]
    fn firmware_revision_encodes_the_package_version() {
        assert_eq!(firmware_revision(), 100); // 0.1.0
    }
}

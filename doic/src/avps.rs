//! The DOIC AVPs of a relayed message: reading those of a message the relay
//! scanned ([`diameter::codec::relay::Routing`]) and applying the core's
//! decisions to the buffer it forwards ([`diameter::codec::relay::MessageBuf`]):
//! RFC 7683 §5.1.3 (the agent's OC-Supported-Features in every relayed
//! request), §5.1.2 and §10.4 (what may go downstream in answers), RFC 8581
//! §6.1 (SourceID replaced) and §6.2.5 (peer reports stripped).

use diameter::codec::avp::RawAvp;
use diameter::codec::doic::{OcOlr, OcSupportedFeatures};
use diameter::codec::error::{DecodeError, EncodeError};
use diameter::codec::relay::{MessageBuf, Routing};
use diameter::dictionary::code;

use super::treatment::AnswerActions;

/// Why a message could not be read or rewritten.
#[derive(Debug, thiserror::Error)]
pub enum AvpsError {
    /// A malformed DOIC AVP or AVP header.
    #[error("malformed DOIC AVP")]
    Decode(#[source] DecodeError),
    /// The rewritten message would be too long.
    #[error("cannot rewrite message")]
    Encode(#[source] EncodeError),
}

/// The DOIC AVPs of one message, decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DoicAvps {
    /// OC-Supported-Features, if present.
    pub features: Option<OcSupportedFeatures>,
    /// Every OC-OLR, in order.
    pub olrs: Vec<OcOlr>,
}

impl DoicAvps {
    /// Decodes the OC-Supported-Features and OC-OLR AVPs found by the scan.
    ///
    /// # Errors
    /// [`AvpsError::Decode`] for a malformed one (e.g. an OC-OLR without
    /// OC-Sequence-Number, 5005).
    pub fn read(r: &Routing<'_>) -> Result<Self, AvpsError> {
        let features = r
            .oc_supported_features()
            .map(|a| OcSupportedFeatures::from_raw(&a))
            .transpose()
            .map_err(AvpsError::Decode)?;
        let olrs = r
            .oc_olrs()
            .map(|a| OcOlr::from_raw(&a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(AvpsError::Decode)?;
        Ok(Self { features, olrs })
    }
}

/// A DiameterIdentity or realm as text (they are ASCII, RFC 6733 §4.3.1).
#[must_use]
pub fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

fn is_features(a: &RawAvp<'_>) -> bool {
    a.vendor_id.is_none() && a.code == code::OC_SUPPORTED_FEATURES
}

fn is_doic(a: &RawAvp<'_>) -> bool {
    a.vendor_id.is_none() && (a.code == code::OC_SUPPORTED_FEATURES || a.code == code::OC_OLR)
}

/// Rewrites a request being relayed: any received OC-Supported-Features is
/// replaced by `add` ([`super::Treatment::Forward`]'s `add_features`).
///
/// # Errors
/// [`AvpsError`] when the buffer is malformed or would grow too long.
pub fn apply_request(buf: &mut MessageBuf, add: &OcSupportedFeatures) -> Result<(), AvpsError> {
    buf.remove_avps(is_features).map_err(AvpsError::Decode)?;
    buf.append_avp(&add.to_avp()).map_err(AvpsError::Encode)
}

/// Rewrites an answer being relayed downstream as `act` says: every received
/// OC-Supported-Features and OC-OLR removed when `act.strip`, then the
/// agent's OC-Supported-Features and reports appended.
///
/// # Errors
/// [`AvpsError`] when the buffer is malformed or would grow too long.
pub fn apply_answer(buf: &mut MessageBuf, act: &AnswerActions) -> Result<(), AvpsError> {
    if act.strip {
        buf.remove_avps(is_doic).map_err(AvpsError::Decode)?;
    }
    if let Some(f) = &act.add_features {
        buf.append_avp(&f.to_avp()).map_err(AvpsError::Encode)?;
    }
    for o in &act.forward_reports {
        buf.append_avp(&o.to_avp()).map_err(AvpsError::Encode)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{OC_PEER_REPORT, OLR_DEFAULT_ALGO};
    use diameter::codec::avp::Avp;
    use diameter::codec::doic::ReportType;
    use diameter::codec::message::Message;

    fn features(source: &str) -> OcSupportedFeatures {
        OcSupportedFeatures {
            feature_vector: Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT),
            source_id: Some(source.into()),
            peer_algo: None,
        }
    }

    fn buf(msg: &Message) -> MessageBuf {
        MessageBuf::from_message(msg).unwrap()
    }

    #[test]
    fn request_source_id_is_replaced_on_the_wire() {
        // RFC 8581 §6.1.1 on the wire: one OC-Supported-Features, ours.
        let msg = Message::request(272, 4, true)
            .with(Avp::str(code::ORIGIN_HOST, "client"))
            .with(features("client").to_avp());
        let mut b = buf(&msg);
        apply_request(&mut b, &features("agent")).unwrap();
        let r = Routing::scan(b.as_bytes()).unwrap();
        let d = DoicAvps::read(&r).unwrap();
        assert_eq!(d.features.unwrap().source_id.as_deref(), Some("agent"));
        assert_eq!(text(r.origin_host().unwrap()), Some("client"));
        let count = diameter::codec::avp::AvpIter::with_offset(&b.as_bytes()[20..], 20)
            .filter(|a| a.as_ref().is_ok_and(is_features))
            .count();
        assert_eq!(count, 1);
    }

    #[test]
    fn answer_is_rewritten_as_the_core_says() {
        // RFC 8581 §6.2.5: the upstream peer report is gone; the forwarded
        // host report and the agent's features are there.
        let mut host = OcOlr::new(3, ReportType::Host);
        host.reduction_percentage = Some(30);
        let mut peer = OcOlr::new(8, ReportType::Peer);
        peer.reduction_percentage = Some(50);
        peer.source_id = Some("s1".into());
        let msg = Message::new(272, 4, diameter::codec::header::CommandFlags::default())
            .with(Avp::u32(code::RESULT_CODE, 2001))
            .with(features("s1").to_avp())
            .with(host.to_avp())
            .with(peer.to_avp());
        let mut b = buf(&msg);
        let before = DoicAvps::read(&Routing::scan(b.as_bytes()).unwrap()).unwrap();
        assert_eq!(before.olrs.len(), 2);
        let act = AnswerActions {
            strip: true,
            add_features: Some(features("agent")),
            forward_reports: vec![host.clone()],
            retry_on_alternate: true,
            replicate: Vec::new(),
        };
        apply_answer(&mut b, &act).unwrap();
        let r = Routing::scan(b.as_bytes()).unwrap();
        let after = DoicAvps::read(&r).unwrap();
        assert_eq!(after.olrs, vec![host]);
        assert_eq!(after.features.unwrap().source_id.as_deref(), Some("agent"));
        assert_eq!(r.result_code(), Some(2001));
        // Toward a non-DOIC client: nothing DOIC at all (RFC 7683 §5.1.2).
        let mut b = buf(&msg);
        apply_answer(
            &mut b,
            &AnswerActions {
                strip: true,
                ..AnswerActions::default()
            },
        )
        .unwrap();
        assert_eq!(
            DoicAvps::read(&Routing::scan(b.as_bytes()).unwrap()).unwrap(),
            DoicAvps::default()
        );
    }

    #[test]
    fn malformed_olr_is_an_error_not_a_panic() {
        // An OC-OLR without OC-Sequence-Number (RFC 7683 §7.3 requires it).
        let bad = Avp::grouped(
            code::OC_OLR,
            vec![Avp::u32(code::OC_REDUCTION_PERCENTAGE, 10)],
        );
        let msg = Message::request(272, 4, true).with(bad);
        let b = buf(&msg);
        let r = Routing::scan(b.as_bytes()).unwrap();
        assert!(matches!(DoicAvps::read(&r), Err(AvpsError::Decode(_))));
    }
}

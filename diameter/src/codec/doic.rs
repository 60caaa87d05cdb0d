//! Typed DOIC AVPs: OC-Supported-Features (RFC 7683 §7.1 with RFC 8581
//! §7.1: OC-Feature-Vector, SourceID, OC-Peer-Algo) and OC-OLR (RFC 7683
//! §7.3 with RFC 8581 §7.2 SourceID and RFC 8582 §7.2 OC-Maximum-Rate).
//!
//! Decoding takes the first occurrence of each sub-AVP and ignores unknown
//! ones (`* [ AVP ]`); [`super::grammar::check`] reports repeats and absences
//! as 5009/5005 where a node must reject them.

use std::time::Duration;

use super::avp::{Avp, RawAvp};
use super::error::DecodeError;
use super::value::{Value, check};
use crate::dictionary::{code, doic};

/// OC-Report-Type (RFC 7683 §7.6, RFC 8581 §7.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReportType {
    /// HOST_REPORT (0): host-routed requests to the reporting host.
    Host,
    /// REALM_REPORT (1): realm-routed requests to the realm.
    Realm,
    /// PEER_REPORT (2): every request to the reporting peer (RFC 8581).
    Peer,
    /// A value this implementation does not know.
    Other(i32),
}

impl ReportType {
    /// The Enumerated value.
    pub const fn value(self) -> i32 {
        match self {
            ReportType::Host => doic::HOST_REPORT,
            ReportType::Realm => doic::REALM_REPORT,
            ReportType::Peer => doic::PEER_REPORT,
            ReportType::Other(v) => v,
        }
    }

    /// The report type of an Enumerated value.
    pub const fn from_value(v: i32) -> ReportType {
        match v {
            doic::HOST_REPORT => ReportType::Host,
            doic::REALM_REPORT => ReportType::Realm,
            doic::PEER_REPORT => ReportType::Peer,
            other => ReportType::Other(other),
        }
    }
}

/// OC-Supported-Features (RFC 7683 §7.1, RFC 8581 §7.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcSupportedFeatures {
    /// OC-Feature-Vector: bits such as [`doic::OLR_DEFAULT_ALGO`],
    /// [`doic::OLR_RATE_ALGORITHM`], [`doic::OC_PEER_REPORT`].
    pub feature_vector: Option<u64>,
    /// SourceID: the DiameterIdentity of the node that inserted the AVP
    /// (RFC 8581 §7.3).
    pub source_id: Option<String>,
    /// OC-Peer-Algo: the algorithm selected for peer reports (RFC 8581
    /// §7.1.2).
    pub peer_algo: Option<u64>,
}

impl OcSupportedFeatures {
    /// The feature bits, with RFC 7683 §7.2's meaning of absence: only the
    /// loss algorithm.
    pub fn features(&self) -> u64 {
        self.feature_vector.unwrap_or(doic::OLR_DEFAULT_ALGO)
    }

    /// True when `bit` is announced.
    pub fn supports(&self, bit: u64) -> bool {
        self.features() & bit != 0
    }

    /// The grouped AVP (M bit clear, RFC 7683 §7.8; no vendor).
    pub fn to_avp(&self) -> Avp {
        let mut c = Vec::with_capacity(3);
        if let Some(v) = self.feature_vector {
            c.push(Avp::u64(code::OC_FEATURE_VECTOR, v));
        }
        if let Some(s) = &self.source_id {
            c.push(Avp::str(code::SOURCE_ID, s));
        }
        if let Some(v) = self.peer_algo {
            c.push(Avp::u64(code::OC_PEER_ALGO, v));
        }
        Avp::grouped(code::OC_SUPPORTED_FEATURES, c)
    }

    /// Reads a received OC-Supported-Features AVP ([`FeaturesRef::from_raw`],
    /// SourceID copied).
    ///
    /// # Errors
    /// 5014/5004 for a malformed sub-AVP.
    pub fn from_raw(avp: &RawAvp<'_>) -> Result<OcSupportedFeatures, DecodeError> {
        FeaturesRef::from_raw(avp).map(|f| f.to_owned())
    }

    /// Reads an owned OC-Supported-Features AVP.
    ///
    /// # Errors
    /// 5014/5004 for a malformed sub-AVP.
    pub fn from_avp(avp: &Avp) -> Result<OcSupportedFeatures, DecodeError> {
        with_raw(avp, OcSupportedFeatures::from_raw)
    }
}

/// A received OC-Supported-Features read in place: the SourceID borrowed
/// from the message, nothing allocated. [`OcSupportedFeatures::from_raw`] is
/// this reading with the SourceID copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeaturesRef<'a> {
    /// OC-Feature-Vector.
    pub feature_vector: Option<u64>,
    /// SourceID, a valid DiameterIdentity (RFC 6733 §4.3.1).
    pub source_id: Option<&'a [u8]>,
    /// OC-Peer-Algo.
    pub peer_algo: Option<u64>,
}

impl<'a> FeaturesRef<'a> {
    /// Reads a received OC-Supported-Features AVP: the first occurrence of
    /// each known sub-AVP, vendor-specific ones ignored.
    ///
    /// # Errors
    /// 5014/5004 for a malformed sub-AVP.
    pub fn from_raw(avp: &RawAvp<'a>) -> Result<FeaturesRef<'a>, DecodeError> {
        let mut out = FeaturesRef::default();
        for c in avp.children() {
            let c = c?;
            if c.vendor_id.is_some() {
                continue;
            }
            match c.code {
                code::OC_FEATURE_VECTOR if out.feature_vector.is_none() => {
                    out.feature_vector = Some(u64_in_place(&c)?);
                }
                code::OC_PEER_ALGO if out.peer_algo.is_none() => {
                    out.peer_algo = Some(u64_in_place(&c)?);
                }
                code::SOURCE_ID if out.source_id.is_none() => {
                    check(crate::dictionary::AvpType::DiameterIdentity, c.data)
                        .map_err(|e| e.at(&c))?;
                    out.source_id = Some(c.data);
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The feature bits, absent meaning loss only (RFC 7683 §7.2).
    pub fn features(&self) -> u64 {
        self.feature_vector.unwrap_or(doic::OLR_DEFAULT_ALGO)
    }

    /// The owned form.
    pub fn to_owned(&self) -> OcSupportedFeatures {
        OcSupportedFeatures {
            feature_vector: self.feature_vector,
            source_id: self
                .source_id
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            peer_algo: self.peer_algo,
        }
    }
}

/// An Unsigned64 value read in place (the checks of [`Value::decode`]).
fn u64_in_place(c: &RawAvp<'_>) -> Result<u64, DecodeError> {
    check(crate::dictionary::AvpType::Unsigned64, c.data).map_err(|e| e.at(c))?;
    Ok(c.data.try_into().map_or(0, u64::from_be_bytes))
}

/// OC-OLR (RFC 7683 §7.3, RFC 8581 §7.2, RFC 8582 §7.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcOlr {
    /// OC-Sequence-Number (RFC 7683 §7.4).
    pub sequence_number: u64,
    /// OC-Report-Type (RFC 7683 §7.6).
    pub report_type: ReportType,
    /// OC-Reduction-Percentage (RFC 7683 §7.7), for the loss algorithm.
    pub reduction_percentage: Option<u32>,
    /// OC-Validity-Duration in seconds (RFC 7683 §7.5).
    pub validity_duration: Option<u32>,
    /// SourceID (RFC 8581 §7.3): the reporting node of a peer report.
    pub source_id: Option<String>,
    /// OC-Maximum-Rate in requests per second (RFC 8582 §7.2.1), for the
    /// rate algorithm.
    pub maximum_rate: Option<u32>,
}

impl OcOlr {
    /// A report with only its required AVPs.
    pub fn new(sequence_number: u64, report_type: ReportType) -> OcOlr {
        OcOlr {
            sequence_number,
            report_type,
            reduction_percentage: None,
            validity_duration: None,
            source_id: None,
            maximum_rate: None,
        }
    }

    /// The validity the reacting node applies (RFC 7683 §7.5): 30 s when
    /// absent or above the 86,400 s maximum.
    pub fn validity(&self) -> Duration {
        let secs = match self.validity_duration {
            Some(s) if s <= doic::MAX_VALIDITY_SECS => s,
            _ => doic::DEFAULT_VALIDITY_SECS,
        };
        Duration::from_secs(u64::from(secs))
    }

    /// The reduction percentage the loss algorithm applies (RFC 7683 §7.7:
    /// values above 100 are ignored).
    pub fn effective_reduction(&self) -> Option<u32> {
        self.reduction_percentage.filter(|p| *p <= 100)
    }

    /// The grouped AVP (M bit clear; no vendor), sub-AVPs in grammar order.
    pub fn to_avp(&self) -> Avp {
        let mut c = Vec::with_capacity(6);
        c.push(Avp::u64(code::OC_SEQUENCE_NUMBER, self.sequence_number));
        c.push(Avp::i32(code::OC_REPORT_TYPE, self.report_type.value()));
        if let Some(v) = self.reduction_percentage {
            c.push(Avp::u32(code::OC_REDUCTION_PERCENTAGE, v));
        }
        if let Some(v) = self.validity_duration {
            c.push(Avp::u32(code::OC_VALIDITY_DURATION, v));
        }
        if let Some(s) = &self.source_id {
            c.push(Avp::str(code::SOURCE_ID, s));
        }
        if let Some(v) = self.maximum_rate {
            c.push(Avp::u32(code::OC_MAXIMUM_RATE, v));
        }
        Avp::grouped(code::OC_OLR, c)
    }

    /// Reads a received OC-OLR AVP.
    ///
    /// # Errors
    /// 5005 when OC-Sequence-Number or OC-Report-Type is missing; 5014/5004
    /// for a malformed sub-AVP.
    pub fn from_raw(avp: &RawAvp<'_>) -> Result<OcOlr, DecodeError> {
        let (mut seq, mut rt) = (None, None);
        let mut out = OcOlr::new(0, ReportType::Host);
        for c in avp.children() {
            let c = c?;
            if c.vendor_id.is_some() {
                continue;
            }
            match c.code {
                code::OC_SEQUENCE_NUMBER if seq.is_none() => seq = Some(u64_of(&c)?),
                code::OC_REPORT_TYPE if rt.is_none() => rt = Some(u32_of(&c)? as i32),
                code::OC_REDUCTION_PERCENTAGE if out.reduction_percentage.is_none() => {
                    out.reduction_percentage = Some(u32_of(&c)?);
                }
                code::OC_VALIDITY_DURATION if out.validity_duration.is_none() => {
                    out.validity_duration = Some(u32_of(&c)?)
                }
                code::OC_MAXIMUM_RATE if out.maximum_rate.is_none() => {
                    out.maximum_rate = Some(u32_of(&c)?)
                }
                code::SOURCE_ID if out.source_id.is_none() => {
                    out.source_id = Some(identity_of(&c)?)
                }
                _ => {}
            }
        }
        out.sequence_number =
            seq.ok_or_else(|| missing(avp, code::OC_SEQUENCE_NUMBER, "OC-Sequence-Number"))?;
        out.report_type = ReportType::from_value(
            rt.ok_or_else(|| missing(avp, code::OC_REPORT_TYPE, "OC-Report-Type"))?,
        );
        Ok(out)
    }

    /// Reads an owned OC-OLR AVP.
    ///
    /// # Errors
    /// As [`OcOlr::from_raw`].
    pub fn from_avp(avp: &Avp) -> Result<OcOlr, DecodeError> {
        with_raw(avp, OcOlr::from_raw)
    }
}

fn with_raw<T>(
    avp: &Avp,
    f: impl FnOnce(&RawAvp<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let b = avp.to_bytes().map_err(|_| DecodeError::InvalidAvpLength {
        code: avp.code,
        vendor_id: avp.vendor_id,
        length: avp.avp_len(),
        offset: 0,
        reason: "exceeds the 24-bit limit",
        failed_avp: bytes::Bytes::new(),
    })?;
    let raw = super::avp::parse_one(&b, 0)?;
    f(&raw)
}

fn missing(avp: &RawAvp<'_>, code: u32, name: &'static str) -> DecodeError {
    DecodeError::MissingAvp {
        code,
        vendor_id: None,
        name,
        context: "OC-OLR",
        offset: avp.offset,
        failed_avp: super::avp::min_failed_avp(code, super::AvpFlags(0), None),
    }
}

fn u64_of(c: &RawAvp<'_>) -> Result<u64, DecodeError> {
    match c.value_as(crate::dictionary::AvpType::Unsigned64)? {
        Value::Unsigned64(v) => Ok(v),
        _ => Ok(0),
    }
}

fn u32_of(c: &RawAvp<'_>) -> Result<u32, DecodeError> {
    match c.value_as(crate::dictionary::AvpType::Unsigned32)? {
        Value::Unsigned32(v) => Ok(v),
        _ => Ok(0),
    }
}

fn identity_of(c: &RawAvp<'_>) -> Result<String, DecodeError> {
    match c.value_as(crate::dictionary::AvpType::DiameterIdentity)? {
        Value::DiameterIdentity(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        _ => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{AvpData, Message};
    use crate::dictionary::{app, cmd};

    #[test]
    fn supported_features_round_trip() {
        let f = OcSupportedFeatures {
            feature_vector: Some(
                doic::OLR_DEFAULT_ALGO | doic::OLR_RATE_ALGORITHM | doic::OC_PEER_REPORT,
            ),
            source_id: Some("agent.example.net".into()),
            peer_algo: Some(doic::OLR_RATE_ALGORITHM),
        };
        let a = f.to_avp();
        assert!(!a.flags.is_mandatory() && a.vendor_id.is_none());
        assert_eq!(OcSupportedFeatures::from_avp(&a).unwrap(), f);
        assert!(f.supports(doic::OC_PEER_REPORT));
        // absence of OC-Feature-Vector means loss only (RFC 7683 §7.2)
        let empty =
            OcSupportedFeatures::from_avp(&OcSupportedFeatures::default().to_avp()).unwrap();
        assert_eq!(empty.features(), doic::OLR_DEFAULT_ALGO);
        assert!(!empty.supports(doic::OLR_RATE_ALGORITHM));
    }

    #[test]
    fn olr_round_trip_through_a_message() {
        let olr = OcOlr {
            sequence_number: u64::MAX,
            report_type: ReportType::Peer,
            reduction_percentage: None,
            validity_duration: Some(10),
            source_id: Some("agent.example.net".into()),
            maximum_rate: Some(250),
        };
        let m = Message::new(cmd::FD_TEST, app::FD_TEST, Default::default()).with(olr.to_avp());
        let b = m.to_bytes().unwrap().freeze();
        let r = crate::codec::relay::Routing::scan(&b).unwrap();
        let got = OcOlr::from_raw(&r.oc_olrs().next().unwrap()).unwrap();
        assert_eq!(got, olr);
        assert_eq!(got.validity(), Duration::from_secs(10));
    }

    #[test]
    fn olr_defaults_and_limits() {
        let mut o = OcOlr::new(1, ReportType::Host);
        assert_eq!(o.validity(), Duration::from_secs(30));
        o.validity_duration = Some(86_401);
        assert_eq!(o.validity(), Duration::from_secs(30));
        o.validity_duration = Some(86_400);
        assert_eq!(o.validity(), Duration::from_secs(86_400));
        o.reduction_percentage = Some(101);
        assert_eq!(o.effective_reduction(), None);
        assert_eq!(ReportType::from_value(7), ReportType::Other(7));
    }

    #[test]
    fn olr_without_report_type_is_5005() {
        let a = Avp::grouped(code::OC_OLR, vec![Avp::u64(code::OC_SEQUENCE_NUMBER, 3)]);
        let e = OcOlr::from_avp(&a).unwrap_err();
        assert_eq!(e.result_code(), 5005);
        let bad = Avp::grouped(
            code::OC_OLR,
            vec![
                Avp::new(
                    code::OC_SEQUENCE_NUMBER,
                    None,
                    false,
                    AvpData::Bytes(bytes::Bytes::from_static(b"1234")),
                ),
                Avp::i32(code::OC_REPORT_TYPE, 0),
            ],
        );
        assert_eq!(OcOlr::from_avp(&bad).unwrap_err().result_code(), 5014);
    }
}

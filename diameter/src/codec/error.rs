//! Codec errors and the Result-Code each maps to (RFC 6733 §7.1.3 protocol
//! errors and §7.1.5 permanent failures).
//!
//! Every [`DecodeError`] carries the byte offset of the defect from the start
//! of the message and, where RFC 6733 §7.5 asks for one, the content of the
//! Failed-AVP to return (the offending AVP, or for a length defect the AVP
//! header with a zero-filled payload of the minimum size for its type).

use bytes::Bytes;

use crate::dictionary::result;

/// A defect found while decoding a Diameter message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The version field is not 1 (RFC 6733 §3).
    #[error("unsupported version {version} at offset {offset}")]
    UnsupportedVersion {
        /// The version received.
        version: u8,
        /// Byte offset of the version field.
        offset: usize,
    },
    /// The Message Length is below 20, not a multiple of 4, above the limit,
    /// or disagrees with the bytes given (RFC 6733 §3).
    #[error("invalid message length {length} at offset {offset}: {reason}")]
    InvalidMessageLength {
        /// The length announced or found.
        length: usize,
        /// Byte offset of the length field.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Header flags in an invalid combination (E bit on a request, RFC 6733
    /// §3).
    #[error("invalid header bits 0x{flags:02x} at offset {offset}: {reason}")]
    InvalidHeaderBits {
        /// The command flags byte.
        flags: u8,
        /// Byte offset of the flags byte.
        offset: usize,
        /// What is wrong with them.
        reason: &'static str,
    },
    /// An AVP Length that is too short for the header, overruns its
    /// container, or does not fit the AVP's type (RFC 6733 §4.1, §7.1.5).
    #[error("invalid avp length {length} for avp {code}{} at offset {offset}: {reason}", vendor_suffix(*vendor_id))]
    InvalidAvpLength {
        /// AVP code.
        code: u32,
        /// Vendor id, if the V bit was set.
        vendor_id: Option<u32>,
        /// The AVP Length field.
        length: usize,
        /// Byte offset of the AVP header.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
        /// Failed-AVP content: the AVP header with a zero-filled minimum
        /// payload.
        failed_avp: Bytes,
    },
    /// AVP flag bits inconsistent with the AVP's definition (RFC 6733 §4.1).
    #[error("invalid avp bits 0x{flags:02x} for avp {code}{} at offset {offset}: {reason}", vendor_suffix(*vendor_id))]
    InvalidAvpBits {
        /// AVP code.
        code: u32,
        /// Vendor id, if the V bit was set.
        vendor_id: Option<u32>,
        /// The AVP flags byte.
        flags: u8,
        /// Byte offset of the AVP header.
        offset: usize,
        /// What is wrong with them.
        reason: &'static str,
        /// Failed-AVP content: the offending AVP.
        failed_avp: Bytes,
    },
    /// An AVP value that its type does not allow (RFC 6733 §4.2-4.3).
    #[error("invalid avp value for avp {code}{} at offset {offset}: {reason}", vendor_suffix(*vendor_id))]
    InvalidAvpValue {
        /// AVP code.
        code: u32,
        /// Vendor id, if the V bit was set.
        vendor_id: Option<u32>,
        /// Byte offset of the AVP header.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
        /// Failed-AVP content: the offending AVP.
        failed_avp: Bytes,
    },
    /// An AVP with the M bit that the receiver does not know (RFC 6733 §4.1).
    #[error("unsupported mandatory avp {code}{} at offset {offset}", vendor_suffix(*vendor_id))]
    AvpUnsupported {
        /// AVP code.
        code: u32,
        /// Vendor id, if the V bit was set.
        vendor_id: Option<u32>,
        /// Byte offset of the AVP header.
        offset: usize,
        /// Failed-AVP content: the offending AVP.
        failed_avp: Bytes,
    },
    /// A required AVP is absent (RFC 6733 §7.1.5 DIAMETER_MISSING_AVP).
    #[error("missing avp {name} ({code}{}) in {context} at offset {offset}", vendor_suffix(*vendor_id))]
    MissingAvp {
        /// AVP code.
        code: u32,
        /// Vendor id of the missing AVP.
        vendor_id: Option<u32>,
        /// AVP name.
        name: &'static str,
        /// The command or grouped AVP that requires it.
        context: &'static str,
        /// Byte offset of the container (0 for the message).
        offset: usize,
        /// Failed-AVP content: an example of the missing AVP (header and
        /// zero-filled minimum payload).
        failed_avp: Bytes,
    },
    /// An AVP occurs more often than its grammar allows (RFC 6733 §7.1.5).
    #[error("avp {name} ({code}{}) occurs too many times in {context}: extra one at offset {offset}", vendor_suffix(*vendor_id))]
    AvpOccursTooManyTimes {
        /// AVP code.
        code: u32,
        /// Vendor id.
        vendor_id: Option<u32>,
        /// AVP name.
        name: &'static str,
        /// The command or grouped AVP whose grammar is violated.
        context: &'static str,
        /// Byte offset of the first AVP beyond the allowed count.
        offset: usize,
        /// Failed-AVP content: the first AVP beyond the allowed count.
        failed_avp: Bytes,
    },
    /// Grouped AVPs nested deeper than the decoder allows.
    #[error("grouped avp {code} nested deeper than {limit} levels at offset {offset}")]
    TooDeep {
        /// AVP code of the grouped AVP past the limit.
        code: u32,
        /// The depth limit.
        limit: usize,
        /// Byte offset of that AVP header.
        offset: usize,
        /// Failed-AVP content: the offending AVP.
        failed_avp: Bytes,
    },
}

fn vendor_suffix(vendor_id: Option<u32>) -> String {
    match vendor_id {
        Some(v) => format!(" vendor {v}"),
        None => String::new(),
    }
}

impl DecodeError {
    /// The Result-Code RFC 6733 §7.1 gives this defect.
    pub fn result_code(&self) -> u32 {
        match self {
            DecodeError::UnsupportedVersion { .. } => result::UNSUPPORTED_VERSION,
            DecodeError::InvalidMessageLength { .. } => result::INVALID_MESSAGE_LENGTH,
            DecodeError::InvalidHeaderBits { .. } => result::INVALID_HDR_BITS,
            DecodeError::InvalidAvpLength { .. } => result::INVALID_AVP_LENGTH,
            DecodeError::InvalidAvpBits { .. } => result::INVALID_AVP_BITS,
            DecodeError::InvalidAvpValue { .. } => result::INVALID_AVP_VALUE,
            DecodeError::AvpUnsupported { .. } => result::AVP_UNSUPPORTED,
            DecodeError::MissingAvp { .. } => result::MISSING_AVP,
            DecodeError::AvpOccursTooManyTimes { .. } => result::AVP_OCCURS_TOO_MANY_TIMES,
            DecodeError::TooDeep { .. } => result::UNABLE_TO_COMPLY,
        }
    }

    /// The name of [`Self::result_code`] (e.g. `DIAMETER_INVALID_AVP_LENGTH`).
    pub fn result_code_name(&self) -> &'static str {
        crate::dictionary::result::result_code_name(self.result_code()).unwrap_or("UNKNOWN")
    }

    /// True when the answer must carry the E bit (a 3xxx protocol error).
    pub fn is_protocol_error(&self) -> bool {
        result::is_protocol_error(self.result_code())
    }

    /// Byte offset of the defect from the start of the message.
    pub fn offset(&self) -> usize {
        match self {
            DecodeError::UnsupportedVersion { offset, .. }
            | DecodeError::InvalidMessageLength { offset, .. }
            | DecodeError::InvalidHeaderBits { offset, .. }
            | DecodeError::InvalidAvpLength { offset, .. }
            | DecodeError::InvalidAvpBits { offset, .. }
            | DecodeError::InvalidAvpValue { offset, .. }
            | DecodeError::AvpUnsupported { offset, .. }
            | DecodeError::MissingAvp { offset, .. }
            | DecodeError::AvpOccursTooManyTimes { offset, .. }
            | DecodeError::TooDeep { offset, .. } => *offset,
        }
    }

    /// The content of the Failed-AVP AVP to put in the answer (one encoded
    /// AVP), where RFC 6733 §7.5 asks for one.
    pub fn failed_avp(&self) -> Option<&Bytes> {
        match self {
            DecodeError::InvalidAvpLength { failed_avp, .. }
            | DecodeError::InvalidAvpBits { failed_avp, .. }
            | DecodeError::InvalidAvpValue { failed_avp, .. }
            | DecodeError::AvpUnsupported { failed_avp, .. }
            | DecodeError::MissingAvp { failed_avp, .. }
            | DecodeError::AvpOccursTooManyTimes { failed_avp, .. }
            | DecodeError::TooDeep { failed_avp, .. } => Some(failed_avp),
            _ => None,
        }
    }

    /// True when the byte stream cannot be framed past this defect (the
    /// transport connection has to be closed: RFC 6733 §3 length or version).
    pub fn is_framing_error(&self) -> bool {
        matches!(
            self,
            DecodeError::UnsupportedVersion { .. } | DecodeError::InvalidMessageLength { .. }
        )
    }
}

/// A message or AVP that cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The message would exceed the 24-bit Message Length (RFC 6733 §3).
    #[error("message length {length} exceeds the 24-bit limit")]
    MessageTooLong {
        /// The length it would have.
        length: usize,
    },
    /// An AVP would exceed the 24-bit AVP Length (RFC 6733 §4.1).
    #[error("avp {code} length {length} exceeds the 24-bit limit")]
    AvpTooLong {
        /// AVP code.
        code: u32,
        /// The length it would have.
        length: usize,
    },
}

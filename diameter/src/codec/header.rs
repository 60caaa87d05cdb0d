//! RFC 6733 §3 Diameter header: version, 24-bit Message Length, command
//! flags (R, P, E, T), 24-bit Command Code, Application-ID, Hop-by-Hop and
//! End-to-End identifiers; and stream framing.

use bytes::{BufMut, BytesMut};

use super::error::DecodeError;

/// Length of the fixed Diameter header in bytes.
pub const HEADER_LEN: usize = 20;
/// The only Diameter version (RFC 6733 §3).
pub const VERSION: u8 = 1;
/// The largest Message Length the 24-bit field can carry: the codec's
/// limit. A node's own acceptance limit is its policy, passed to
/// [`frame_len_max`].
pub const MAX_LENGTH_FIELD: usize = 0x00ff_ffff;

/// The command flags byte of the header (RFC 6733 §3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CommandFlags(pub u8);

impl CommandFlags {
    /// R: the message is a request.
    pub const REQUEST: u8 = 0x80;
    /// P: the message may be proxied, relayed or redirected.
    pub const PROXIABLE: u8 = 0x40;
    /// E: the answer carries a protocol error.
    pub const ERROR: u8 = 0x20;
    /// T: the request is a potential retransmission.
    pub const RETRANSMIT: u8 = 0x10;
    /// The reserved bits, which MUST be zero on send.
    pub const RESERVED: u8 = 0x0f;

    /// R bit.
    pub const fn is_request(self) -> bool {
        self.0 & Self::REQUEST != 0
    }
    /// P bit.
    pub const fn is_proxiable(self) -> bool {
        self.0 & Self::PROXIABLE != 0
    }
    /// E bit.
    pub const fn is_error(self) -> bool {
        self.0 & Self::ERROR != 0
    }
    /// T bit.
    pub const fn is_retransmit(self) -> bool {
        self.0 & Self::RETRANSMIT != 0
    }
    /// The reserved bits as received.
    pub const fn reserved(self) -> u8 {
        self.0 & Self::RESERVED
    }
    /// Returns the flags with `bit` set to `on`.
    #[must_use]
    pub const fn with(self, bit: u8, on: bool) -> CommandFlags {
        if on {
            CommandFlags(self.0 | bit)
        } else {
            CommandFlags(self.0 & !bit)
        }
    }
}

/// A decoded Diameter header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Version (always 1 once decoded).
    pub version: u8,
    /// Message Length, header included.
    pub length: u32,
    /// Command flags.
    pub flags: CommandFlags,
    /// Command Code (24 bits).
    pub command_code: u32,
    /// Application-ID.
    pub application_id: u32,
    /// Hop-by-Hop Identifier.
    pub hop_by_hop: u32,
    /// End-to-End Identifier.
    pub end_to_end: u32,
}

impl Header {
    /// A header for a new message; the length is filled in on encoding.
    pub const fn new(command_code: u32, application_id: u32, flags: CommandFlags) -> Header {
        Header {
            version: VERSION,
            length: HEADER_LEN as u32,
            flags,
            command_code,
            application_id,
            hop_by_hop: 0,
            end_to_end: 0,
        }
    }

    /// Decodes and checks the header at the start of `buf`, which must hold
    /// the whole message (`buf.len()` equal to the Message Length).
    ///
    /// # Errors
    /// 5011 for a version other than 1, 5015 for a Message Length below 20,
    /// not a multiple of 4 or different from `buf.len()`, 3008 for the E bit
    /// on a request.
    pub fn decode(buf: &[u8]) -> Result<Header, DecodeError> {
        let h = Header::peek(buf)?;
        if h.length as usize != buf.len() {
            return Err(DecodeError::InvalidMessageLength {
                length: h.length as usize,
                offset: 1,
                reason: if (h.length as usize) > buf.len() {
                    "longer than the bytes received"
                } else {
                    "shorter than the bytes received"
                },
            });
        }
        if h.flags.is_request() && h.flags.is_error() {
            return Err(DecodeError::InvalidHeaderBits {
                flags: h.flags.0,
                offset: 4,
                reason: "E bit set on a request",
            });
        }
        Ok(h)
    }

    /// Reads the header fields from the first 20 bytes of `buf` and checks
    /// the version and the Message Length field alone (not against
    /// `buf.len()`).
    ///
    /// # Errors
    /// 5015 when `buf` is shorter than 20 bytes or the length field is bad,
    /// 5011 for a bad version.
    pub fn peek(buf: &[u8]) -> Result<Header, DecodeError> {
        let Some(b) = buf.first_chunk::<HEADER_LEN>() else {
            return Err(DecodeError::InvalidMessageLength {
                length: buf.len(),
                offset: 0,
                reason: "shorter than the 20-byte header",
            });
        };
        if b[0] != VERSION {
            return Err(DecodeError::UnsupportedVersion {
                version: b[0],
                offset: 0,
            });
        }
        let h = Header::read(b);
        check_length(h.length as usize)?;
        Ok(h)
    }

    /// Reads the header fields of a message already framed and checked
    /// ([`frame_len_max`], [`Header::decode`]), without checking them again:
    /// the relay's per-message read.
    ///
    /// # Panics
    /// When `buf` is shorter than the 20-byte header.
    #[inline]
    #[must_use]
    pub fn read(buf: &[u8]) -> Header {
        let b = &buf[..HEADER_LEN];
        Header {
            version: b[0],
            length: u24(&b[1..4]),
            flags: CommandFlags(b[4]),
            command_code: u24(&b[5..8]),
            application_id: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            hop_by_hop: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            end_to_end: u32::from_be_bytes([b[16], b[17], b[18], b[19]]),
        }
    }

    /// True for a request (R bit).
    #[inline]
    #[must_use]
    pub const fn is_request(&self) -> bool {
        self.flags.is_request()
    }

    /// Writes the 20 header bytes with the given Message Length.
    pub fn encode_with_length(&self, length: u32, out: &mut impl BufMut) {
        out.put_u32((u32::from(self.version) << 24) | (length & 0x00ff_ffff));
        out.put_u32((u32::from(self.flags.0) << 24) | (self.command_code & 0x00ff_ffff));
        out.put_u32(self.application_id);
        out.put_u32(self.hop_by_hop);
        out.put_u32(self.end_to_end);
    }

    /// Writes the 20 header bytes with `self.length`.
    pub fn encode(&self, out: &mut impl BufMut) {
        self.encode_with_length(self.length, out);
    }
}

/// Overwrites the Hop-by-Hop Identifier of the message at the start of
/// `msg` (RFC 6733 §6.1.9), in place.
///
/// # Panics
/// When `msg` is shorter than the 20-byte header.
#[inline]
pub fn set_hop_by_hop(msg: &mut [u8], id: u32) {
    msg[12..16].copy_from_slice(&id.to_be_bytes());
}

/// Overwrites the End-to-End Identifier of the message at the start of
/// `msg`, in place.
///
/// # Panics
/// When `msg` is shorter than the 20-byte header.
#[inline]
pub fn set_end_to_end(msg: &mut [u8], id: u32) {
    msg[16..20].copy_from_slice(&id.to_be_bytes());
}

/// Sets or clears the T flag (RFC 6733 §3, §5.5.4 potentially
/// retransmitted) of the message at the start of `msg`, in place.
///
/// # Panics
/// When `msg` is empty.
#[inline]
pub fn set_retransmit(msg: &mut [u8], on: bool) {
    msg[4] = CommandFlags(msg[4]).with(CommandFlags::RETRANSMIT, on).0;
}

/// Writes the 24-bit Message Length of the message at the start of `msg`
/// (the caller checked it against [`MAX_LENGTH_FIELD`]).
///
/// # Panics
/// When `msg` is shorter than 4 bytes.
#[inline]
pub fn set_length(msg: &mut [u8], len: usize) {
    msg[1..4].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
}

/// Starts a message at the end of `out` with these header fields and a
/// zero length; returns its start for [`finish`].
pub fn begin(out: &mut BytesMut, flags: u8, command: u32, app: u32, hbh: u32, e2e: u32) -> usize {
    let start = out.len();
    let mut h = Header::new(command, app, CommandFlags(flags));
    h.hop_by_hop = hbh;
    h.end_to_end = e2e;
    h.encode_with_length(0, out);
    start
}

/// Writes the Message Length of the message [`begin`] started at `start`.
pub fn finish(out: &mut BytesMut, start: usize) {
    let len = out.len() - start;
    set_length(&mut out[start..], len);
}

fn check_length(length: usize) -> Result<(), DecodeError> {
    if length < HEADER_LEN {
        return Err(DecodeError::InvalidMessageLength {
            length,
            offset: 1,
            reason: "below the 20-byte header",
        });
    }
    if !length.is_multiple_of(4) {
        return Err(DecodeError::InvalidMessageLength {
            length,
            offset: 1,
            reason: "not a multiple of 4",
        });
    }
    Ok(())
}

pub(crate) fn u24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Stream framing (RFC 6733 §3): given the bytes received so far, returns
/// `Ok(None)` when more bytes are needed, or `Ok(Some(len))` when the first
/// `len` bytes hold one complete message.
///
/// It checks the version as soon as the first byte is there and the Message
/// Length as soon as the first four are, so a bad stream fails fast instead
/// of waiting for bytes that will never come.
///
/// # Errors
/// 5011 for a bad version; 5015 for a Message Length below 20, not a
/// multiple of 4, or above `max_len`. Both are fatal for the stream.
pub fn frame_len_max(buf: &[u8], max_len: usize) -> Result<Option<usize>, DecodeError> {
    let Some(&version) = buf.first() else {
        return Ok(None);
    };
    if version != VERSION {
        return Err(DecodeError::UnsupportedVersion { version, offset: 0 });
    }
    let Some(b) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let length = u24(&b[1..4]) as usize;
    check_length(length)?;
    if length > max_len {
        return Err(DecodeError::InvalidMessageLength {
            length,
            offset: 1,
            reason: "above the configured maximum",
        });
    }
    Ok((buf.len() >= length).then_some(length))
}

/// [`frame_len_max`] with the largest length the protocol allows.
///
/// # Errors
/// As [`frame_len_max`].
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    frame_len_max(buf, MAX_LENGTH_FIELD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cer_header() -> [u8; 20] {
        let mut h = [0u8; 20];
        h[0] = 1;
        h[3] = 20;
        h[4] = 0x80;
        h[5..8].copy_from_slice(&[0, 1, 1]);
        h[12..16].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        h[16..20].copy_from_slice(&0x9abc_def0u32.to_be_bytes());
        h
    }

    #[test]
    fn decodes_every_field() {
        let h = Header::decode(&cer_header()).unwrap();
        assert_eq!(h.version, 1);
        assert_eq!(h.length, 20);
        assert!(h.flags.is_request() && !h.flags.is_proxiable());
        assert_eq!(h.command_code, 257);
        assert_eq!(h.application_id, 0);
        assert_eq!(h.hop_by_hop, 0x1234_5678);
        assert_eq!(h.end_to_end, 0x9abc_def0);
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out, cer_header());
    }

    #[test]
    fn e_bit_on_request_is_3008() {
        let mut b = cer_header();
        b[4] = 0xa0;
        let err = Header::decode(&b).unwrap_err();
        assert_eq!(err.result_code(), 3008);
        assert_eq!(err.offset(), 4);
    }

    #[test]
    fn bad_version_is_5011_and_bad_length_5015() {
        let mut b = cer_header();
        b[0] = 2;
        assert_eq!(Header::decode(&b).unwrap_err().result_code(), 5011);
        assert_eq!(frame_len(&b).unwrap_err().result_code(), 5011);
        assert!(frame_len(&b).unwrap_err().is_framing_error());
        let mut b = cer_header();
        b[3] = 19;
        assert_eq!(frame_len(&b).unwrap_err().result_code(), 5015);
        assert!(frame_len(&b).unwrap_err().is_framing_error());
        b[3] = 22;
        assert_eq!(frame_len(&b).unwrap_err().result_code(), 5015);
        b[3] = 24;
        assert_eq!(Header::decode(&b).unwrap_err().result_code(), 5015);
    }

    #[test]
    fn framing_needs_more_until_complete() {
        let b = cer_header();
        for n in 0..20 {
            assert_eq!(frame_len(&b[..n]).unwrap(), None, "prefix {n}");
        }
        assert_eq!(frame_len(&b).unwrap(), Some(20));
        let mut two = b.to_vec();
        two.extend_from_slice(&b);
        assert_eq!(frame_len(&two).unwrap(), Some(20));
        let mut big = cer_header();
        big[1] = 0x10;
        assert_eq!(frame_len_max(&big, 4096).unwrap_err().result_code(), 5015);
        // a bad version fails on the first byte, without waiting
        assert!(frame_len(&[9]).is_err());
    }
}

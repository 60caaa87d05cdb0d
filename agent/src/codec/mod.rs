//! The Diameter codec (RFC 6733 §3 header, §4 AVPs and data types, §7.1
//! Result-Codes for decode defects), zero-copy over [`bytes::Bytes`].
//!
//! | module | what |
//! | --- | --- |
//! | [`header`] | the 20-byte header, command flags, stream framing ([`frame_len`]) |
//! | [`avp`] | AVP header and padding; [`RawAvp`] (borrowed) and [`Avp`] (owned) |
//! | [`value`] | typed values of every RFC 6733 §4.2-4.3 type, with validation |
//! | [`message`] | strict whole-message decode ([`Message::decode`], [`validate`]) and encode |
//! | [`builder`] | CER/CEA, DWR/DWA, DPR/DPA, answers and protocol-error answers |
//! | [`error`] | [`DecodeError`] (offset, Result-Code, Failed-AVP) and [`EncodeError`] |
//!
//! Decoding never panics and never loops on any input: every length is
//! checked against its container before use.

pub mod avp;
pub mod builder;
pub mod error;
pub mod header;
pub mod message;
pub mod value;

pub use avp::{Avp, AvpData, AvpFlags, AvpIter, RawAvp};
pub use error::{DecodeError, EncodeError};
pub use header::{CommandFlags, HEADER_LEN, Header, frame_len, frame_len_max};
pub use message::{MAX_DEPTH, Message, validate, walk};
pub use value::{Address, Time, Value};

//! The `decode` and `encode` subcommands: a Diameter message (RFC 6733 §3)
//! to its JSON form ([`diameter::codec::json`]) and back. Input handling and
//! one-line error reports; `main.rs` prints and sets the exit status.

use std::io::Read;
use std::path::{Path, PathBuf};

use diameter::codec::{self, DecodeError, json::JsonError};

/// Why a `decode` or `encode` run failed; its `Display` is the one line
/// printed on stderr.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The input could not be read.
    #[error("cannot read {what}: {source}")]
    Read {
        /// The file path or "stdin".
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The hex text is not hex.
    #[error("invalid hex input: {reason} at character {position}")]
    Hex {
        /// What is wrong.
        reason: &'static str,
        /// Character position in the text (0-based, whitespace included).
        position: usize,
    },
    /// No input at all.
    #[error("empty input: give a message as a hex argument, --file or stdin")]
    Empty,
    /// The message is malformed.
    #[error("malformed message: {err} (Result-Code {code} {name})", code = .err.result_code(), name = .err.result_code_name())]
    Decode {
        /// The defect.
        #[source]
        err: DecodeError,
    },
    /// The JSON text does not parse.
    #[error("invalid json: {0}")]
    Json(#[source] serde_json::Error),
    /// The JSON does not describe a message.
    #[error("{0}")]
    Message(#[from] JsonError),
}

impl From<DecodeError> for InspectError {
    fn from(err: DecodeError) -> InspectError {
        InspectError::Decode { err }
    }
}

/// Parses hex text, ignoring ASCII whitespace and one leading `0x`.
///
/// # Errors
/// A non-hex character or an odd number of digits.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, InspectError> {
    let t = text.trim_start();
    let skip = text.len() - t.len()
        + if t.starts_with("0x") || t.starts_with("0X") {
            2
        } else {
            0
        };
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut high: Option<u8> = None;
    for (i, c) in text.char_indices().skip_while(|(i, _)| *i < skip) {
        if c.is_ascii_whitespace() {
            continue;
        }
        let Some(d) = c.to_digit(16) else {
            return Err(InspectError::Hex {
                reason: "not a hex digit",
                position: i,
            });
        };
        match high.take() {
            None => high = Some(d as u8),
            Some(h) => out.push(h << 4 | d as u8),
        }
    }
    if high.is_some() {
        return Err(InspectError::Hex {
            reason: "odd number of hex digits",
            position: text.len(),
        });
    }
    Ok(out)
}

/// True when `bytes` look like hex text rather than a binary message (a
/// binary Diameter message starts with version byte 0x01, never a hex
/// digit).
pub fn looks_like_hex(bytes: &[u8]) -> bool {
    bytes.iter().any(|b| !b.is_ascii_whitespace())
        && bytes
            .iter()
            .all(|b| b.is_ascii_hexdigit() || b.is_ascii_whitespace() || *b == b'x' || *b == b'X')
}

fn read_file(path: &Path) -> Result<Vec<u8>, InspectError> {
    std::fs::read(path).map_err(|source| InspectError::Read {
        what: path.display().to_string(),
        source,
    })
}

fn read_stdin(stdin: &mut dyn Read) -> Result<Vec<u8>, InspectError> {
    let mut buf = Vec::new();
    stdin
        .read_to_end(&mut buf)
        .map_err(|source| InspectError::Read {
            what: "stdin".into(),
            source,
        })?;
    Ok(buf)
}

/// Where `decode` reads its message from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeInput {
    /// Hex text given on the command line.
    pub hex: Option<String>,
    /// A binary file.
    pub file: Option<PathBuf>,
}

/// Reads the message bytes: the hex argument, else the binary file, else
/// stdin (hex text or raw bytes, detected).
///
/// # Errors
/// Unreadable input, bad hex, or nothing at all.
pub fn read_message(input: &DecodeInput, stdin: &mut dyn Read) -> Result<Vec<u8>, InspectError> {
    let bytes = if let Some(h) = &input.hex {
        parse_hex(h)?
    } else if let Some(p) = &input.file {
        read_file(p)?
    } else {
        let raw = read_stdin(stdin)?;
        if looks_like_hex(&raw) {
            parse_hex(&String::from_utf8_lossy(&raw))?
        } else {
            raw
        }
    };
    if bytes.is_empty() {
        return Err(InspectError::Empty);
    }
    Ok(bytes)
}

/// `decode`: the JSON document of one message, pretty-printed. With `check`
/// the command grammar and flag rules are checked too
/// ([`codec::grammar::check`]).
///
/// # Errors
/// The input or decode defect.
pub fn decode(
    input: &DecodeInput,
    check: bool,
    stdin: &mut dyn Read,
) -> Result<String, InspectError> {
    let bytes = read_message(input, stdin)?;
    if check {
        codec::grammar::check(&bytes, codec::CheckOptions::default())?;
    }
    let doc = codec::json::to_json(&bytes)?;
    Ok(codec::json::to_pretty(&doc))
}

/// `encode`: the hex of the message the JSON document (from `file` or
/// stdin) describes.
///
/// # Errors
/// Unreadable input, JSON that does not parse or does not describe a
/// message.
pub fn encode(file: Option<&Path>, stdin: &mut dyn Read) -> Result<String, InspectError> {
    let text = match file {
        Some(p) => read_file(p)?,
        None => read_stdin(stdin)?,
    };
    let doc: serde_json::Value = serde_json::from_slice(&text).map_err(InspectError::Json)?;
    Ok(codec::json::hex(&codec::json::from_json(&doc)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_parsing() {
        assert_eq!(parse_hex("0x01 02\n0a").unwrap(), vec![1, 2, 10]);
        assert!(matches!(
            parse_hex("01g2"),
            Err(InspectError::Hex { position: 2, .. })
        ));
        assert!(matches!(parse_hex("012"), Err(InspectError::Hex { .. })));
        assert!(looks_like_hex(b"0100001c\n"));
        assert!(!looks_like_hex(&[1, 0, 0, 20]));
        assert!(!looks_like_hex(b"  \n"));
    }

    #[test]
    fn decode_error_line_names_offset_and_result_code() {
        let input = DecodeInput {
            hex: Some("0100001480000101000000000000000100000002ff".into()),
            file: None,
        };
        let e = decode(&input, false, &mut std::io::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("offset 1") && e.contains("5015"), "{e}");
        assert!(!e.contains('\n'));
    }
}

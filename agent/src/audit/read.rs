//! Reading an audit log directory back: every file of the log, oldest
//! first (rotated files and the files of earlier runs alike), each line a
//! [`Line`]. A line that is not one (not JSON, an unknown kind, another
//! schema version) is reported as `FILE:LINE: cause` and the rest is still
//! read.

use std::fmt;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use doic::audit::record::{Line, SCHEMA};

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// The file.
    pub file: PathBuf,
    /// The line, from 1.
    pub line: usize,
    /// Why.
    pub cause: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.cause)
    }
}

/// The lines of one log line's text, or why not.
///
/// # Errors
/// The cause, in words.
pub fn parse_line(text: &str) -> Result<Line, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    match v.get("v").and_then(serde_json::Value::as_u64) {
        Some(n) if n == u64::from(SCHEMA) => {}
        Some(n) => return Err(format!("unknown schema version {n}")),
        None => return Err("no schema version `v`".into()),
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// Every line of the log in `dir`, file by file, with the lines that could
/// not be read.
///
/// # Errors
/// The directory or one of its files cannot be read.
pub fn read_dir(dir: &Path) -> io::Result<(Vec<Line>, Vec<Malformed>)> {
    let mut lines = Vec::new();
    let mut bad = Vec::new();
    for (_, path) in super::writer::files(dir)? {
        let f = std::fs::File::open(&path)?;
        read_from(&path, BufReader::new(f), &mut lines, &mut bad);
    }
    Ok((lines, bad))
}

/// The lines of `text` (one file of the log, or what a running agent
/// served of it), named `name` in what could not be read.
pub fn read_from(
    name: &Path,
    text: impl io::BufRead,
    lines: &mut Vec<Line>,
    bad: &mut Vec<Malformed>,
) {
    for (i, text) in text.lines().enumerate() {
        let parsed = match text {
            Ok(t) if t.trim().is_empty() => continue,
            Ok(t) => parse_line(&t),
            Err(e) => Err(e.to_string()),
        };
        match parsed {
            Ok(l) => lines.push(l),
            Err(cause) => bad.push(Malformed {
                file: name.to_owned(),
                line: i + 1,
                cause,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doic::audit::record::{Record, StartEntry};

    #[test]
    fn malformed_lines_are_named_by_file_and_line_and_the_rest_is_read() {
        let d = std::env::temp_dir().join(format!("doic-audit-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let good = serde_json::to_string(&Line::new(
            "a",
            1000,
            Record::Start(StartEntry { workers: 2 }),
        ))
        .unwrap();
        let later = good.replace("1970-01-01T00:00:01.000Z", "1970-01-01T00:00:02.000Z");
        std::fs::write(
            d.join("audit-00000001.jsonl"),
            format!(
                "{good}\nnot json\n\n{}\n",
                good.replace("\"v\":1", "\"v\":9")
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("audit-00000002.jsonl"),
            format!(
                "{}\n{later}\n",
                good.replace("\"kind\":\"start\"", "\"kind\":\"gossip\"")
            ),
        )
        .unwrap();
        std::fs::write(d.join("notes.txt"), "not part of the log\n").unwrap();
        let (lines, bad) = read_dir(&d).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].time, "1970-01-01T00:00:02.000Z", "files in order");
        let shown: Vec<String> = bad.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 3, "{shown:?}");
        assert!(
            shown[0].ends_with("audit-00000001.jsonl:2: expected ident at line 1 column 2"),
            "{}",
            shown[0]
        );
        assert!(shown[1].ends_with("audit-00000001.jsonl:4: unknown schema version 9"));
        assert!(
            shown[2].contains("audit-00000002.jsonl:1: unknown variant `gossip`"),
            "{}",
            shown[2]
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

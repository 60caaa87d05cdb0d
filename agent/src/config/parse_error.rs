//! A TOML or serde error of a configuration file as one line an operator
//! reads: the key, the line and column, and the expected value in words.

/// Renders a toml error on one line: `key (line L, column C): why`, the key
/// being the table header and key name on the offending line.
pub(super) fn one_line(e: &toml::de::Error, text: &str) -> String {
    let msg = in_operator_words(&e.message().trim().replace('\n', " "));
    let Some(span) = e.span() else {
        return msg;
    };
    let start = span.start.min(text.len());
    let before = &text[..start];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = start - line_start + 1;
    let line = text[line_start..].lines().next().unwrap_or("");
    let table = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_owned());
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let key = match (table, key) {
        (Some(t), Some(k)) => format!("{t}.{k} "),
        (None, Some(k)) => format!("{k} "),
        (Some(t), None) => format!("[{t}] "),
        (None, None) => String::new(),
    };
    format!("{key}(line {line_no}, column {column}): {msg}")
}

/// serde's type names in a message put as an operator reads them
/// (`expected usize` is `expected a whole number (0 or more)`).
fn in_operator_words(msg: &str) -> String {
    const NAMES: &[(&str, &str)] = &[
        ("expected usize", "expected a whole number (0 or more)"),
        ("expected u64", "expected a whole number (0 or more)"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
        (
            "expected socket address",
            "expected an address:port such as \"127.0.0.1:3868\"",
        ),
    ];
    let mut out = msg.to_owned();
    for (from, to) in NAMES {
        if out.contains(from) {
            out = out.replace(from, to);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_put_in_operator_words() {
        assert_eq!(
            in_operator_words("invalid type: string \"x\", expected usize"),
            "invalid type: string \"x\", expected a whole number (0 or more)"
        );
        assert_eq!(
            in_operator_words("invalid type: integer `1`, expected a boolean"),
            "invalid type: integer `1`, expected true or false"
        );
    }
}

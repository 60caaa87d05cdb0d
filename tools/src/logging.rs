//! The agent's log output: `tracing` events on stderr, as text or one JSON
//! object per line, filtered by `--log-level` or `RUST_LOG`.
//!
//! Precedence: `--log-level` when given, else `RUST_LOG` when set and
//! valid, else `info`. Both take the `tracing-subscriber` `EnvFilter`
//! syntax: a level (`warn`), or comma-separated `target=level` directives
//! (`info,agent::net=debug`). Text has ANSI colours only when stderr is a
//! terminal.

use std::fmt;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The level of the log when neither `--log-level` nor `RUST_LOG` says.
pub const DEFAULT_LEVEL: &str = "info";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `time LEVEL target: message key=value ...`.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `spans`,
    /// `fields` (with `message`).
    Json,
}

/// A `--log-level` or `RUST_LOG` that is not a filter.
#[derive(Debug, thiserror::Error)]
#[error(
    "--log-level {given}: {why} (expected a level such as `info`, or directives such as `info,agent::net=debug`)"
)]
pub struct BadFilter {
    given: String,
    why: String,
}

/// The filter of `level` (the `--log-level` value), else of `RUST_LOG`,
/// else `default` ([`DEFAULT_LEVEL`] for `run`).
///
/// # Errors
/// [`BadFilter`] when `level` does not parse.
pub fn filter(level: Option<&str>, default: &str) -> Result<EnvFilter, BadFilter> {
    match level {
        Some(given) => {
            let bad = |why: String| BadFilter {
                given: given.to_owned(),
                why,
            };
            // A bare word is a level here, not a target name.
            if let Some(word) = given
                .split(',')
                .find(|d| !d.contains('=') && d.parse::<LevelFilter>().is_err())
            {
                return Err(bad(format!("`{word}` is not a level")));
            }
            EnvFilter::try_new(given).map_err(|e| bad(e.to_string()))
        }
        None => Ok(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))),
    }
}

/// Installs the process's log subscriber: `format` on stderr through
/// `filter`.
pub fn init(filter: EnvFilter, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.with_ansi(false).event_format(JsonLine).init(),
    }
}

/// An event as one JSON object on one line.
struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = JsonFields::default();
        event.record(&mut fields);
        let spans: Vec<&str> = ctx
            .event_scope()
            .into_iter()
            .flat_map(|scope| scope.from_root())
            .map(|span| span.name())
            .collect();
        let line = serde_json::json!({
            "timestamp": timestamp(),
            "level": meta.level().as_str(),
            "target": meta.target(),
            "spans": spans,
            "fields": fields.0,
        });
        writeln!(writer, "{line}")
    }
}

/// Seconds since the Unix epoch, with microseconds, as RFC 3339 UTC.
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        now.subsec_micros()
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The fields of an event: numbers and booleans as JSON values, the rest
/// as their text (`%` fields their `Display`, `?` fields their `Debug`).
#[derive(Default)]
struct JsonFields(serde_json::Map<String, serde_json::Value>);

impl JsonFields {
    fn put(&mut self, field: &Field, value: impl Into<serde_json::Value>) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

impl Visit for JsonFields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value);
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_the_calendar_s() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        // 2000-02-29, a leap day of a century divisible by 400.
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn the_log_level_option_wins_and_a_bad_one_is_named() {
        assert!(filter(Some("debug"), DEFAULT_LEVEL).is_ok());
        assert!(filter(Some("info,agent::net=debug"), DEFAULT_LEVEL).is_ok());
        let e = filter(Some("loud"), DEFAULT_LEVEL).unwrap_err().to_string();
        assert!(
            e.starts_with("--log-level loud: `loud` is not a level"),
            "{e}"
        );
        assert!(filter(Some("warn,agent=nope"), DEFAULT_LEVEL).is_err());
    }
}

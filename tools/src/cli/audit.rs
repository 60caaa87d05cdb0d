//! The arguments of `doic-agent audit` (seed 003's questions of an audit
//! log directory, or of a running agent's; [`crate::audit`] answers them).

use std::path::PathBuf;

use clap::Subcommand;

/// `doic-agent audit [--dir DIR | --url URL] [--json] QUERY`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The audit log directory (`[audit] dir`): every file in it is read,
    /// oldest first.
    #[arg(long, value_name = "DIR", global = true, default_value = ".")]
    pub dir: PathBuf,
    /// A running agent's audit log instead: its metrics listener,
    /// `http://ADDR/audit` (the records it has written, `GET
    /// /audit?records`).
    #[arg(long, value_name = "URL", global = true, conflicts_with = "dir")]
    pub url: Option<String>,
    /// Print JSON for scripts instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The question.
    #[command(subcommand)]
    pub query: AuditQuery,
}

/// What to ask of the log.
#[derive(Debug, Subcommand)]
pub enum AuditQuery {
    /// The OCS versions and the issued reports, with their intervals.
    Timeline {
        /// From this time (RFC 3339, e.g. 2026-12-01T19:18:00Z).
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
        /// Up to this time (RFC 3339).
        #[arg(long, value_name = "TIME")]
        to: Option<String>,
    },
    /// Which OCS were in force at this node at TIME, and what each asked for.
    At {
        /// The moment (RFC 3339).
        #[arg(value_name = "TIME")]
        time: String,
    },
    /// The receipt chain of one OCS version: requested, accepted, active,
    /// treated, the claim it supports and what the records cannot show.
    Explain {
        /// The version's OC-Sequence-Number.
        #[arg(value_name = "SEQ", required_unless_present = "report")]
        sequence: Option<u64>,
        /// The same, as the sequence of the report that made it.
        #[arg(long = "report", value_name = "SEQ", conflicts_with = "sequence")]
        report: Option<u64>,
        /// The host, realm or peer, when two OCS share the sequence.
        #[arg(long, value_name = "TARGET")]
        target: Option<String>,
    },
    /// Offered, forwarded, diverted and throttled per second as SVG, the
    /// versions as bands, the requested reduction on a second axis.
    Plot {
        /// The SVG file to write.
        #[arg(long, value_name = "FILE.svg")]
        out: PathBuf,
    },
}

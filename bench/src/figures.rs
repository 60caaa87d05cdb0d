//! Figures written into the docs: a benchmark's table replaces what stands
//! between two HTML comment markers of a Markdown page, the prose around
//! them stays.

use anyhow::{Context, bail};

/// Replaces what stands between `begin` and `end` in the page at `doc`
/// with `text` (the markers stay).
///
/// # Errors
/// When the page cannot be read or written, or lacks a marker.
pub fn write_between(
    doc: &std::path::Path,
    begin: &str,
    end: &str,
    text: &str,
) -> anyhow::Result<()> {
    let page =
        std::fs::read_to_string(doc).with_context(|| format!("cannot read {}", doc.display()))?;
    let (Some(a), Some(b)) = (page.find(begin), page.find(end)) else {
        bail!("{} has no {begin} ... {end} markers", doc.display());
    };
    let out = format!("{}{begin}\n{text}{}", &page[..a], &page[b..]);
    std::fs::write(doc, out).with_context(|| format!("cannot write {}", doc.display()))
}

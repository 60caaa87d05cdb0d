//! The benchmark's plots: the SVG line charts of [`tools::svg`] (shared
//! with `doic-agent audit plot`).

pub use tools::svg::{Band, Chart, Series};

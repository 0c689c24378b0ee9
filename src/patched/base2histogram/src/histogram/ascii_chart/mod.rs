#[allow(clippy::module_inception)]
mod ascii_chart;
mod compact_display;
mod detailed_display;
mod series;

pub use ascii_chart::AsciiChart;

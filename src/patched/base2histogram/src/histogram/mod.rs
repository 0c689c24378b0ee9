mod ascii_chart;
mod bucket_ref;
mod display_buckets;
#[allow(clippy::module_inception)]
mod histogram;
mod interpolation;
mod percentile_stats;
mod scale;
mod slot;

pub use ascii_chart::AsciiChart;
pub use bucket_ref::BucketRef;
pub use display_buckets::DisplayBuckets;
pub use histogram::Histogram;
pub use interpolation::CumulativeCount;
pub use interpolation::Interpolator;
pub use percentile_stats::PercentileStats;
pub use scale::LogScale;
pub use scale::LogScaleConfig;

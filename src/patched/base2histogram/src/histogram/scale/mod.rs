mod bucket_span;
mod log_scale;
mod log_scale_config;

pub(crate) use bucket_span::BucketSpan;
pub use log_scale::LogScale;
pub use log_scale_config::LogScaleConfig;

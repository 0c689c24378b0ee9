//! Flag values as Go's flag package (pflag, under cobra) reads them for etcd's proxies.

use std::time::Duration;

/// A Go boolean flag value (`strconv.ParseBool`), with its error.
pub fn go_bool(v: &str) -> Result<bool, String> {
    crate::config::go_bool(v)
        .ok_or_else(|| format!("strconv.ParseBool: parsing {v:?}: invalid syntax"))
}

/// A Go duration, or a bare `0`.
pub fn go_duration(v: &str) -> Result<Duration, String> {
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    crate::duration::parse_duration(v)
}

//! Flag values as Go's flag package (pflag, under cobra) reads them for etcd's proxies.

use std::time::Duration;

/// Go's boolean flag values (`strconv.ParseBool`).
pub fn go_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {v:?}: invalid syntax")),
    }
}

/// A Go duration, or a bare `0`.
pub fn go_duration(v: &str) -> Result<Duration, String> {
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    crate::duration::parse_duration(v)
}

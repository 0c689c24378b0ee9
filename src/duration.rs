//! Go's durations (`time.ParseDuration`), as etcd's flags and options write them: a sequence
//! of decimal numbers with units ns, us, ms, s, m, h (`5s`, `100ms`, `1m30s`, `1.5h`). Used by
//! the flags (`config`) and by the JWT option `ttl` (`auth::jwt`).

use std::time::Duration;

/// Parses Go-style durations as etcd's flags take them: `5s`, `100ms`, `1m30s`, `2h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration like 5s or 100ms");
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    // Go's `time.ParseDuration` takes a bare zero (and only zero) without a unit.
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !c.is_ascii_digit() && c != '.').ok_or_else(bad)?;
        let value: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += Duration::from_secs_f64(value * unit);
        rest = &rest[u..];
    }
    Ok(total)
}

/// A duration as Go's `time.Duration.String` writes it (`1.5ms`, `108.79µs`, `1m30s`, `0s`),
/// the form etcd's log lines give durations in (`took`, `time spent`, intervals).
pub fn go_format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000_000_000 {
        let (div, unit) = match ns {
            0..1_000 => (1, "ns"),
            1_000..1_000_000 => (1_000, "µs"),
            _ => (1_000_000, "ms"),
        };
        return format!("{}{unit}", decimal(ns, div));
    }
    let (hours, rest) = (ns / 3_600_000_000_000, ns % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let mut out = String::new();
    if hours > 0 {
        out += &format!("{hours}h");
    }
    if hours > 0 || minutes > 0 {
        out += &format!("{minutes}m");
    }
    out + &decimal(rest, 1_000_000_000) + "s"
}

/// `v / div` with the fraction's trailing zeros dropped (`div` a power of ten).
fn decimal(v: u128, div: u128) -> String {
    let (int, frac) = (v / div, v % div);
    if frac == 0 {
        return int.to_string();
    }
    let width = div.ilog10() as usize;
    let frac = format!("{frac:0width$}");
    format!("{int}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("00").is_err());
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("10x").is_err());
    }

    #[test]
    fn durations_format_like_go() {
        let f = |ns: u64| go_format(Duration::from_nanos(ns));
        assert_eq!(f(0), "0s");
        assert_eq!(f(999), "999ns");
        assert_eq!(f(108_790), "108.79µs");
        assert_eq!(f(1_500_000), "1.5ms");
        assert_eq!(f(100_000_000), "100ms");
        assert_eq!(f(1_000_000_000), "1s");
        assert_eq!(f(90_000_000_000), "1m30s");
        assert_eq!(f(300_000_000_000), "5m0s");
        assert_eq!(f(3_600_000_000_000), "1h0m0s");
        assert_eq!(f(1_250_000_000), "1.25s");
    }
}

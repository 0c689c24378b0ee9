//! UTC calendar time from the system clock, for what must show a date: certificates' validity
//! and log timestamps (etcd's RFC 3339, in microseconds).

use std::time::{SystemTime, UNIX_EPOCH};

/// The UTC date (year, month, day) of `days` since 1970-01-01 (Howard Hinnant's
/// days-to-civil).
pub fn date(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

/// Today's UTC date.
pub fn today() -> (i32, u8, u8) {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    date((secs / 86_400) as i64)
}

/// `t` as etcd's logs show it: `2026-11-26T18:29:48.236945Z`.
pub fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = date((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_timestamps() {
        assert_eq!(date(0), (1970, 1, 1));
        assert_eq!(date(59), (1970, 3, 1));
        assert_eq!(date(11_016), (2000, 2, 29));
        assert_eq!(date(20_783), (2026, 11, 26));
        let t = UNIX_EPOCH + std::time::Duration::from_micros(1_795_716_987_014_912);
        assert_eq!(timestamp(t), "2026-11-26T18:16:27.014912Z");
    }
}

//! Sizes as etcd's log lines write them beside the byte counts (`"current-db-size":"1.0 GB"`):
//! go-humanize's `Bytes`, decimal units rounded to one place, a whole number from 10 up.

/// `n` bytes as `5 B`, `1.0 kB`, `16 kB`, `1.0 GB`.
pub fn bytes(n: u64) -> String {
    if n < 10 {
        return format!("{n} B");
    }
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let e = n.ilog(1000) as usize;
    let value = (n as f64 / 1000f64.powi(e as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[e])
    } else {
        format!("{value:.0} {}", UNITS[e])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_go_humanize_writes_them() {
        assert_eq!(super::bytes(0), "0 B");
        assert_eq!(super::bytes(9), "9 B");
        assert_eq!(super::bytes(20_480), "20 kB");
        assert_eq!(super::bytes(1_500), "1.5 kB");
        assert_eq!(super::bytes(1_048_576_000), "1.0 GB");
        assert_eq!(super::bytes(999), "999 B");
    }
}

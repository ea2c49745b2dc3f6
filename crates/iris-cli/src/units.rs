//! Sizes and times as people type and read them: "512M" on the command line, "1.5G" in `df`,
//! "2024-05-01 12:34:56" (UTC) in `ls -l` and `snapshot list`.

/// Parse a byte count with an optional binary suffix: "4096", "512K", "64M", "4G", "1T".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit_bytes) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_bytes))
        .ok_or_else(|| format!("bad size {s:?} (e.g. 512M, 4G)"))
}

/// A byte count in binary units as `df -h` prints it: "0B", "512B", "4.0K", "1.5M", "64G".
pub fn human_bytes(size_bytes: u64) -> String {
    const UNITS: [&str; 6] = ["K", "M", "G", "T", "P", "E"];
    if size_bytes < 1024 {
        return format!("{size_bytes}B");
    }
    let mut value = size_bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1}{}", UNITS[unit])
    } else {
        format!("{value:.0}{}", UNITS[unit])
    }
}

/// Nanoseconds since the epoch as a UTC date and time, "YYYY-MM-DD HH:MM:SS".
pub fn utc_time(time_ns: i64) -> String {
    let secs = time_ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let second_of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// A host timestamp (seconds and nanoseconds, as `stat` gives them) in nanoseconds since the
/// epoch, saturating beyond the years ±292.
pub fn time_ns(secs: i64, nanos: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Nanoseconds since the epoch split into (seconds, nanoseconds in [0, 1e9)).
pub fn time_parts(time_ns: i64) -> (i64, u32) {
    (
        time_ns.div_euclid(1_000_000_000),
        time_ns.rem_euclid(1_000_000_000) as u32,
    )
}

/// (year, month, day) of a day count since 1970-01-01, in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097); // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153; // [0, 11]
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    debug_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size(" 4G "), Ok(4 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn sizes_print_like_df_h() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(4096), "4.0K");
        assert_eq!(human_bytes(1536 << 10), "1.5M");
        assert_eq!(human_bytes(64 << 30), "64G");
        assert_eq!(human_bytes(u64::MAX), "16E");
    }

    #[test]
    fn times_split_and_join_both_ways() {
        for t in [
            0i64,
            1,
            999_999_999,
            1_714_566_896_123_456_789,
            -1,
            -1_500_000_000,
        ] {
            let (secs, nanos) = time_parts(t);
            assert!(nanos < 1_000_000_000);
            assert_eq!(time_ns(secs, i64::from(nanos)), t);
        }
        assert_eq!(time_parts(-1), (-1, 999_999_999));
    }

    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00");
        assert_eq!(utc_time(951_782_400_000_000_000), "2000-02-29 00:00:00");
        assert_eq!(utc_time(1_714_566_896_500_000_000), "2024-05-01 12:34:56");
        assert_eq!(utc_time(-1_000_000_000), "1969-12-31 23:59:59");
    }
}

//! `strftime_now(format)`, which HF transformers gives chat templates (Llama 3.1-3.3 print "Today Date:
//! 26 Jul 2024" with it, Mistral Small 3 "%Y-%m-%d"): Python's `datetime.now().strftime`, in UTC, for the
//! directives of the C locale that do not depend on a time zone. Another directive is written as it stands.

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// A UTC time, broken down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DateTime {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    /// 0 is Monday, as Python's `weekday()`.
    weekday: u32,
    /// 1..=366
    day_of_year: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl DateTime {
    fn from_unix_seconds(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rest = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        let jan1 = days_from_civil(year, 1, 1);
        DateTime {
            year,
            month,
            day,
            // 1970-01-01 was a Thursday (3).
            weekday: (days + 3).rem_euclid(7) as u32,
            day_of_year: (days - jan1 + 1) as u32,
            hour: rest / 3600,
            minute: rest / 60 % 60,
            second: rest % 60,
        }
    }
}

/// Howard Hinnant's `civil_from_days`: the proleptic Gregorian date `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// The inverse: days from 1970-01-01 to a date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// `format` with the time `unix_ms` filled in.
pub(super) fn format(format: &str, unix_ms: f64) -> String {
    let t = DateTime::from_unix_seconds((unix_ms / 1e3).floor() as i64);
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let month = MONTHS[t.month as usize - 1];
        let weekday = DAYS[t.weekday as usize];
        match d {
            'd' => out.push_str(&format!("{:02}", t.day)),
            'm' => out.push_str(&format!("{:02}", t.month)),
            'Y' => out.push_str(&t.year.to_string()),
            'y' => out.push_str(&format!("{:02}", t.year.rem_euclid(100))),
            'b' | 'h' => out.push_str(&month[..3]),
            'B' => out.push_str(month),
            'a' => out.push_str(&weekday[..3]),
            'A' => out.push_str(weekday),
            'w' => out.push_str(&((t.weekday + 1) % 7).to_string()),
            'u' => out.push_str(&(t.weekday + 1).to_string()),
            'j' => out.push_str(&format!("{:03}", t.day_of_year)),
            'H' => out.push_str(&format!("{:02}", t.hour)),
            'I' => out.push_str(&format!("{:02}", (t.hour + 11) % 12 + 1)),
            'p' => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            'M' => out.push_str(&format!("{:02}", t.minute)),
            'S' => out.push_str(&format!("{:02}", t.second)),
            'F' => out.push_str(&format!("{}-{:02}-{:02}", t.year, t.month, t.day)),
            'T' => out.push_str(&format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second)),
            '%' => out.push('%'),
            other => {
                out.push('%');
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn dates_as_python_strftime_writes_them() {
        // 2024-07-26 13:05:09 UTC, a Friday, the 208th day of a leap year.
        let ms = 1_721_999_109_000.0;
        assert_eq!(format("%d %b %Y", ms), "26 Jul 2024");
        assert_eq!(format("%Y-%m-%d", ms), "2024-07-26");
        assert_eq!(
            format("%A %B %j %H:%M:%S %y %a %w %u %I%p %F %T 100%%", ms),
            "Friday July 208 13:05:09 24 Fri 5 5 01PM 2024-07-26 13:05:09 100%"
        );
        assert_eq!(format("%Q and a lone %", ms), "%Q and a lone %");
        assert_eq!(format("%d.%m.%Y", 0.0), "01.01.1970");
        assert_eq!(format("%Y-%m-%d %a", 951_782_400_000.0), "2000-02-29 Tue");
        assert_eq!(format("%Y-%m-%d", -86_400_000.0), "1969-12-31");
        // Every day of four years round-trips, and weekdays advance by one.
        for days in -800..800 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}

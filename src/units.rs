//! Durations (`90s`, `5m`, `500ms`) and sizes (`512M`, `2G`) as written in profiles and flags.
//!
//! Both print back in the shortest exact form, so `profiles show` round-trips. Also the one
//! timestamp format of reports and changesets ([`iso8601`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A wall-clock duration, millisecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duration(pub std::time::Duration);

/// A byte count. Suffixes are binary: `K` = 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

impl FromStr for Duration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (num, unit) = split_number(s);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?} (expected e.g. 90s, 5m, 500ms)"))?;
        let ms_per_unit = match unit {
            "ms" => 1.0,
            "" | "s" | "sec" => 1000.0,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            _ => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {unit:?} (use ms, s, m or h)"
                ))
            }
        };
        let ms = value * ms_per_unit;
        if !ms.is_finite() || ms > 1e12 {
            return Err(format!("invalid duration {s:?}: too large"));
        }
        Ok(Duration(
            std::time::Duration::from_millis(ms.round() as u64),
        ))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms == 0 {
            write!(f, "0s")
        } else if ms.is_multiple_of(3_600_000) {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms.is_multiple_of(60_000) {
            write!(f, "{}m", ms / 60_000)
        } else if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (num, unit) = split_number(s);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid size {s:?} (expected e.g. 512M, 2G)"))?;
        let shift = match unit.trim_end_matches("iB").trim_end_matches('B') {
            "" => 0,
            "K" | "k" => 10,
            "M" | "m" => 20,
            "G" | "g" => 30,
            "T" | "t" => 40,
            _ => {
                return Err(format!(
                    "invalid size {s:?}: unknown unit {unit:?} (use K, M, G or T)"
                ))
            }
        };
        let bytes = value * (1u64 << shift) as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(format!("invalid size {s:?}: too large"));
        }
        Ok(Size(bytes.round() as u64))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let b = self.0;
        for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
            if b != 0 && b.is_multiple_of(1u64 << shift) {
                return write!(f, "{}{unit}", b >> shift);
            }
        }
        write!(f, "{b}")
    }
}

/// A size cap that can be switched off: `"off"`, or a size such as `"2G"` (not zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub Option<u64>);

impl FromStr for Cap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "off" {
            return Ok(Cap(None));
        }
        let b = s.parse::<Size>().map_err(|e| format!("{e}, or \"off\""))?;
        if b.0 == 0 {
            return Err(format!(
                "invalid cap {s:?}: zero (write \"off\" for no cap)"
            ));
        }
        Ok(Cap(Some(b.0)))
    }
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            None => write!(f, "off"),
            Some(b) => Size(b).fmt(f),
        }
    }
}

/// Profiles may write sizes and durations as strings or, for plain counts, as integers.
#[derive(Deserialize)]
#[serde(untagged)]
enum StrOrInt {
    Str(String),
    Int(u64),
}

macro_rules! serde_via_display {
    ($t:ty, $what:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = match StrOrInt::deserialize(d)
                    .map_err(|_| serde::de::Error::custom(concat!("expected a ", $what)))?
                {
                    StrOrInt::Str(s) => s,
                    StrOrInt::Int(n) => n.to_string(),
                };
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_via_display!(Duration, "duration string such as \"90s\"");
serde_via_display!(Size, "size string such as \"512M\"");
serde_via_display!(Cap, "size string such as \"2G\", or \"off\"");

/// RFC 3339 UTC with milliseconds, like JavaScript's `toISOString()`.
pub fn iso8601(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, ms, back) in [
            ("90s", 90_000, "90s"),
            ("5m", 300_000, "5m"),
            ("1.5s", 1500, "1500ms"),
            ("500ms", 500, "500ms"),
            ("2h", 7_200_000, "2h"),
            ("180", 180_000, "3m"),
            (" 7s ", 7000, "7s"),
        ] {
            let d: Duration = text.parse().unwrap();
            assert_eq!(d.0.as_millis(), ms, "{text}");
            assert_eq!(d.to_string(), back);
        }
        for bad in ["", "s", "5x", "-1s", "1e400s", "abc", "5 m s"] {
            assert!(
                bad.parse::<Duration>().is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn sizes() {
        for (text, bytes, back) in [
            ("512M", 512 << 20, "512M"),
            ("2G", 2 << 30, "2G"),
            ("2GiB", 2 << 30, "2G"),
            ("1.5G", 3 << 29, "1536M"),
            ("4096", 4096, "4K"),
            ("1000", 1000, "1000"),
            ("0", 0, "0"),
        ] {
            let s: Size = text.parse().unwrap();
            assert_eq!(s.0, bytes, "{text}");
            assert_eq!(s.to_string(), back);
        }
        for bad in ["", "M", "2X", "-5M", "99999999999T"] {
            assert!(bad.parse::<Size>().is_err(), "{bad:?} should be rejected");
        }
        assert_eq!("off".parse::<Cap>().unwrap(), Cap(None));
        assert_eq!("2G".parse::<Cap>().unwrap().to_string(), "2G");
        assert_eq!(Cap(None).to_string(), "off");
        for bad in ["0", "", "none", "-1G"] {
            assert!(bad.parse::<Cap>().is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn timestamps_match_javascript() {
        use std::time::UNIX_EPOCH;
        let t = UNIX_EPOCH + std::time::Duration::from_millis(1_705_314_600_123);
        assert_eq!(iso8601(t), "2024-01-15T10:30:00.123Z");
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(iso8601(leap), "2000-02-29T00:00:00.000Z");
    }
}

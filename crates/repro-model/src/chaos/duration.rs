//! Durations as written in experiments: `500ms`, `15s`, `5m`, `1h`, `1m30s`, `1.5s`, or a bare number of seconds.
use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::limits::parse_limits;

/// A duration written as `500ms`, `15s`, `5m`, `1h`, `1m30s`, `1.5s`, or a bare number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn secs(s: u64) -> Dur {
        Dur(Duration::from_secs(s))
    }
    pub fn millis(ms: u64) -> Dur {
        Dur(Duration::from_millis(ms))
    }
}

/// What a duration must look like (used in error messages).
/// A text that is not a duration, or one too large for a `Duration`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("expected {DURATION_EXPECTED}, got {text:?}")]
    Expected { text: String },
    #[error("{text:?} is too large for a duration")]
    TooLarge { text: String },
}
pub const DURATION_EXPECTED: &str = "a duration such as 500ms, 15s, 5m, 1h or 1m30s (a bare number means seconds)";

/// Parses `500ms`, `15s`, `5m`, `1h`, `1m30s`, `1.5s`, `2` (seconds). None for anything else, including a
/// value too large for a `Duration` (see [`parse_duration_checked`] for the reason).
pub fn parse_duration(text: &str) -> Option<Duration> {
    parse_duration_checked(text).ok()
}

/// Like [`parse_duration`], with what was wrong: not a duration, or too large to represent.
pub fn parse_duration_checked(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let bad = || DurationError::Expected { text: text.to_string() };
    let too_large = || DurationError::TooLarge { text: text.to_string() };
    if t.is_empty() {
        return Err(bad());
    }
    let secs = |n: f64| -> Result<Duration, DurationError> {
        if !(n.is_finite() && n >= 0.0) {
            return Err(bad());
        }
        Duration::try_from_secs_f64(n).map_err(|_| too_large())
    };
    if let Ok(n) = t.parse::<f64>() {
        return secs(n);
    }
    // Summed as Durations (checked): what format_duration prints parses back, up to Duration::MAX.
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            return Err(bad());
        }
        let num = &rest[..num_len];
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit_ms: u32 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        // Whole numbers exactly (no float rounding near the largest Duration), fractions as floats.
        let part = match num.parse::<u128>() {
            Ok(n) => {
                let ms = n.checked_mul(u128::from(unit_ms)).ok_or_else(too_large)?;
                Duration::new(u64::try_from(ms / 1000).map_err(|_| too_large())?, (ms % 1000) as u32 * 1_000_000)
            }
            Err(_) => secs(num.parse::<f64>().map_err(|_| bad())? * f64::from(unit_ms) / 1000.0)?,
        };
        total = total.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(total)
}

/// Checks a parsed duration against the limits of the parse running on this thread (if any).
fn limited(d: Duration) -> Result<Duration, super::limits::DurationOverLimit> {
    match parse_limits() {
        Some(l) => l.check_duration(d).map(|()| d),
        None => Ok(d),
    }
}

/// Formats a duration the way it is written in YAML (`500ms`, `15s`, `2m`, `1m30s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else if s > 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(DURATION_EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                limited(Duration::from_secs(v)).map(Dur).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("expected {DURATION_EXPECTED}, got {v}"))),
                }
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("{v} seconds is too large for a duration"))),
                }
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) if v > 0 => Err(E::custom(format!("{v} seconds is too large for a duration"))),
                    Err(_) => Err(E::custom(format!("expected {DURATION_EXPECTED}, got {v}"))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(E::custom(format!("expected {DURATION_EXPECTED}, got {v}")));
                }
                let d = Duration::try_from_secs_f64(v)
                    .map_err(|_| E::custom(format!("{v} seconds is too large for a duration")))?;
                limited(d).map(Dur).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                let d = parse_duration_checked(v).map_err(E::custom)?;
                limited(d).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("57500ms"), Some(Duration::from_millis(57500)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("ms"), None);
        assert_eq!(parse_duration("-1"), None);
        assert_eq!(
            parse_duration_checked("99999999999999999999h").unwrap_err().to_string(),
            "\"99999999999999999999h\" is too large for a duration"
        );
        assert_eq!(parse_duration_checked("5x").unwrap_err(), DurationError::Expected { text: "5x".to_string() });
        assert!(parse_duration_checked("1e400").is_err());
        assert!(parse_duration_checked("inf").is_err());
        assert_eq!(parse_duration_checked("18446744073709551615").ok(), None);
    }

    /// Regression (fuzz): seconds beyond what a Duration holds panicked in Duration::from_secs_f64.
    #[test]
    fn huge_durations_are_none_not_a_panic() {
        assert_eq!(parse_duration("99999999999999999999h"), None);
        assert_eq!(parse_duration("18446744073709551616"), None);
        assert_eq!(parse_duration("1e300"), None);
        assert_eq!(parse_duration("inf"), None);
        // Regression (fuzz, args target): the largest durations printed as minutes and seconds did not parse back.
        let d = parse_duration("18446744073709550000").unwrap();
        assert_eq!(format_duration(d), "307445734561825826m8s");
        assert_eq!(parse_duration(&format_duration(d)), Some(d));
        let d = parse_duration(".3s018446744073709551615s").unwrap();
        assert_eq!(format_duration(d), "18446744073709551615300ms");
        assert_eq!(parse_duration(&format_duration(d)), Some(d));
        let e = serde_json::from_str::<Dur>("1e300").unwrap_err().to_string();
        assert!(e.contains("too large for a duration"), "{e}");
    }

    proptest! {
        #[test]
        fn duration_round_trips(ms in 0u64..10_000_000) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }

        #[test]
        fn duration_parser_never_panics(s in "\\PC{0,12}") {
            if let Some(d) = parse_duration(&s) {
                // What parses prints back (to the millisecond) to a text that parses to that duration.
                let ms = Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000);
                prop_assert_eq!(parse_duration(&format_duration(d)), Some(ms));
            }
        }

        /// Huge numbers with any unit: a duration or an error, never a panic (Duration::from_secs_f64 panics).
        #[test]
        fn huge_durations_are_errors(n in any::<u128>(), unit in prop::sample::select(vec!["", "ms", "s", "m", "h", "h30m", ".9s"])) {
            let text = format!("{n}{unit}");
            match parse_duration_checked(&text) {
                Ok(d) => prop_assert!(d.as_secs_f64() <= u64::MAX as f64 * 1.001),
                Err(e) => prop_assert!(matches!(e, DurationError::TooLarge { .. } | DurationError::Expected { .. }), "{}", e),
            }
        }
    }
}

//! Points in time: RFC 3339 text (EndpointSlice `creationTimestamp`, eskip
//! `endpointCreated`) read by `jiff` (which also takes the ISO 8601 and RFC 9557
//! spellings of an instant), and Unix seconds (eskip numbers), both limited to
//! jiff's range (years -9999 to 9999) so that every accepted time is a `SystemTime`
//! and arithmetic on it cannot overflow.

use std::time::SystemTime;

/// Why a time was refused.
#[derive(Clone, Debug, thiserror::Error)]
pub enum TimestampError {
    /// Not an RFC 3339 time (or one outside years -9999 to 9999).
    #[error("{text:?} is not an RFC 3339 time such as 2024-01-02T15:04:05Z")]
    Syntax {
        /// The text as given.
        text: String,
        /// jiff's account of what is wrong.
        #[source]
        source: jiff::Error,
    },
    /// Unix seconds that are negative, not finite, or past year 9999.
    #[error("{seconds} is not a time in Unix seconds from 0 to {max}", max = jiff::Timestamp::MAX.as_second())]
    Seconds {
        /// The number as given.
        seconds: f64,
    },
}

/// Parses an RFC 3339 time (`2024-01-02T15:04:05Z`, `2024-01-02T16:04:05.5+01:00`).
///
/// # Errors
/// [`TimestampError::Syntax`] for anything else.
pub fn parse_rfc3339(text: &str) -> Result<SystemTime, TimestampError> {
    let syntax = |source| TimestampError::Syntax {
        text: text.to_owned(),
        source,
    };
    let at: jiff::Timestamp = text.parse().map_err(syntax)?;
    SystemTime::try_from(at).map_err(syntax)
}

/// A time given as Unix seconds (fractions allowed), from 1970 to the end of 9999.
///
/// # Errors
/// [`TimestampError::Seconds`] for a negative, non-finite or too large number.
pub fn from_unix_seconds(seconds: f64) -> Result<SystemTime, TimestampError> {
    let out_of_range = || TimestampError::Seconds { seconds };
    if seconds.is_nan() || seconds < 0.0 {
        return Err(out_of_range());
    }
    let since = jiff::SignedDuration::try_from_secs_f64(seconds).map_err(|_| out_of_range())?;
    let at = jiff::Timestamp::from_duration(since).map_err(|_| out_of_range())?;
    SystemTime::try_from(at).map_err(|_| out_of_range())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn secs(t: SystemTime) -> f64 {
        t.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    }

    #[test]
    fn rfc3339_as_kubernetes_and_skipper_write_it() {
        let t = |s| parse_rfc3339(s).map(secs).map_err(|e| e.to_string());
        assert_eq!(t("1970-01-01T00:00:00Z"), Ok(0.0));
        assert_eq!(t("2022-09-13T11:11:26Z"), Ok(1_663_067_486.0));
        assert_eq!(t("2022-09-13T13:11:26+02:00"), Ok(1_663_067_486.0));
        assert_eq!(t("2022-09-13T11:11:26.5Z"), Ok(1_663_067_486.5));
        assert_eq!(t("2019-02-05T15:39:06+01:00"), Ok(1_549_377_546.0));
        assert_eq!(t("9999-12-30T21:00:00Z"), Ok(253_402_203_600.0));
        // jiff also reads the ISO 8601 and RFC 9557 spellings of an instant; they are
        // unambiguous, so accepting them loses nothing.
        for text in [
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00Z[UTC]",
            "2024-01-01T01:00:00+01",
        ] {
            assert_eq!(t(text), Ok(1_704_067_200.0), "{text}");
        }
    }

    #[test]
    fn anything_else_is_an_error_that_quotes_it() {
        for text in [
            "yesterday",
            "",
            "2022-13-13T11:11:26Z",
            "2022-02-30T11:11:26Z",
            "2022-09-13T25:11:26Z",
            "2022-09-13T11:11:26",
            // The inputs that made the old parser slice inside a character.
            "2024-01-01T00:00:00+0\u{e9}00",
            "2024-01-01T00:00:00+00\u{e9}0",
            "2024-01-01T00:00:00+0\u{20ac}0",
            "2024-01-01T00:00:00\u{e9}",
            "\u{e9}024-01-01T00:00:00Z",
            "10000-01-01T00:00:00Z",
        ] {
            let e = parse_rfc3339(text).expect_err(text);
            assert!(
                e.to_string()
                    .starts_with(&format!("{text:?} is not an RFC 3339 time"))
            );
        }
    }

    #[test]
    fn unix_seconds_within_the_range() {
        assert_eq!(from_unix_seconds(0.0).map(secs).ok(), Some(0.0));
        assert_eq!(
            from_unix_seconds(1_549_377_546.25).ok(),
            Some(UNIX_EPOCH + Duration::from_millis(1_549_377_546_250))
        );
        for bad in [
            -1.0,
            1e23,
            18_446_744_073_709_551_615.0,
            f64::INFINITY,
            f64::NAN,
            253_402_300_800.0,
            -0.5,
        ] {
            assert!(from_unix_seconds(bad).is_err(), "{bad}");
        }
    }
}

//! Go's duration syntax (`time.ParseDuration`), the one skipper's eskip filters take:
//!
//! ```text
//! [-+]? ( digits? ( "." digits? )? unit )+      or exactly "0" (with an optional sign)
//! unit = ns | us | µs (U+00B5) | μs (U+03BC) | ms | s | m | h
//! ```
//!
//! Each component needs a digit before or after its dot (`".5s"`, `"5.s"` are fine,
//! `".s"` is not) and a unit; components add up (`"1h2m3.5s"`, `"1.5h30m"`); the sign
//! applies to the whole. The range is Go's too: a signed 64-bit count of nanoseconds
//! (±2562047h47m16.854775807s), and anything beyond is an error, never a wrap or a
//! panic. A fraction is worked out the way Go does it (in binary floating point, then
//! truncated to whole nanoseconds), so a file means the same here as in skipper.
//!
//! Why our own parser: `humantime` and jiff's "friendly" format accept many things Go
//! rejects (`"2 days"`, `"1 hour"`, ISO 8601 `PT1H`) and reject some Go accepts
//! (`"1.5h30m"`, a sign), so a route file valid here would not be in skipper.

use std::time::Duration;

/// Why a duration was refused. Every variant quotes the text it was given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not Go's syntax at all (empty, no digits, stray characters).
    #[error("{text:?} is not a duration such as \"30s\", \"1m30s\", \"1.5h\" or \"300ms\"")]
    Syntax {
        /// The text as given.
        text: String,
    },
    /// A number without its unit.
    #[error("{text:?} has no unit: add one of ns, us, ms, s, m, h (e.g. \"{text}ms\")")]
    MissingUnit {
        /// The text as given.
        text: String,
    },
    /// A unit Go does not know (`d`, `w`, `sec`, …).
    #[error("unknown unit {unit:?} in {text:?}: use ns, us (µs), ms, s, m or h")]
    UnknownUnit {
        /// The text as given.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// Beyond a signed 64-bit count of nanoseconds (about 292 years).
    #[error("{text:?} is out of range: durations go up to 2562047h47m16.854775807s")]
    Overflow {
        /// The text as given.
        text: String,
    },
    /// A negative duration where only 0 or more makes sense.
    #[error("{text:?} is negative: a duration here is 0 or more")]
    Negative {
        /// The text as given.
        text: String,
    },
}

/// 2^63: the magnitude of Go's most negative duration, one past its largest.
const LIMIT: u64 = 1 << 63;

/// Parses `text` in Go's syntax into signed nanoseconds, exactly as Go's
/// `time.ParseDuration` would.
///
/// # Errors
/// [`DurationError`] saying what is wrong; never [`DurationError::Negative`].
pub fn parse_nanos(text: &str) -> Result<i64, DurationError> {
    let err = |make: fn(String) -> DurationError| make(text.to_owned());
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    // The one value that needs no unit.
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(err(|text| DurationError::Syntax { text }));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (whole, after) = split_while(rest, |c| c.is_ascii_digit());
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => split_while(after, |c| c.is_ascii_digit()),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(err(|text| DurationError::Syntax { text }));
        }
        let (unit, after) = split_while(after, |c| c != '.' && !c.is_ascii_digit());
        let scale = match unit {
            "" => return Err(err(|text| DurationError::MissingUnit { text })),
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_owned(),
                    unit: other.to_owned(),
                });
            }
        };
        let overflow = || err(|text| DurationError::Overflow { text });
        let whole = whole_number(whole).ok_or_else(overflow)?;
        if whole > LIMIT / scale {
            return Err(overflow());
        }
        let mut value = whole * scale;
        if let Some((digits, divisor)) = fraction_digits(fraction) {
            // Go's arithmetic: the fraction in floating point, truncated.
            value += (digits as f64 * (scale as f64 / divisor)) as u64;
            if value > LIMIT {
                return Err(overflow());
            }
        }
        total = total
            .checked_add(value)
            .filter(|&t| t <= LIMIT)
            .ok_or_else(overflow)?;
        rest = after;
    }
    if negative {
        // `total` is at most 2^63, whose negation is exactly `i64::MIN`.
        return Ok(0i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| err(|text| DurationError::Overflow { text }))
}

/// Parses a duration that must not be negative (a timeout, an interval, a window).
///
/// # Errors
/// [`DurationError`], including [`DurationError::Negative`].
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let nanos = parse_nanos(text)?;
    let nanos = u64::try_from(nanos).map_err(|_| DurationError::Negative {
        text: text.to_owned(),
    })?;
    Ok(Duration::from_nanos(nanos))
}

/// The largest duration [`parse_duration`] returns: Go's maximum.
pub const MAX: Duration = Duration::from_nanos(i64::MAX as u64);

/// `text` split after its longest prefix of characters that satisfy `keep`.
fn split_while(text: &str, keep: impl Fn(char) -> bool) -> (&str, &str) {
    let end = text
        .char_indices()
        .find(|&(_, c)| !keep(c))
        .map_or(text.len(), |(i, _)| i);
    // `end` is a character boundary, so this never fails.
    text.split_at_checked(end).unwrap_or((text, ""))
}

/// The value of a run of ASCII digits, or `None` above 2^63 (Go's limit).
fn whole_number(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(d - b'0')))
            .filter(|&a| a <= LIMIT)
    })
}

/// Fraction digits as Go reads them: the digits as an integer and ten to the number
/// of digits taken; digits past what an `i64` holds are dropped (they are far below a
/// nanosecond). `None` for no digits.
fn fraction_digits(digits: &str) -> Option<(u64, f64)> {
    if digits.is_empty() {
        return None;
    }
    let (mut value, mut divisor) = (0u64, 1f64);
    for d in digits.bytes() {
        if value > i64::MAX as u64 / 10 {
            break;
        }
        let next = value * 10 + u64::from(d - b'0');
        if next > LIMIT {
            break;
        }
        value = next;
        divisor *= 10.0;
    }
    Some((value, divisor))
}

#[cfg(test)]
mod tests;

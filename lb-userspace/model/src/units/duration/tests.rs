use super::*;

const NS: i64 = 1;
const US: i64 = 1_000;
const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;
const M: i64 = 60 * S;
const H: i64 = 60 * M;

/// The values Go's `time.ParseDuration` gives for these inputs (Go's behaviour, the
/// edge cases included: exact limits, dropped fraction digits, float truncation).
#[test]
fn go_accepts_these_with_these_values() {
    for (text, want) in [
        ("0", 0),
        ("-0", 0),
        ("+0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0s", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        (".5s", 500 * MS),
        ("1.004s", S + 4 * MS),
        ("100.00100s", 100 * S + MS),
        ("10ns", 10 * NS),
        ("11us", 11 * US),
        ("12\u{b5}s", 12 * US),
        ("12\u{3bc}s", 12 * US),
        ("13ms", 13 * MS),
        ("15m", 15 * M),
        ("16h", 16 * H),
        ("3h30m", 3 * H + 30 * M),
        ("1m30s", 90 * S),
        ("1.5h", 90 * M),
        ("2h45m", 2 * H + 45 * M),
        ("300ms", 300 * MS),
        ("1.5h30m", 2 * H),
        ("10.5s4m", 4 * M + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
        (
            "1h2m3s4ms5us6ns",
            H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS,
        ),
        ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
        ("52763797000ns", 52_763_797_000),
        ("0.3333333333333333333h", 20 * M),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", i64::MAX),
        ("9223372036854775.807us", i64::MAX),
        ("9223372036s854ms775us807ns", i64::MAX),
        ("-9223372036854775808ns", i64::MIN),
        ("-9223372036854775.808us", i64::MIN),
        ("-9223372036s854ms775us808ns", i64::MIN),
        ("-2562047h47m16.854775808s", i64::MIN),
        ("2562047h47m16.854775807s", i64::MAX),
        ("0.100000000000000000000h", 6 * M),
        // Digits past 19 are dropped, and the float arithmetic truncates.
        ("0.830103483285477580700h", 49 * M + 48 * S + 372_539_827),
    ] {
        assert_eq!(parse_nanos(text), Ok(want), "{text:?}");
    }
}

#[test]
fn go_rejects_these_and_we_say_why() {
    let syntax = |t: &str| DurationError::Syntax { text: t.into() };
    let overflow = |t: &str| DurationError::Overflow { text: t.into() };
    for (text, want) in [
        ("", syntax("")),
        ("-", syntax("-")),
        ("s", syntax("s")),
        (".", syntax(".")),
        ("-.", syntax("-.")),
        (".s", syntax(".s")),
        ("+.s", syntax("+.s")),
        ("1s.", syntax("1s.")),
        ("3", DurationError::MissingUnit { text: "3".into() }),
        (
            "1h30",
            DurationError::MissingUnit {
                text: "1h30".into(),
            },
        ),
        (
            "1d",
            DurationError::UnknownUnit {
                text: "1d".into(),
                unit: "d".into(),
            },
        ),
        (
            "3 fortnights",
            DurationError::UnknownUnit {
                text: "3 fortnights".into(),
                unit: " fortnights".into(),
            },
        ),
        ("9223372036854775808ns", overflow("9223372036854775808ns")),
        ("9223372036854775.808us", overflow("9223372036854775.808us")),
        (
            "9223372036854ms775us808ns",
            overflow("9223372036854ms775us808ns"),
        ),
        ("-9223372036854775809ns", overflow("-9223372036854775809ns")),
        ("2562048h", overflow("2562048h")),
        (
            "99999999999999999999999s",
            overflow("99999999999999999999999s"),
        ),
        ("18446744073709551616ns", overflow("18446744073709551616ns")),
    ] {
        assert_eq!(parse_nanos(text), Err(want), "{text:?}");
    }
}

#[test]
fn non_negative_durations_for_timeouts_and_windows() {
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("2562047h47m16.854775807s"), Ok(MAX));
    assert_eq!(
        parse_duration("-5s"),
        Err(DurationError::Negative { text: "-5s".into() })
    );
    let e = parse_duration("99999999999999999999999s").expect_err("too long");
    assert_eq!(
        e.to_string(),
        "\"99999999999999999999999s\" is out of range: durations go up to 2562047h47m16.854775807s"
    );
}

#[test]
fn multibyte_text_is_read_by_characters() {
    // Units end at a digit or a dot, whatever bytes come before.
    for text in [
        "1é",
        "1€0s",
        "+0é00",
        "5µ",
        "1\u{3bc}",
        "1s\u{0}",
        "\u{feff}1s",
    ] {
        assert!(parse_nanos(text).is_err(), "{text:?}");
    }
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Units with their nanoseconds and the most fraction digits for which Go's
    /// floating-point fraction arithmetic is exact (`scale / 10^digits` is an integer),
    /// so a component's value can be stated exactly.
    const UNITS: [(&str, u128, usize); 8] = [
        ("ns", 1, 0),
        ("us", 1_000, 3),
        ("\u{b5}s", 1_000, 3),
        ("\u{3bc}s", 1_000, 3),
        ("ms", 1_000_000, 6),
        ("s", 1_000_000_000, 9),
        ("m", 60_000_000_000, 10),
        ("h", 3_600_000_000_000, 11),
    ];

    /// One component as text (`007.25s`, `.5h`, `3.ms`, `12us`) with its exact value
    /// in nanoseconds. Whole numbers are small, up to twice the unit's limit, at the
    /// limit (±1), or any `u64`.
    fn component() -> impl Strategy<Value = (String, u128)> {
        (
            0..UNITS.len(),
            any::<u64>(),
            0..4u8,
            0..3usize,
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec(0..10u8, 0..12),
        )
            .prop_map(|(u, raw, kind, zeros, has_whole, dot, digits)| {
                let (unit, scale, max_digits) = UNITS[u];
                let near_limit = (LIMIT as u128 / scale) as u64;
                let whole = match kind {
                    0 => raw % 1000,
                    1 => raw % near_limit.saturating_mul(2).saturating_add(2),
                    2 => near_limit - 1 + raw % 3,
                    _ => raw,
                };
                let digits = &digits[..digits.len().min(max_digits)];
                let has_whole = has_whole || !dot || digits.is_empty();
                let mut text = String::new();
                let mut value = 0u128;
                if has_whole {
                    text += &"0".repeat(zeros);
                    text += &whole.to_string();
                    value = u128::from(whole) * scale;
                }
                if dot {
                    text.push('.');
                    let mut fraction = 0u128;
                    for &d in digits {
                        text.push(char::from(b'0' + d));
                        fraction = fraction * 10 + u128::from(d);
                    }
                    value += fraction * (scale / 10u128.pow(digits.len() as u32));
                }
                text += unit;
                (text, value)
            })
    }

    proptest! {
        /// Components add up, the sign applies to the whole sum, and a sum beyond a
        /// signed 64-bit count of nanoseconds is an overflow error, never a wrap.
        #[test]
        fn components_add_up_and_too_much_is_an_error(
            sign in prop_oneof![Just(""), Just("+"), Just("-")],
            parts in proptest::collection::vec(component(), 1..5),
        ) {
            let text = format!("{sign}{}", parts.iter().map(|p| p.0.as_str()).collect::<String>());
            let sum: u128 = parts.iter().map(|p| p.1).sum();
            let want = if sign == "-" {
                i64::try_from(-(sum as i128)).ok()
            } else {
                i64::try_from(sum).ok()
            };
            let want = want.ok_or(DurationError::Overflow { text: text.clone() });
            prop_assert_eq!(parse_nanos(&text), want, "{:?}", text);
        }

        /// Any text at all is a value or an error (no panic); a `-` in front of an
        /// accepted unsigned text negates it, a `+` changes nothing; and
        /// `parse_duration` is `parse_nanos` restricted to values of 0 or more.
        #[test]
        fn any_text_is_a_value_or_an_error_and_a_minus_negates(
            text in prop_oneof![
                any::<String>(),
                "[-+]?([0-9]{0,4}\\.?[0-9]{0,3}(ns|us|\u{b5}s|\u{3bc}s|ms|s|m|h|d|\u{e9}| )?){0,4}",
            ],
        ) {
            let nanos = parse_nanos(&text);
            let want = match &nanos {
                Ok(n) => u64::try_from(*n)
                    .map(Duration::from_nanos)
                    .map_err(|_| DurationError::Negative { text: text.clone() }),
                Err(e) => Err(e.clone()),
            };
            prop_assert_eq!(parse_duration(&text), want);
            if let (Ok(n), false) = (nanos, text.starts_with(['-', '+'])) {
                prop_assert_eq!(parse_nanos(&format!("-{text}")), Ok(-n));
                prop_assert_eq!(parse_nanos(&format!("+{text}")), Ok(n));
            }
        }
    }
}

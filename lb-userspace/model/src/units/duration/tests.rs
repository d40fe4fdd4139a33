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

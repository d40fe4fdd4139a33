use std::{
    net::IpAddr,
    time::{Duration, SystemTime},
};

use super::*;
use lb_test_rng::RngExt as _;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn base() -> Entry<'static> {
    Entry {
        peer: "::1".parse().expect("addr"),
        forwarded_for: None,
        user: b"",
        time: at(1_549_377_546), // 2019-02-05 14:39:06 UTC
        method: b"GET",
        path: b"/",
        query: b"",
        proto: b"HTTP/1.1",
        status: 200,
        size: 1,
        referer: b"",
        user_agent: b"curl/7.49.0",
        duration: Duration::from_micros(3_999),
        host: b"localhost:9090",
        flow_id: b"",
        audit: b"",
    }
}

fn line(format: Format, e: &Entry<'_>, strip: bool, mask: &[String]) -> String {
    let mut out = Vec::new();
    Renderer::default().render(format, e, QueryPolicy { strip, mask }, &mut out);
    String::from_utf8(out).expect("ascii")
}

/// Splits a text line back into its 13 fields, undoing the `\xHH` escapes.
fn parse_back(line: &str) -> Vec<Vec<u8>> {
    let re = regex::Regex::new(
        r#"^(\S+(?:, \S+)*) - (\S+) \[([^\]]+)\] "(\S+) (\S+) (\S+)" (\d+) (\d+) "([^"]*)" "([^"]*)" (\d+) (\S+) (\S+) (\S+)\n$"#,
    )
    .expect("regex");
    let caps = re
        .captures(line)
        .unwrap_or_else(|| panic!("unparseable line {line:?}"));
    (1..caps.len())
        .map(|i| {
            let s = caps[i].as_bytes();
            let mut out = Vec::new();
            let mut j = 0;
            while j < s.len() {
                if s[j] == b'\\' && s.get(j + 1) == Some(&b'x') {
                    out.push(
                        u8::from_str_radix(std::str::from_utf8(&s[j + 2..j + 4]).expect("hex"), 16)
                            .expect("hex"),
                    );
                    j += 4;
                } else {
                    out.push(s[j]);
                    j += 1;
                }
            }
            out
        })
        .collect()
}

#[test]
fn golden_text_lines() {
    let e = base();
    assert_eq!(
        line(Format::Text, &e, false, &[]),
        "::1 - - [05/Feb/2019:14:39:06 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"curl/7.49.0\" 3 localhost:9090 - -\n"
    );
    let xff = Entry {
        forwarded_for: Some(b"198.18.0.7, not-an-ip,2001:db8::9 , unknown"),
        peer: "198.18.1.1".parse::<IpAddr>().expect("addr"),
        user: b"alice",
        method: b"POST",
        path: b"/api/v1",
        query: b"token=s3cret&x=1",
        status: 503,
        size: 0,
        referer: b"http://ref.example/",
        user_agent: b"evil \"agent\"\\\x01\x7f\xc3\xa9",
        duration: Duration::from_millis(1234),
        flow_id: b"FLOW1",
        audit: b"aud it",
        ..base()
    };
    let mask = ["token".to_owned()];
    let got = line(Format::Text, &xff, false, &mask);
    let token_hash = crate::balance::rng::fnv(crate::balance::rng::FNV_START, b"s3cret");
    assert_eq!(
        got,
        format!(
            "198.18.0.7, 2001:db8::9 - alice [05/Feb/2019:14:39:06 +0000] \"POST /api/v1?token={token_hash}&x=1 HTTP/1.1\" 503 0 \"http://ref.example/\" \"evil \\x22agent\\x22\\x5C\\x01\\x7F\\xC3\\xA9\" 1234 localhost:9090 FLOW1 aud\\x20it\n"
        )
    );
    let fields = parse_back(&got);
    assert_eq!(fields[0], b"198.18.0.7, 2001:db8::9");
    assert_eq!(
        fields[9], xff.user_agent,
        "the user agent parses back byte for byte"
    );
    assert_eq!(fields[13], b"aud it");
    let stripped = line(Format::Text, &xff, true, &[]);
    assert!(stripped.contains("\"POST /api/v1 HTTP/1.1\""), "{stripped}");
    // Only-bogus X-Forwarded-For: the peer.
    let bogus = Entry {
        forwarded_for: Some(b"unknown"),
        peer: "198.18.1.1".parse().expect("addr"),
        ..base()
    };
    assert!(line(Format::Text, &bogus, false, &[]).starts_with("198.18.1.1 - - ["));
}

#[test]
fn every_line_parses_back_whatever_the_bytes() {
    let mut rng = lb_test_rng::seeded("every_line_parses_back_whatever_the_bytes");
    for _ in 0..2000 {
        // Fields long enough for the eight-bytes-at-a-time scan, with bytes of every
        // kind at every offset.
        let mut junk = [0u8; 96];
        for b in &mut junk {
            // Mostly printable (long clean runs, with spaces, quotes and backslashes
            // among them), sometimes any byte.
            *b = if rng.random_ratio(1, 7) {
                rng.random()
            } else {
                rng.random_range(0x20..0x7F)
            };
        }
        let e = Entry {
            user_agent: &junk[..40],
            referer: &junk[40..],
            path: &junk[4..9],
            host: &junk[9..14],
            ..base()
        };
        let text = line(Format::Text, &e, false, &[]);
        let fields = parse_back(&text);
        assert_eq!(fields[9], &junk[..40]);
        assert_eq!(fields[8], &junk[40..]);
        let json = line(Format::Json, &e, false, &[]);
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|err| panic!("{err}: {json}"));
        let ua: Vec<u8> = v["user-agent"]
            .as_str()
            .expect("string")
            .chars()
            .map(|c| c as u32 as u8)
            .collect();
        assert_eq!(ua, &junk[..40]);
    }
}

#[test]
fn golden_json_line() {
    let e = Entry {
        query: b"a=1",
        ..base()
    };
    let got = line(Format::Json, &e, false, &[]);
    assert_eq!(
        got,
        "{\"timestamp\":\"05/Feb/2019:14:39:06 +0000\",\"host\":\"::1\",\"user\":\"\",\"method\":\"GET\",\"uri\":\"/?a=1\",\"proto\":\"HTTP/1.1\",\"status\":200,\"response-size\":1,\"referer\":\"\",\"user-agent\":\"curl/7.49.0\",\"duration\":3,\"requested-host\":\"localhost:9090\",\"flow-id\":\"\",\"audit\":\"\"}\n"
    );
    let v: serde_json::Value = serde_json::from_str(&got).expect("valid JSON");
    assert_eq!(v["status"], 200);
}

#[test]
fn timestamps_across_dates() {
    let mut r = Renderer::default();
    let mut out = Vec::new();
    for (secs, want) in [
        (0, "[01/Jan/1970:00:00:00 +0000]"),
        (951_782_400, "[29/Feb/2000:00:00:00 +0000]"),
        (1_798_761_599, "[31/Dec/2026:23:59:59 +0000]"),
    ] {
        out.clear();
        r.render(
            Format::Text,
            &Entry {
                time: at(secs),
                ..base()
            },
            QueryPolicy::default(),
            &mut out,
        );
        let s = String::from_utf8_lossy(&out);
        assert!(s.contains(want), "{s} lacks {want}");
    }
}

#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn writes_are_buffered_until_flushed_and_nothing_is_lost_on_drop() {
    let out = Shared::default();
    let log = AccessLog::with_sink(AccessLogConfig::default(), Box::new(out.clone()));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..250 {
                    log.log(&base(), &[]);
                }
            });
        }
    });
    assert!(out.0.lock().expect("lock").is_empty(), "buffered");
    log.flush().expect("flush");
    log.log(&base(), &[]);
    drop(log);
    let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
    assert_eq!(text.lines().count(), 1001);
    assert!(
        text.lines()
            .all(|l| parse_back(&format!("{l}\n")).len() == 14)
    );
}

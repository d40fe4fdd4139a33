use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::{Field, LogRecord};
use crate::proxy::headers::X_FORWARDED_FOR as FORWARDED_FOR;
use crate::{
    accesslog::{AccessLog, AccessLogConfig},
    routes::{Exchange, values::HeaderEdit},
};

const FLOW_ID: HeaderName = HeaderName::from_static("x-flow-id");
const AUDIT: HeaderName = HeaderName::from_static("x-unverified-audit");

fn new_log() -> Arc<AccessLog> {
    Arc::new(AccessLog::with_sink(
        AccessLogConfig::default(),
        Box::new(std::io::sink()),
    ))
}

/// A record of a request for `uri` with User-Agent `curl`, masking `mask`.
fn record(uri: &str, mask: &[&str]) -> Box<LogRecord> {
    let mask: Arc<[String]> = mask.iter().map(|&m| m.to_owned()).collect();
    let mut r = LogRecord::start(&new_log(), Some(&mask));
    r.take_uri(&uri.parse().expect("uri"));
    r.set(Field::UserAgent, Some(b"curl"));
    r
}

fn shown(r: &LogRecord, f: Field) -> &[u8] {
    r.get(f).unwrap_or(b"")
}

#[test]
fn a_log_line_takes_each_shown_header_at_its_first_value() {
    let mut h = HeaderMap::new();
    let v = HeaderValue::from_static;
    h.append(header::USER_AGENT, v("first-agent"));
    h.append(header::USER_AGENT, v("second-agent"));
    h.insert(header::HOST, v("public.example"));
    h.insert(header::REFERER, v("https://from.example/"));
    h.insert(FLOW_ID, v("F1"));
    h.insert(AUDIT, v("A1"));
    h.append(FORWARDED_FOR, v("198.18.0.9"));
    h.append(FORWARDED_FOR, v("198.18.0.8"));
    h.insert("x-other", v("not shown"));
    let mut f = record("/", &[]);
    f.set(Field::UserAgent, None);
    f.take_headers(&h, true);
    assert_eq!(shown(&f, Field::UserAgent), b"first-agent");
    assert_eq!(shown(&f, Field::Host), b"public.example");
    assert_eq!(shown(&f, Field::Referer), b"https://from.example/");
    assert_eq!(shown(&f, Field::FlowId), b"F1");
    assert_eq!(shown(&f, Field::Audit), b"A1");
    assert_eq!(shown(&f, Field::ForwardedFor), b"198.18.0.9");
    let mut untrusted = record("/", &[]);
    untrusted.take_headers(&h, false);
    assert!(
        untrusted.get(Field::ForwardedFor).is_none(),
        "only a trusted proxy says who the client is"
    );
    let mut none = record("/", &[]);
    none.set(Field::UserAgent, None);
    none.take_headers(&HeaderMap::new(), true);
    assert!(none.get(Field::UserAgent).is_none());
}

/// The target's pieces as the line shows them: a bare `?` is an empty query, no `?`
/// none; an absolute target's authority stands in for a missing Host.
#[test]
fn a_record_keeps_the_target_s_path_query_and_authority() {
    let r = record("/a/b?x=1&y", &[]);
    assert_eq!(shown(&r, Field::Path), b"/a/b");
    assert_eq!(r.get(Field::Query), Some(&b"x=1&y"[..]));
    assert_eq!(r.get(Field::Authority), None);
    let bare = record("/a?", &[]);
    assert_eq!(bare.get(Field::Query), Some(&b""[..]));
    let none = record("/a", &[]);
    assert_eq!(none.get(Field::Query), None);
    let absolute = record("http://public.example:8080/p", &[]);
    assert_eq!(shown(&absolute, Field::Authority), b"public.example:8080");
    assert_eq!(shown(&absolute, Field::Path), b"/p");
}

/// A recycled record is filled in place: it keeps its log and mask when they are the
/// ones asked for, takes the others, and carries none of the last request's fields.
#[test]
fn a_recycled_record_starts_clean_with_the_asked_log_and_mask() {
    let mut first = record("/old?q=1", &["token"]);
    let (log, mask) = (Arc::clone(&first.log), Arc::clone(&first.mask));
    first.set(Field::Referer, Some(b"r"));
    LogRecord::recycle(first);
    let again = LogRecord::start(&log, Some(&mask));
    assert!(Arc::ptr_eq(&again.log, &log) && Arc::ptr_eq(&again.mask, &mask));
    for f in [Field::Referer, Field::UserAgent, Field::Path, Field::Query] {
        assert_eq!(again.get(f), None, "{f:?}");
    }
    LogRecord::recycle(again);
    let other: Arc<[String]> = Arc::from(vec!["other".to_owned()]);
    let other_log = new_log();
    let switched = LogRecord::start(&other_log, Some(&other));
    assert!(Arc::ptr_eq(&switched.log, &other_log) && Arc::ptr_eq(&switched.mask, &other));
    LogRecord::recycle(switched);
    let unmasked = LogRecord::start(&other_log, None);
    assert!(unmasked.mask.is_empty());
}

/// A request with huge logged headers does not leave its buffer in the spares.
#[test]
fn a_recycled_record_lets_a_huge_text_go() {
    let mut r = record("/", &[]);
    r.set(Field::Referer, Some(&[b'a'; 64 * 1024]));
    let log = Arc::clone(&r.log);
    LogRecord::recycle(r);
    let again = LogRecord::start(&log, None);
    assert!(again.text.capacity() <= super::TEXT_KEPT_MAX);
}

/// skipper `proxy/proxy.go` logs the request its filters changed in place (and
/// `logging/access.go` masks that request's URL): set headers and a filtered query
/// show in the line; the Host header and an unmasked query do not change.
#[test]
fn the_line_shows_what_request_filters_changed() {
    let ex = Exchange {
        query: Some("lang=pt&token=s".to_owned()),
        edits: vec![
            HeaderEdit::Set(FLOW_ID, HeaderValue::from_static("F9")),
            HeaderEdit::Set(header::USER_AGENT, HeaderValue::from_static("set")),
            HeaderEdit::Set(header::HOST, HeaderValue::from_static("other.example")),
            HeaderEdit::Append(header::USER_AGENT, HeaderValue::from_static("second")),
            HeaderEdit::Set(header::REFERER, HeaderValue::from_static("r")),
            HeaderEdit::Drop(header::REFERER),
            HeaderEdit::Set(FORWARDED_FOR, HeaderValue::from_static("198.18.0.3")),
        ],
        ..Exchange::default()
    };
    let mut masked = record("/a?token=s", &["token"]);
    masked.after_filters(&ex);
    assert_eq!(
        masked.get(Field::FilteredQuery),
        Some(&b"lang=pt&token=s"[..])
    );
    assert_eq!(shown(&masked, Field::FlowId), b"F9");
    assert_eq!(
        shown(&masked, Field::UserAgent),
        b"set",
        "an appended value is a second one"
    );
    assert_eq!(masked.get(Field::Referer), None, "dropped");
    assert_eq!(masked.get(Field::Host), None);
    assert_eq!(
        shown(&masked, Field::ForwardedFor),
        b"198.18.0.3",
        "set by the route's author: shown as a trusted proxy's"
    );
    assert_eq!(
        masked.get(Field::Query),
        Some(&b"token=s"[..]),
        "as received"
    );
    let mut plain = record("/a?token=s", &[]);
    plain.after_filters(&ex);
    assert_eq!(
        plain.get(Field::FilteredQuery),
        None,
        "only a masked line re-encodes"
    );
    let mut same = record("/a?lang=pt&token=s", &["token"]);
    same.after_filters(&ex);
    assert_eq!(
        same.get(Field::FilteredQuery),
        None,
        "the received query, not a copy"
    );
}

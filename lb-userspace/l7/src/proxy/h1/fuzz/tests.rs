//! The fuzz target's reading and checks on fixed inputs (hyper's own request-parser
//! cases among them), and on generated ones at every `cargo test`.

use http::{StatusCode, Version};

use super::{BodyEnd, End, LIMITS, Outcome, check, decode, decode_pieces, request, same};
use crate::proxy::{
    h1::head::{BodyFraming, HeadLimits},
    upstream::Malformed,
};

const BIG: HeadLimits = LIMITS[0];

/// `input` read whole, in pieces of every size up to 16 and one byte at a time: the
/// same outcome every way, which is returned.
fn read(input: &[u8], limits: HeadLimits) -> Outcome {
    let whole = decode(input, limits, input.len());
    for piece in 1..=16 {
        let split = decode(input, limits, piece);
        if let Err(diff) = same(&whole, &split) {
            panic!("pieces of {piece}: {diff}");
        }
    }
    whole
}

fn field<'a>(o: &'a Outcome, request: usize, name: &str) -> Vec<&'a [u8]> {
    o.requests[request]
        .fields
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
        .collect()
}

#[test]
fn pipelined_requests_with_bodies_by_length_and_chunked_are_read_in_order() {
    let input = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
        PUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n\
        GET /c HTTP/1.1\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\n\r\n";
    let o = read(input, BIG);
    assert_eq!(o.requests.len(), 3);
    let [a, b, c] = &o.requests[..] else {
        unreachable!()
    };
    assert_eq!(
        (a.target.as_str(), a.framing, &a.body[..]),
        ("/a", BodyFraming::Length(5), &b"hello"[..])
    );
    assert_eq!(
        (b.target.as_str(), b.framing, &b.body[..]),
        ("/b", BodyFraming::Chunked, &b"hello world"[..])
    );
    assert_eq!(b.trailers, [("x-t".to_owned(), b"1".to_vec())]);
    assert!(a.keep_alive && b.keep_alive && !c.keep_alive);
    assert_eq!(
        o.end,
        End::Closed("GET /ignored HTTP/1.1\r\n\r\n".len()),
        "nothing is read after a close"
    );
}

/// hyper's `test_decoder_request` (src/proto/h1/role.rs), through ours: the same
/// framings, the same refusals.
#[test]
fn hypers_request_decoder_cases() {
    let framing = |head: &str| {
        let o = read(head.as_bytes(), BIG);
        assert_eq!(o.requests.len(), 1, "{head:?}: {o:?}");
        o
    };
    for (head, want) in [
        ("GET / HTTP/1.1\r\n\r\n", BodyFraming::Empty),
        ("POST / HTTP/1.1\r\n\r\n", BodyFraming::Empty),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            BodyFraming::Chunked,
        ),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            BodyFraming::Chunked,
        ),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n",
            BodyFraming::Chunked,
        ),
        (
            "POST / HTTP/1.1\r\ncontent-length: 10\r\n\r\n",
            BodyFraming::Length(10),
        ),
        (
            "POST / HTTP/1.1\r\ncontent-length: 10\r\ncontent-length: 10\r\n\r\n",
            BodyFraming::Length(10),
        ),
        (
            "POST / HTTP/1.0\r\ncontent-length: 10\r\n\r\n",
            BodyFraming::Length(10),
        ),
    ] {
        assert_eq!(framing(head).requests[0].framing, want, "{head:?}");
    }
    // With both fields: chunked, no Content-Length kept, no keep-alive.
    for head in [
        "POST / HTTP/1.1\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 10\r\n\r\n",
        "POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nconnection: keep-alive\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n",
    ] {
        let o = framing(head);
        let r = &o.requests[0];
        assert_eq!(r.framing, BodyFraming::Chunked, "{head:?}");
        assert!(field(&o, 0, "content-length").is_empty(), "{head:?}");
        assert!(!r.keep_alive, "{head:?}");
    }
    for head in [
        "POST / HTTP/1.1\r\ncontent-length: 10\r\ncontent-length: 11\r\n\r\n",
        "POST / HTTP/1.1\r\ncontent-length: +10\r\n\r\n",
        "POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
        "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ntransfer-encoding: afterlol\r\n\r\n",
        "POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
        // `test_parse_request_errors`, `test_parse_reject_request_with_multiple_spaces…`
        "GET htt:p// HTTP/1.1\r\nHost: hyper.rs\r\n\r\n",
        "GET  /echo  HTTP/1.1\r\nHost: hyper.rs\r\n\r\n",
    ] {
        let o = read(head.as_bytes(), BIG);
        assert_eq!(o.end, End::Refused(StatusCode::BAD_REQUEST), "{head:?}");
        assert!(o.requests.is_empty());
    }
}

/// hyper's `test_parse_request_multiple_connection_headers`.
#[test]
fn a_close_in_any_connection_field_wins() {
    for (head, keep_alive) in [
        (
            "GET / HTTP/1.1\r\nconnection: close\r\nconnection: keep-alive\r\n\r\n",
            false,
        ),
        (
            "GET / HTTP/1.1\r\nconnection: keep-alive\r\nconnection: close\r\n\r\n",
            false,
        ),
        (
            "GET / HTTP/1.0\r\nconnection: keep-alive\r\nconnection: foo\r\n\r\n",
            true,
        ),
        (
            "GET / HTTP/1.0\r\nconnection: keep-alive\r\nconnection: close\r\n\r\n",
            false,
        ),
        ("GET / HTTP/1.0\r\nconnection: Keep-Alive, x\r\n\r\n", true),
        ("GET / HTTP/1.0\r\n\r\n", false),
        ("GET / HTTP/1.1\r\nConnection: x, CLOSE\r\n\r\n", false),
    ] {
        let o = read(head.as_bytes(), BIG);
        assert_eq!(o.requests[0].keep_alive, keep_alive, "{head:?}");
    }
}

/// hyper's `parse_too_large_headers`, for a limit of 100 fields and of 128.
#[test]
fn the_field_count_limit() {
    let head = |n: usize| {
        let mut h = String::from("GET / HTTP/1.1\r\n");
        for i in 0..n {
            h.push_str(&format!("key{i}: val{i}\r\n"));
        }
        h.push_str("\r\n");
        h
    };
    for (limits, ok) in [(BIG, 99), (LIMITS[3], 127)] {
        let o = read(head(ok).as_bytes(), limits);
        assert_eq!(o.requests.len(), 1, "{ok} fields");
        let o = read(head(ok + 2).as_bytes(), limits);
        assert_eq!(
            o.end,
            End::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
    }
}

#[test]
fn bodies_that_end_early_or_break_end_the_reading() {
    let o = read(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345", BIG);
    assert_eq!(o.requests[0].body_end, BodyEnd::Cut);
    assert_eq!(o.requests[0].body, b"12345");
    // hyper's `post_with_chunked_overflow`: the smuggled request is not read.
    let o = read(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nf0000000000000003\r\nabc\r\n0\r\n\r\nGET /sneaky HTTP/1.1\r\n\r\n",
        BIG,
    );
    assert_eq!(o.requests.len(), 1);
    assert_eq!(
        o.requests[0].body_end,
        BodyEnd::Failed(Malformed::ChunkSize)
    );
    assert!(matches!(o.end, End::Closed(_)));
    // hyper's `post_with_chunked_missing_final_digit`.
    let o = read(
        b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n1\r\nZ\r\n\r\n\r\n",
        BIG,
    );
    assert_eq!(o.requests[0].body, b"Z");
    assert_eq!(
        o.requests[0].body_end,
        BodyEnd::Failed(Malformed::ChunkSize)
    );
}

#[test]
fn http10_expect_and_versions_are_read_as_written() {
    let o = read(
        b"POST / HTTP/1.0\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\nhi",
        BIG,
    );
    let r = &o.requests[0];
    assert_eq!(r.version, Version::HTTP_10);
    // HTTP/1.0's Expect is ignored (RFC 9110 §10.1.1), as hyper ignores it.
    assert!(!r.expect_continue);
    assert!(!r.keep_alive);
    assert_eq!(r.body, b"hi");
}

/// A request line too long for the limit is refused with 414 whether the limit is
/// reached before its end arrived or it arrived whole (it once got 431 then).
#[test]
fn a_long_request_line_is_refused_for_size_however_it_arrives() {
    let line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(80));
    let limits = LIMITS[2];
    let whole = decode(line.as_bytes(), limits, line.len());
    let split = decode(line.as_bytes(), limits, 8);
    assert_eq!(whole.end, End::Refused(StatusCode::URI_TOO_LONG));
    assert_eq!(split.end, End::Refused(StatusCode::URI_TOO_LONG));
    assert!(same(&whole, &split).is_ok());
}

/// A request line over the head limit gets 414 whether it arrives whole or the
/// limit is reached before its end (it once got 431 when it came in one read).
#[test]
fn a_long_request_line_gets_the_same_status_however_it_arrives() {
    let line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(80));
    let mut data = vec![7 << 2 | 2];
    data.extend_from_slice(line.as_bytes());
    check(&data);
}

#[test]
fn the_fuzz_entry_takes_anything_short() {
    for data in [
        &b""[..],
        b"\x00",
        b"\x01GET",
        b"\xffGET / HTTP/1.1\r\n\r\n",
        b"\x02PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        request(data);
    }
    assert_eq!(
        decode_pieces([&b"GET / HT"[..], b"TP/1.1\r\n"].into_iter(), BIG).end,
        End::Partial(16)
    );
}

mod properties {
    use proptest::prelude::*;

    use super::super::check;

    /// Pieces of requests: request lines of every form, framing and connection
    /// fields (odd cases, duplicates), chunk-size lines, extensions, data, CRLFs and
    /// stray bytes, so that jumbles of them reach deep into the parser and the
    /// decoder.
    fn token() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"GET / HTTP/1.1\r\n".to_vec()),
            Just(b"POST /p?q=1 HTTP/1.1\r\n".to_vec()),
            Just(b"HEAD http://h/x HTTP/1.0\r\n".to_vec()),
            Just(b"OPTIONS * HTTP/1.1\r\n".to_vec()),
            Just(b"CONNECT h:443 HTTP/1.1\r\n".to_vec()),
            Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
            Just(b"transfer-encoding: gzip\r\n".to_vec()),
            Just(b"Content-Length: 3\r\n".to_vec()),
            Just(b"CONTENT-LENGTH: 03\r\n".to_vec()),
            Just(b"Connection: close\r\n".to_vec()),
            Just(b"Connection: keep-alive\r\n".to_vec()),
            Just(b"Expect: 100-continue\r\n".to_vec()),
            Just(b"Host: h\r\n".to_vec()),
            Just(b" folded\r\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"0".to_vec()),
            Just(b"3".to_vec()),
            Just(b"fF".to_vec()),
            Just(b";ext=v".to_vec()),
            Just(b"abc".to_vec()),
            Just(b"X-T: 1\r\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 1..4),
        ]
    }

    proptest! {
        /// Any bytes in any pieces, and any jumble of request tokens: nothing
        /// panics, every head agrees with its fields, and the outcome is the one
        /// of a single read (the fuzz target's checks, run on every `cargo test`).
        #[test]
        fn any_bytes_read_the_same_in_any_pieces(
            control in any::<u8>(),
            input in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..400),
                proptest::collection::vec(token(), 0..40).prop_map(|t| t.concat()),
            ],
        ) {
            let mut data = vec![control];
            data.extend_from_slice(&input);
            check(&data);
        }
    }
}

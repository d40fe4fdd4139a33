//! Response heads and their framing, as RFC 9112 §6.3 and hyper's client (its
//! `role.rs` decoder cases) have them, each decoded whole, a byte at a time, and split
//! in two at every byte; and the request side as hyper's client wrote it.

use bytes::BytesMut;
use http::{HeaderMap, HeaderValue, Method, Uri, header};

use super::super::{
    error::Malformed,
    fuzz::{End, Outcome, decode, decode_pieces},
};
use super::{
    Framing, HeadMode, MAX_HEAD, RequestFraming, encode_head, parse_head, request_framing,
};

/// Decodes `input` whole, and checks that every way of splitting it (a byte at a
/// time; in two at each byte) decodes the same.
fn decoded(input: &[u8], method: &Method) -> Outcome {
    let whole = decode(input, method, input.len());
    assert_eq!(
        decode(input, method, 1),
        whole,
        "a byte at a time: {:?}",
        String::from_utf8_lossy(input)
    );
    for at in 1..input.len() {
        let (a, b) = input.split_at(at);
        assert_eq!(
            decode_pieces([a, b].into_iter(), method),
            whole,
            "split at {at}: {:?}",
            String::from_utf8_lossy(input)
        );
    }
    whole
}

/// The final head's status, framing and keep-alive, or the error.
fn head(o: &Outcome) -> Result<Option<(u16, Framing, bool)>, Malformed> {
    o.head
        .clone()
        .map(|h| h.map(|(status, framing, keep_alive, _)| (status, framing, keep_alive)))
}

fn field<'a>(o: &'a Outcome, name: &str) -> Vec<&'a [u8]> {
    let Ok(Some((_, _, _, fields))) = &o.head else {
        return Vec::new();
    };
    fields
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
        .collect()
}

/// A case: name, the backend's bytes, the request's method, the final head's status,
/// framing and keep-alive, and the body.
type Framed = (
    &'static str,
    &'static [u8],
    Method,
    (u16, Framing, bool),
    &'static [u8],
);

/// A case: name, the backend's bytes, whether the error is the expected one.
type Refused = (&'static str, &'static [u8], fn(&Malformed) -> bool);

#[test]
fn framing_follows_rfc_9112_section_6_3() {
    use Framing::{Chunked, Close, Empty, Length};
    let cases: &[Framed] = &[
        (
            "content-length",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            Method::GET,
            (200, Length(5), true),
            b"hello",
        ),
        (
            "the same content-length twice, and as a list",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5, 5\r\n\r\nhello",
            Method::GET,
            (200, Length(5), true),
            b"hello",
        ),
        (
            "content-length 0 is no body",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
            (200, Empty, true),
            b"",
        ),
        (
            "chunked, with an extension",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
            Method::GET,
            (200, Chunked, true),
            b"hello world",
        ),
        (
            "chunked is the last coding",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
            Method::GET,
            (200, Chunked, true),
            b"hi",
        ),
        (
            "a coding other than chunked last: read until the close",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nraw bytes",
            Method::GET,
            (200, Close, false),
            b"raw bytes",
        ),
        (
            "neither: read until the close",
            b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nuntil the close",
            Method::GET,
            (200, Close, false),
            b"until the close",
        ),
        (
            "HEAD: no body, whatever Content-Length says",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            Method::HEAD,
            (200, Empty, true),
            b"",
        ),
        (
            "HEAD: chunked says nothing either",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Method::HEAD,
            (200, Empty, true),
            b"",
        ),
        (
            "204",
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            Method::GET,
            (204, Empty, true),
            b"",
        ),
        (
            "304",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
            Method::GET,
            (304, Empty, true),
            b"",
        ),
        (
            "100 Continue, then the response",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            Method::POST,
            (200, Length(2), true),
            b"ok",
        ),
        (
            "103 Early Hints with fields, then 100, then the response",
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
            (201, Empty, true),
            b"",
        ),
        (
            "101 ends the HTTP exchange: no body, no reuse",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\nframes",
            Method::GET,
            (101, Empty, false),
            b"",
        ),
        (
            "2xx to CONNECT is a tunnel",
            b"HTTP/1.1 200 OK\r\n\r\n",
            Method::CONNECT,
            (200, Empty, false),
            b"",
        ),
        (
            "Connection: close",
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 1\r\n\r\nx",
            Method::GET,
            (200, Length(1), false),
            b"x",
        ),
        (
            "HTTP/1.0 closes by default",
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
            Method::GET,
            (200, Length(1), false),
            b"x",
        ),
        (
            "HTTP/1.0 with keep-alive",
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx",
            Method::GET,
            (200, Length(1), true),
            b"x",
        ),
        (
            "a reason phrase that is not UTF-8 (httparse gives a static \"\" for it)",
            b"HTTP/1.1 100 C\xffntinue\r\n\r\nHTTP/1.1 200 F\xffne\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
            (200, Empty, true),
            b"",
        ),
        (
            "a status without reason phrase",
            b"HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n",
            Method::GET,
            (404, Empty, true),
            b"",
        ),
    ];
    for (name, input, method, want, body) in cases {
        let o = decoded(input, method);
        assert_eq!(head(&o), Ok(Some(*want)), "{name}");
        assert_eq!(o.body, *body, "{name}");
        assert_eq!(o.end, End::Complete, "{name}");
    }
    let hints = decoded(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
    );
    assert!(field(&hints, "link").is_empty(), "an interim head's fields");
    assert_eq!(field(&hints, "x-a"), [b"1"]);
}

#[test]
fn heads_that_could_smuggle_or_do_not_parse_are_refused() {
    let cases: &[Refused] = &[
        (
            "Transfer-Encoding and Content-Length",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            |e| *e == Malformed::LengthAndEncoding,
        ),
        (
            "differing Content-Lengths",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            |e| *e == Malformed::ContentLength,
        ),
        (
            "differing Content-Lengths in a list",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!",
            |e| *e == Malformed::ContentLength,
        ),
        (
            "a signed Content-Length",
            b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
            |e| *e == Malformed::ContentLength,
        ),
        (
            "an empty Content-Length",
            b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            |e| *e == Malformed::ContentLength,
        ),
        (
            "a Content-Length past u64",
            b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n",
            |e| *e == Malformed::ContentLength,
        ),
        (
            "a Content-Length with a unit",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5 bytes\r\n\r\nhello",
            |e| *e == Malformed::ContentLength,
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            |e| *e == Malformed::EncodingInHttp10,
        ),
        (
            "obs-fold",
            b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 0\r\n\r\n",
            |e| matches!(e, Malformed::Head(_)),
        ),
        ("not HTTP", b"SSH-2.0-OpenSSH_9.6\r\n\r\n", |e| {
            matches!(e, Malformed::Head(httparse::Error::Version))
        }),
        (
            "a status that is no number",
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            |e| matches!(e, Malformed::Head(httparse::Error::Status)),
        ),
        ("a status below 100", b"HTTP/1.1 099 Nope\r\n\r\n", |e| {
            *e == Malformed::Header("status")
        }),
        (
            "a space before the colon",
            b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
            |e| matches!(e, Malformed::Head(_)),
        ),
        (
            "a NUL in a value",
            b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 0\r\n\r\n",
            |e| matches!(e, Malformed::Head(_) | Malformed::Header("value")),
        ),
    ];
    for (name, input, want) in cases {
        let o = decoded(input, &Method::GET);
        match &o.head {
            Err(e) => assert!(want(e), "{name}: {e:?}"),
            Ok(h) => panic!("{name}: accepted as {h:?}"),
        }
    }
}

#[test]
fn heads_have_limits() {
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=super::MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let o = decode(&many, &Method::GET, many.len());
    assert_eq!(
        o.head,
        Err(Malformed::Head(httparse::Error::TooManyHeaders))
    );

    let mut long = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
    long.resize(MAX_HEAD + 10, b'a');
    long.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
    for piece in [long.len(), 4096, 1000] {
        let o = decode(&long, &Method::GET, piece);
        assert_eq!(o.head, Err(Malformed::HeadTooLarge), "pieces of {piece}");
    }
    // Just under the limit is fine.
    let mut under = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
    under.resize(MAX_HEAD - 30, b'a');
    under.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(under.len(), MAX_HEAD - 7);
    let o = decode(&under, &Method::GET, 4096);
    assert!(matches!(o.head, Ok(Some((200, Framing::Empty, true, _)))));
}

#[test]
fn bodies_cut_short_are_told_apart_from_whole_ones() {
    let cut = decoded(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123",
        &Method::GET,
    );
    assert_eq!((cut.body.as_slice(), &cut.end), (&b"0123"[..], &End::Cut));
    let chunk_cut = decoded(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n",
        &Method::GET,
    );
    assert_eq!(chunk_cut.body, b"0123456789");
    assert_eq!(chunk_cut.end, End::Cut);
    let no_head = decoded(b"HTTP/1.1 200 OK\r\nContent-Le", &Method::GET);
    assert_eq!(no_head.head, Ok(None));
}

/// The head's bytes are split off the buffer and the values share them; what follows
/// (the body, or the next response) stays in the buffer.
#[test]
fn a_parsed_head_leaves_the_body_in_the_buffer() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 200 Fine Thanks\r\nContent-Length: 5\r\nX-Id: 42\r\n\r\nhello"[..],
    );
    let start = buf.as_ptr().addr();
    let mut headers = HeaderMap::new();
    headers.insert("x-left-over", HeaderValue::from_static("from the request"));
    let head = parse_head(&mut buf, &Method::GET, &mut headers, HeadMode::Map)
        .expect("parses")
        .expect("whole");
    assert_eq!(&buf[..], b"hello");
    assert_eq!(headers.len(), 2, "the map was cleared first");
    let id = &headers["x-id"];
    let offset = id.as_bytes().as_ptr().addr() - start;
    assert_eq!(offset, 51, "the value is a slice of the read buffer");
    assert_eq!(
        head.reason.as_ref().map(|r| r.as_bytes()),
        Some(&b"Fine Thanks"[..]),
        "a reason phrase of its own is kept"
    );
    let mut canonical = BytesMut::from(&b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"[..]);
    let head = parse_head(&mut canonical, &Method::GET, &mut headers, HeadMode::Map)
        .expect("parses")
        .expect("whole");
    assert!(head.reason.is_none());
}

#[test]
fn request_heads_are_written_as_hyper_wrote_them() {
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, HeaderValue::from_static("b:80"));
    headers.append("x-a", HeaderValue::from_static("1"));
    headers.append("x-a", HeaderValue::from_static("2"));
    let mut out = Vec::new();
    let uri: Uri = "/p/q?x=1&y".parse().expect("uri");
    encode_head(&Method::PATCH, &uri, &headers, None, &mut out);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "PATCH /p/q?x=1&y HTTP/1.1\r\nhost: b:80\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
    );
    out.clear();
    encode_head(
        &Method::GET,
        &Uri::default(),
        &HeaderMap::new(),
        None,
        &mut out,
    );
    assert_eq!(out, b"GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn request_bodies_are_framed_as_hyper_framed_them() {
    let with = |pairs: &[(&'static str, &'static str)]| {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    };
    let te = header::TRANSFER_ENCODING;
    let cl = header::CONTENT_LENGTH;
    // Bodiless: the headers go as they are, without a coding.
    let mut h = with(&[("content-length", "0"), ("transfer-encoding", "chunked")]);
    assert_eq!(
        request_framing(&mut h, true, Some(0)),
        RequestFraming::Empty
    );
    assert!(!h.contains_key(&te));
    assert_eq!(h[&cl], "0");
    // Chunked (set by forward for an unknown length) wins over a Content-Length.
    let mut h = with(&[("content-length", "3"), ("transfer-encoding", "chunked")]);
    assert_eq!(
        request_framing(&mut h, false, None),
        RequestFraming::Chunked
    );
    assert!(!h.contains_key(&cl));
    // The client's Content-Length.
    let mut h = with(&[("content-length", "3")]);
    assert_eq!(
        request_framing(&mut h, false, Some(3)),
        RequestFraming::Length(3)
    );
    // None of either: the exact size if known, else chunked.
    let mut h = HeaderMap::new();
    assert_eq!(
        request_framing(&mut h, false, Some(7)),
        RequestFraming::Length(7)
    );
    assert_eq!(h[&cl], "7");
    let mut h = with(&[("content-length", "seven")]);
    assert_eq!(
        request_framing(&mut h, false, None),
        RequestFraming::Chunked
    );
    assert_eq!(h[&te], "chunked");
    assert!(!h.contains_key(&cl));
}

mod properties {
    use proptest::prelude::*;

    use super::super::super::fuzz;
    use super::{End, Method};

    /// Pieces of responses: status lines, framing fields, chunk-size lines,
    /// extensions, data, CRLFs and stray bytes, so that jumbles of them reach deep
    /// into the parser and the decoder.
    fn token() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"HTTP/1.1 200 OK\r\n".to_vec()),
            Just(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()),
            Just(b"HTTP/1.0 204 No Content\r\n".to_vec()),
            Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
            Just(b"Content-Length: 3\r\n".to_vec()),
            Just(b"Connection: close\r\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"0".to_vec()),
            Just(b"5".to_vec()),
            Just(b"fF".to_vec()),
            Just(b";ext=v".to_vec()),
            Just(b" ".to_vec()),
            Just(b"hello".to_vec()),
            Just(b"X-T: 1\r\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 1..4),
        ]
    }

    proptest! {
        /// Any bytes in any pieces, and any jumble of response tokens: nothing
        /// panics, and the outcome is the one of a single read (the fuzz target's
        /// checks, run here on every `cargo test`).
        #[test]
        fn any_bytes_decode_the_same_in_any_pieces(
            control in any::<u8>(),
            input in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..400),
                proptest::collection::vec(token(), 0..40).prop_map(|t| t.concat()),
            ],
        ) {
            let mut data = vec![control];
            data.extend_from_slice(&input);
            fuzz::response(&data);
        }

        /// A chunked body of any chunks, with extensions and trailers or not,
        /// decodes back to its data, split anywhere.
        #[test]
        fn chunked_bodies_decode_back_to_their_data(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..6),
            extension in "(;[a-z]{1,5}(=[a-z0-9]{0,5})?){0,2}",
            trailers in any::<bool>(),
            piece in 1usize..64,
        ) {
            let mut input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for c in &chunks {
                input.extend_from_slice(format!("{:x}{extension}\r\n", c.len()).as_bytes());
                input.extend_from_slice(c);
                input.extend_from_slice(b"\r\n");
            }
            input.extend_from_slice(b"0\r\n");
            if trailers {
                input.extend_from_slice(b"X-Sum: 7\r\n");
            }
            input.extend_from_slice(b"\r\n");
            let o = fuzz::decode(&input, &Method::GET, piece);
            prop_assert_eq!(o.end, End::Complete);
            prop_assert_eq!(o.body, chunks.concat());
            prop_assert_eq!(o.trailers.len(), usize::from(trailers));
        }
    }
}

/// The names kept by position from one head to the next (`Names`) never show a
/// field under another's name: heads whose fields change places, case, length past
/// what is kept, and count, one after another on one thread, each parse to their
/// own names, the same as when parsed first.
#[test]
fn names_kept_from_earlier_heads_never_rename_a_field() {
    let long = "x-a-name-longer-than-the-thirty-two-bytes-kept";
    let heads = [
        "HTTP/1.1 200 OK\r\nServer: a\r\nContent-Length: 0\r\nX-Custom: 1\r\n\r\n".to_owned(),
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nServer: b\r\nx-custom2: 2\r\n\r\n".to_owned(),
        "HTTP/1.1 200 OK\r\nSERVER: c\r\nContent-Length: 0\r\n\r\n".to_owned(),
        format!("HTTP/1.1 200 OK\r\n{long}: 3\r\nContent-Length: 0\r\n{long}: 4\r\n\r\n"),
        "HTTP/1.1 200 OK\r\nServer: a\r\nContent-Length: 0\r\nX-Custom: 1\r\n\r\n".to_owned(),
        // As long as the name kept at its place, and not it.
        "HTTP/1.1 200 OK\r\nServer: a\r\nContent-Length: 0\r\nX-Other1: 5\r\n\r\n".to_owned(),
    ];
    let fields = |text: &str| {
        let mut buf = BytesMut::from(text.as_bytes());
        let mut headers = HeaderMap::new();
        parse_head(&mut buf, &Method::GET, &mut headers, HeadMode::Map)
            .expect("parses")
            .expect("whole");
        headers
            .iter()
            .map(|(n, v)| format!("{n}={}", v.to_str().expect("text")))
            .collect::<Vec<_>>()
    };
    // Each head parsed after all the others have left their names behind.
    let warm: Vec<Vec<String>> = heads.iter().map(|h| fields(h)).collect();
    let again: Vec<Vec<String>> = heads.iter().rev().map(|h| fields(h)).collect();
    let expected: [&[&str]; 6] = [
        &["server=a", "content-length=0", "x-custom=1"],
        &["content-length=0", "server=b", "x-custom2=2"],
        &["server=c", "content-length=0"],
        &[
            &format!("{long}=3"),
            &format!("{long}=4"),
            "content-length=0",
        ],
        &["server=a", "content-length=0", "x-custom=1"],
        &["server=a", "content-length=0", "x-other1=5"],
    ];
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(warm[i], *want, "head {i}");
        assert_eq!(again[heads.len() - 1 - i], *want, "head {i}, parsed again");
    }
}

/// Heads parsed for a route whose filters do not see the response: the map has what
/// stripping hop-by-hop fields would leave, and the head still frames the body and
/// says whether the connection stays open from the fields it did not keep.
#[test]
fn hop_by_hop_fields_dropped_as_parsed() {
    let parsed = |text: &str| {
        let mut buf = BytesMut::from(text.as_bytes());
        let mut headers = HeaderMap::new();
        let head = parse_head(&mut buf, &Method::GET, &mut headers, HeadMode::Bare)
            .expect("parses")
            .expect("whole");
        let mut names: Vec<String> = headers.keys().map(|n| n.as_str().to_owned()).collect();
        names.sort();
        (head.framing, head.keep_alive, names)
    };
    let nginx =
        "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n";
    assert_eq!(
        parsed(nginx),
        (
            Framing::Length(2),
            true,
            vec!["content-length".into(), "server".into()]
        )
    );
    let every = "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\
                 Upgrade: h2c\r\nTrailer: X-T\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\n\
                 Proxy-Authenticate: Basic\r\nX-Kept: 1\r\n\r\n";
    assert_eq!(
        parsed(every),
        (Framing::Chunked, true, vec!["x-kept".into()])
    );
    // Listed names go too, before or after the Connection that lists them; the Host
    // never does.
    let listed = "HTTP/1.1 200 OK\r\nX-Before: 1\r\nConnection: keep-alive, X-Before, X-After, Host\r\n\
                  X-After: 2\r\nHost: h\r\nX-Kept: 3\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(
        parsed(listed),
        (
            Framing::Empty,
            true,
            vec!["content-length".into(), "host".into(), "x-kept".into()]
        )
    );
    // `close`: the connection ends, and a field named Close goes with it.
    let close = "HTTP/1.1 200 OK\r\nClose: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(
        parsed(close),
        (Framing::Empty, false, vec!["content-length".into()])
    );
    // HTTP/1.0 stays open only with keep-alive, which is not kept.
    let old = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(
        parsed(old),
        (Framing::Empty, true, vec!["content-length".into()])
    );
}

/// Heads left in their bytes for an HTTP/1 client: the kept lines are the backend's
/// own, hop-by-hop ones cut out wherever they are, and what is not an ordinary
/// answer (or has a line we would not copy) goes into the map instead.
#[test]
fn raw_heads_keep_the_backends_lines_but_hop_by_hop_ones() {
    let raw = |text: &str, method: Method| {
        let mut buf = BytesMut::from(text.as_bytes());
        let mut headers = HeaderMap::new();
        let head = parse_head(&mut buf, &method, &mut headers, HeadMode::Raw)
            .expect("parses")
            .expect("whole");
        let lines = head.raw.as_ref().map(|r| (r.text(), r.length, r.date));
        (lines, headers.len(), head.framing, head.keep_alive)
    };
    assert_eq!(
        raw(
            "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 07 Dec 2026 17:00:00 GMT\r\n\
             Content-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
            Method::GET
        ),
        (
            Some((
                "Server: nginx\r\nDate: Mon, 07 Dec 2026 17:00:00 GMT\r\nContent-Length: 2\r\n"
                    .into(),
                Some(2),
                true
            )),
            0,
            Framing::Length(2),
            true
        )
    );
    // Dropped lines in the middle; a chunked body's coding is the backend's hop.
    assert_eq!(
        raw(
            "HTTP/1.1 404 Not Found\r\nX-A: 1\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\
             X-B:  two words  \r\nUpgrade: h2c\r\n\r\n",
            Method::POST
        ),
        (
            Some(("X-A: 1\r\nX-B:  two words  \r\n".into(), None, false)),
            0,
            Framing::Chunked,
            true
        )
    );
    // Into the map: answers whose length fields have rules of their own, a
    // Connection naming another field, bare LF line ends, and no body.
    for (text, method) in [
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Method::HEAD),
        ("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", Method::GET),
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            Method::GET,
        ),
        (
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        ),
        (
            "HTTP/1.1 200 OK\r\nConnection: x-a\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        ),
        (
            "HTTP/1.1 200 OK\nX-A: 1\nContent-Length: 0\n\n",
            Method::GET,
        ),
        // No body: the connection goes back to the pool before the lines are written.
        (
            "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        ),
    ] {
        let (lines, fields, _, _) = raw(text, method.clone());
        assert_eq!(lines, None, "{text:?} to {method}");
        assert!(fields > 0, "{text:?}: the fields went into the map");
    }
}

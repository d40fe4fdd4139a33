//! The chunked decoder against the cases of hyper's decoder tests and RFC 9112 §7.1,
//! fed whole, a byte at a time and split in two at every byte.

use bytes::BytesMut;

use super::super::error::Malformed;
use super::{Decoded, Decoder, MAX_EXTENSIONS, MAX_TRAILERS};

/// What a chunked body decoded to.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    data: Vec<u8>,
    trailers: Vec<(String, String)>,
    /// `None`: the bytes ended before the body; else the error, or `Ok` at its end.
    end: Option<Result<(), Malformed>>,
}

fn run<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> Got {
    let mut pieces = pieces;
    let mut d = Decoder::default();
    let mut buf = BytesMut::new();
    let mut got = Got {
        data: Vec::new(),
        trailers: Vec::new(),
        end: None,
    };
    loop {
        match d.decode(&mut buf) {
            Ok(Decoded::Data(b)) => got.data.extend_from_slice(&b),
            Ok(Decoded::Trailers(t)) => {
                got.trailers = t
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_str().expect("ascii").to_owned()))
                    .collect();
                got.end = Some(Ok(()));
                return got;
            }
            Ok(Decoded::End) => {
                got.end = Some(Ok(()));
                return got;
            }
            Ok(Decoded::More) => match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => return got,
            },
            Err(e) => {
                got.end = Some(Err(e));
                return got;
            }
        }
    }
}

/// Decodes `body` whole, and checks every other way of splitting it decodes the same.
fn decoded(body: &[u8]) -> Got {
    let whole = run(std::iter::once(body));
    assert_eq!(run(body.chunks(1)), whole, "a byte at a time: {body:?}");
    for at in 1..body.len() {
        let (a, b) = body.split_at(at);
        assert_eq!(run([a, b].into_iter()), whole, "split at {at}");
    }
    whole
}

/// hyper's `test_read_chunk_size`: the size line's forms, each followed by its data
/// and the last chunk.
#[test]
fn size_lines_as_hyper_reads_them() {
    let sizes: &[(&str, usize)] = &[
        ("1\r\n", 1),
        ("01\r\n", 1),
        ("0\r\n", 0),
        ("00\r\n", 0),
        ("A\r\n", 10),
        ("a\r\n", 10),
        ("Ff\r\n", 255),
        ("Ff   \r\n", 255),
        ("1;extension\r\n", 1),
        ("a;ext name=value\r\n", 10),
        ("1;extension;extension2\r\n", 1),
        ("1;;;  ;\r\n", 1),
        ("2; extension...\r\n", 2),
        ("3   ; extension=123\r\n", 3),
        ("3   ;\r\n", 3),
        ("3   ;   \r\n", 3),
        ("3\t;\t\r\n", 3),
    ];
    for (line, size) in sizes {
        let mut body = line.as_bytes().to_vec();
        if *size > 0 {
            body.extend(std::iter::repeat_n(b'x', *size));
            body.extend_from_slice(b"\r\n0\r\n");
        }
        body.extend_from_slice(b"\r\n");
        let got = decoded(&body);
        assert_eq!(got.end, Some(Ok(())), "{line:?}");
        assert_eq!(got.data.len(), *size, "{line:?}");
    }
}

#[test]
fn broken_size_lines_are_refused() {
    let cases: &[(&str, Option<Malformed>)] = &[
        // Missing LF or CRLF.
        ("F\rF", Some(Malformed::ChunkCrlf)),
        ("F", None),
        // Missing digit.
        ("\r\n\r\n", Some(Malformed::ChunkSize)),
        ("\r\n", Some(Malformed::ChunkSize)),
        // Invalid hex digit.
        ("X\r\n", Some(Malformed::ChunkSize)),
        ("1X\r\n", Some(Malformed::ChunkSize)),
        ("-\r\n", Some(Malformed::ChunkSize)),
        ("-1\r\n", Some(Malformed::ChunkSize)),
        ("0x1\r\n", Some(Malformed::ChunkSize)),
        // Invalid extensions.
        ("1 invalid extension\r\n", Some(Malformed::ChunkSize)),
        ("1 A\r\n", Some(Malformed::ChunkSize)),
        ("1;no CRLF", None),
        ("1;reject\nnewlines\r\n", Some(Malformed::ChunkExtension)),
        // A bare LF after the size.
        ("1\n", Some(Malformed::ChunkSize)),
        // Overflow: 17 hex digits.
        ("f0000000000000003\r\n", Some(Malformed::ChunkSize)),
        ("10000000000000000\r\n", Some(Malformed::ChunkSize)),
    ];
    for (body, want) in cases {
        let got = decoded(body.as_bytes());
        assert_eq!(got.end, want.clone().map(Err), "{body:?}");
        assert!(got.data.is_empty(), "{body:?}");
    }
    // The largest size there is parses (and the body is then cut short).
    let got = decoded(b"ffffffffffffffff\r\nabc");
    assert_eq!((got.data.as_slice(), got.end), (&b"abc"[..], None));
}

#[test]
fn data_must_end_with_crlf() {
    // hyper's `test_read_chunked_with_missing_zero_digit`.
    let got = decoded(b"1\r\nZ\r\n\r\n\r\n");
    assert_eq!(got.data, b"Z");
    assert_eq!(got.end, Some(Err(Malformed::ChunkSize)));
    let got = decoded(b"1\r\nZX\r\n0\r\n\r\n");
    assert_eq!(got.data, b"Z");
    assert_eq!(got.end, Some(Err(Malformed::ChunkCrlf)));
    let got = decoded(b"1\r\nZ\n0\r\n\r\n");
    assert_eq!(got.end, Some(Err(Malformed::ChunkCrlf)));
    // hyper's `test_read_chunked_early_eof`: 7 of 9 bytes, then nothing.
    let got = decoded(b"9\r\nfoo bar");
    assert_eq!((got.data.as_slice(), got.end), (&b"foo bar"[..], None));
}

#[test]
fn chunk_extensions_have_a_limit_over_the_whole_body() {
    // hyper's `test_read_chunked_extensions_over_limit`: each fine, both too much.
    let per_chunk = usize::try_from(MAX_EXTENSIONS * 2 / 3).expect("small");
    let mut body = Vec::new();
    for _ in 0..2 {
        body.extend_from_slice(b"1;");
        body.extend(std::iter::repeat_n(b'x', per_chunk));
        body.extend_from_slice(b"\r\nA\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let got = run(std::iter::once(body.as_slice()));
    assert_eq!(got.data, b"A");
    assert_eq!(got.end, Some(Err(Malformed::ChunkExtension)));
    assert_eq!(run(body.chunks(1000)), got);
}

#[test]
fn trailers_come_out_as_fields() {
    let got = decoded(b"10\r\n1234567890abcdef\r\n0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n");
    assert_eq!(got.data, b"1234567890abcdef");
    assert_eq!(
        got.trailers,
        [
            ("x-checksum".to_owned(), "abc".to_owned()),
            ("x-other".to_owned(), "1".to_owned())
        ]
    );
    assert_eq!(got.end, Some(Ok(())));
    // hyper's `test_read_chunked_trailer_with_missing_lf`.
    let got = decoded(b"10\r\n1234567890abcdef\r\n0\r\nbad\r\r\n");
    assert!(
        matches!(got.end, Some(Err(Malformed::Trailers(_)))),
        "{got:?}"
    );
    // Obs-fold in a trailer.
    let got = decoded(b"0\r\nX-A: a\r\n b\r\n\r\n");
    assert!(
        matches!(got.end, Some(Err(Malformed::Trailers(_)))),
        "{got:?}"
    );
    // The section cut short.
    assert_eq!(decoded(b"0\r\nX-A: a\r\n").end, None);
    assert_eq!(decoded(b"0\r\n\r").end, None);
}

#[test]
fn trailers_have_limits() {
    let fields = |n: usize, size: usize| {
        let mut body = b"0\r\n".to_vec();
        for i in 0..n {
            body.extend_from_slice(format!("t{i}: {}\r\n", "x".repeat(size)).as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body
    };
    // hyper's `test_trailer_max_headers_allows_exact_limit`.
    let limit = super::MAX_HEADERS;
    let got = run(std::iter::once(fields(limit, 1).as_slice()));
    assert_eq!((got.trailers.len(), got.end), (limit, Some(Ok(()))));
    let got = run(std::iter::once(fields(limit + 1, 1).as_slice()));
    assert_eq!(got.end, Some(Err(Malformed::TrailersTooLarge)));
    // One huge field, and many small ones over the size.
    for body in [fields(1, MAX_TRAILERS), fields(90, MAX_TRAILERS / 80)] {
        assert_eq!(
            run(std::iter::once(body.as_slice())).end,
            Some(Err(Malformed::TrailersTooLarge))
        );
        assert_eq!(
            run(body.chunks(512)).end,
            Some(Err(Malformed::TrailersTooLarge))
        );
    }
}

/// The end is known as soon as its bytes are there: after the last data, before
/// another call, so that the connection can go back to the pool with that frame.
#[test]
fn the_end_is_seen_with_the_last_data() {
    let mut buf = BytesMut::from(&b"5\r\nhello\r\n0\r\n\r\n"[..]);
    let start = buf.as_ptr().addr();
    let mut d = Decoder::default();
    let Ok(Decoded::Data(data)) = d.decode(&mut buf) else {
        panic!("data first")
    };
    assert_eq!(&data[..], b"hello");
    assert_eq!(
        data.as_ptr().addr() - start,
        3,
        "split off the buffer, not copied"
    );
    assert!(d.is_end());
    assert!(buf.is_empty());
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::End)));
    // With trailers to come it is not the end yet.
    let mut buf = BytesMut::from(&b"5\r\nhello\r\n0\r\nX: y\r\n\r\n"[..]);
    let mut d = Decoder::default();
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Data(_))));
    assert!(!d.is_end());
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Trailers(_))));
    assert!(d.is_end());
    // An error found after the data is kept for the next call.
    let mut buf = BytesMut::from(&b"5\r\nhelloXX"[..]);
    let mut d = Decoder::default();
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Data(_))));
    assert!(!d.is_end());
    assert_eq!(d.decode(&mut buf).err(), Some(Malformed::ChunkCrlf));
}

//! The response parser ([`super::codec`]) and the chunked decoder
//! ([`super::chunked`]) over bytes as a backend could send them, for the fuzz target
//! `h1_response` and for tests: the bytes arrive in pieces, as reads would bring
//! them, and must decode the same whatever the pieces.

use bytes::BytesMut;
use http::{HeaderMap, Method};

use super::{
    chunked::{Decoded, Decoder},
    codec::{self, Framing, HeadMode},
    error::Malformed,
    raw::RawHead,
};

/// Header or trailer fields in order, as text names and byte values.
pub(crate) type Fields = Vec<(String, Vec<u8>)>;

/// A final head as decoded: status, framing, keep-alive, fields.
pub(crate) type Seen = (u16, Framing, bool, Fields);

/// What a response decoded to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The final head's status, framing, keep-alive and fields in order; `Ok(None)`
    /// when the bytes ended before a whole head.
    pub head: Result<Option<Seen>, Malformed>,
    /// The body's bytes, whatever came before its end or failure.
    pub body: Vec<u8>,
    /// Trailer fields.
    pub trailers: Fields,
    pub end: End,
}

/// How the body ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// As its framing says (for a close-delimited body: the bytes' end).
    Complete,
    /// The bytes ended first.
    Cut,
    /// The chunked coding is broken.
    Failed(Malformed),
    /// There was no head to frame a body.
    NoHead,
}

/// The fields of a raw head's lines, names in lower case as a map has them.
fn raw_fields(raw: &RawHead) -> Fields {
    let mut text = Vec::new();
    raw.write(&mut text);
    assert!(
        text.is_empty() || text.ends_with(b"\r\n"),
        "lines end with CRLF"
    );
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| {
            let line = line.strip_suffix(b"\r").expect("CRLF");
            let colon = line.iter().position(|&b| b == b':').expect("a name");
            (
                String::from_utf8_lossy(&line[..colon]).to_ascii_lowercase(),
                line[colon + 1..].trim_ascii().to_vec(),
            )
        })
        .collect()
}

fn fields(map: &HeaderMap) -> Fields {
    map.iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// Decodes `input` as the response to a `method` request, fed in pieces of `piece`
/// bytes.
pub(crate) fn decode(input: &[u8], method: &Method, piece: usize) -> Outcome {
    decode_pieces(input.chunks(piece.max(1)), method)
}

/// Decodes the bytes of `pieces`, one after the other, as the response to a
/// `method` request.
pub(crate) fn decode_pieces<'a>(
    pieces: impl Iterator<Item = &'a [u8]>,
    method: &Method,
) -> Outcome {
    decode_as(pieces, method, HeadMode::Map)
}

/// As [`decode_pieces`], the head's fields taken as `mode` says (see
/// [`codec::parse_head`]); raw fields are read back from their text.
pub(crate) fn decode_as<'a>(
    mut pieces: impl Iterator<Item = &'a [u8]>,
    method: &Method,
    mode: HeadMode,
) -> Outcome {
    let mut buf = BytesMut::new();
    let mut map = HeaderMap::new();
    let mut out = Outcome {
        head: Ok(None),
        body: Vec::new(),
        trailers: Vec::new(),
        end: End::NoHead,
    };
    let head = loop {
        match codec::parse_head(&mut buf, method, &mut map, mode) {
            Ok(Some(head)) => break head,
            Ok(None) => match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => return out,
            },
            Err(e) => {
                out.head = Err(e);
                return out;
            }
        }
    };
    let seen = match &head.raw {
        Some(raw) => raw_fields(raw),
        None => fields(&map),
    };
    out.head = Ok(Some((
        head.status.as_u16(),
        head.framing,
        head.keep_alive,
        seen,
    )));
    let mut more = |buf: &mut BytesMut| match pieces.next() {
        Some(p) => {
            buf.extend_from_slice(p);
            true
        }
        None => false,
    };
    out.end = match head.framing {
        Framing::Empty => End::Complete,
        Framing::Length(n) => {
            let mut left = n;
            loop {
                let k = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
                out.body.extend_from_slice(&buf.split_to(k));
                left -= k as u64;
                if left == 0 {
                    break End::Complete;
                }
                if !more(&mut buf) {
                    break End::Cut;
                }
            }
        }
        Framing::Chunked => {
            let mut decoder = Decoder::default();
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Decoded::Data(data)) => {
                        assert!(!data.is_empty(), "a data frame is never empty");
                        out.body.extend_from_slice(&data);
                    }
                    Ok(Decoded::Trailers(t)) => {
                        out.trailers = fields(&t);
                        assert!(decoder.is_end());
                        break End::Complete;
                    }
                    Ok(Decoded::End) => {
                        assert!(decoder.is_end());
                        break End::Complete;
                    }
                    Ok(Decoded::More) => {
                        if !more(&mut buf) {
                            break End::Cut;
                        }
                    }
                    Err(e) => break End::Failed(e),
                }
            }
        }
        Framing::Close => {
            while more(&mut buf) {}
            out.body = buf.to_vec();
            End::Complete
        }
    };
    out
}

/// The fuzz target: the first byte picks the request method and the size of the
/// pieces, the rest is what the backend sent. Whatever it is, nothing panics, the
/// outcome is the same in pieces as in one read, and a body that completed is as
/// long as its head said.
pub fn response(data: &[u8]) {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let method = match control & 3 {
        0 => Method::GET,
        1 => Method::HEAD,
        2 => Method::POST,
        _ => Method::CONNECT,
    };
    let piece = usize::from(control >> 2) + 1;
    let whole = decode(input, &method, input.len());
    let split = decode(input, &method, piece);
    assert_eq!(whole, split, "pieces of {piece} bytes");
    // Dropped as parsed, the hop-by-hop fields are the ones stripping the whole map
    // would remove, and nothing else about the response changes.
    let dropped = decode_as(input.chunks(piece), &method, HeadMode::Bare);
    assert_eq!(
        dropped,
        stripped(&whole),
        "hop-by-hop fields dropped as parsed"
    );
    // Left in the head's bytes, the fields that go to the client are the same ones
    // (in the backend's order, where a map groups them by name).
    let raw = decode_as(input.chunks(piece), &method, HeadMode::Raw);
    assert_eq!(sorted(raw), sorted(dropped), "raw fields");
    if let Ok(Some((status, framing, keep_alive, _))) = &whole.head {
        assert!(!(100..200).contains(status) || *status == 101);
        match framing {
            Framing::Empty => assert!(whole.body.is_empty()),
            Framing::Length(n) if whole.end == End::Complete => {
                assert_eq!(whole.body.len() as u64, *n);
            }
            Framing::Close => assert!(!keep_alive),
            _ => {}
        }
    }
}

/// `outcome` with its head's fields in a fixed order.
fn sorted(mut outcome: Outcome) -> Outcome {
    if let Ok(Some((_, _, _, fields))) = &mut outcome.head {
        fields.sort();
    }
    outcome
}

/// `outcome` with its head's fields as [`strip_hop_by_hop`] leaves them, in the
/// order a map dropping them as parsed has them (the strip reorders what it keeps).
///
/// [`strip_hop_by_hop`]: crate::proxy::headers::strip_hop_by_hop
fn stripped(outcome: &Outcome) -> Outcome {
    let mut out = outcome.clone();
    if let Ok(Some((_, _, _, fields))) = &mut out.head {
        let mut map = HeaderMap::new();
        for (n, v) in fields.iter() {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(n.as_bytes()),
                http::HeaderValue::from_bytes(v),
            ) {
                map.append(n, v);
            }
        }
        crate::proxy::headers::strip_hop_by_hop(&mut map);
        fields.retain(|(n, _)| map.contains_key(n.as_str()));
    }
    out
}

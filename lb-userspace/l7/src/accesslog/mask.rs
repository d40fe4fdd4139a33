//! `maskAccessLogQuery`: the query of a logged line as skipper writes it when a route
//! masks keys. Skipper then does not log the query it received: it parses the query
//! the route's filters left (Go's `url.ParseQuery`), replaces each masked key's values
//! by one value, the xxHash64 of the first, and writes the whole query again with Go's
//! `url.Values.Encode` (keys sorted, values percent-encoded). We do the same, byte for
//! byte, so masked lines from skipper and from us can be joined on the hashes.
//!
//! Nothing is allocated once the scratch buffers have grown to the longest query seen:
//! decoded keys and values go into one reused byte buffer, pairs into a reused vector
//! of offsets, and they are sorted in place.

use std::ops::Range;

/// Go's `url.ParseQuery` refuses a query with more parameters than this (counted as
/// the `&`s plus one, empty ones too) and returns none at all; skipper, which ignores
/// the error, then logs an empty query.
const GO_MAX_QUERY_PARAMS: usize = 10_000;

/// The seed of skipper's hash (`xxhash.Sum64String` takes none: it is 0).
const SEED: u64 = 0;

/// The hash skipper logs for a masked value: XXH64, seed 0, of the decoded value's
/// bytes (printed in decimal by [`MaskScratch::write`]).
pub fn hash(value: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(value, SEED)
}

/// One decoded pair: key `start..mid` and value `mid..end` in the decoded buffer, and
/// its place in the query (Go keeps a key's values in the order they came).
#[derive(Clone, Copy, Debug)]
struct Pair {
    start: usize,
    mid: usize,
    end: usize,
    seq: usize,
}

impl Pair {
    fn key(self) -> Range<usize> {
        self.start..self.mid
    }
    fn value(self) -> Range<usize> {
        self.mid..self.end
    }
}

/// Reused buffers for re-encoding a masked query.
#[derive(Debug, Default)]
pub struct MaskScratch {
    decoded: Vec<u8>,
    pairs: Vec<Pair>,
}

impl MaskScratch {
    /// Appends `query` (raw, without `?`) to `out` as skipper logs it under
    /// `maskAccessLogQuery(mask…)`: pairs Go cannot decode dropped, keys sorted by
    /// their decoded bytes, a masked key whose first value is non-empty written once
    /// with that value's [`hash`] in decimal, every other value kept, all of it
    /// percent-encoded as Go's `QueryEscape` does. An empty query, or one Go refuses,
    /// appends nothing.
    ///
    /// What is appended is ASCII letters, digits and `-_.~%+=&` only, so it needs no
    /// further escaping in a text or JSON line.
    pub fn write(&mut self, query: &[u8], mask: &[String], out: &mut Vec<u8>) {
        self.parse(query);
        let Self { decoded, pairs } = self;
        let decoded = &decoded[..];
        pairs.sort_unstable_by(|a, b| {
            decoded[a.key()]
                .cmp(&decoded[b.key()])
                .then(a.seq.cmp(&b.seq))
        });
        let mut first = true;
        let mut rest = &pairs[..];
        while let Some(head) = rest.first() {
            let key = &decoded[head.key()];
            let same = rest.iter().take_while(|p| &decoded[p.key()] == key).count();
            let (group, tail) = rest.split_at(same);
            rest = tail;
            let value = &decoded[head.value()];
            if !value.is_empty() && mask.iter().any(|m| m.as_bytes() == key) {
                let mut digits = [0u8; 20];
                let n = super::render::itoa(hash(value), &mut digits);
                pair(out, &mut first, key, &digits[20 - n..]);
            } else {
                for p in group {
                    pair(out, &mut first, key, &decoded[p.value()]);
                }
            }
        }
    }

    /// Go's `parseQuery`: `&`-separated segments; empty ones skipped, ones holding a
    /// `;` refused, `key=value` split at the first `=` (no `=`: an empty value), and a
    /// pair whose key or value has a bad `%` escape dropped.
    fn parse(&mut self, query: &[u8]) {
        self.decoded.clear();
        self.pairs.clear();
        if query.iter().filter(|&&b| b == b'&').count() + 1 > GO_MAX_QUERY_PARAMS {
            return;
        }
        for (seq, segment) in query.split(|&b| b == b'&').enumerate() {
            if segment.is_empty() || segment.contains(&b';') {
                continue;
            }
            let (key, value) = match segment.iter().position(|&b| b == b'=') {
                Some(eq) => (&segment[..eq], &segment[eq + 1..]),
                None => (segment, &b""[..]),
            };
            let start = self.decoded.len();
            let mid = unescape(key, &mut self.decoded).map(|()| self.decoded.len());
            let end = mid.and_then(|_| unescape(value, &mut self.decoded));
            match (mid, end) {
                (Some(mid), Some(())) => self.pairs.push(Pair {
                    start,
                    mid,
                    end: self.decoded.len(),
                    seq,
                }),
                _ => self.decoded.truncate(start),
            }
        }
    }
}

/// Writes `key=value` (after a `&` unless it is the first), both query-escaped.
fn pair(out: &mut Vec<u8>, first: &mut bool, key: &[u8], value: &[u8]) {
    if !*first {
        out.push(b'&');
    }
    *first = false;
    escape(out, key);
    out.push(b'=');
    escape(out, value);
}

/// Go's `QueryUnescape` appended to `out`: `+` is a space, `%XX` a byte; `None` (with
/// `out` partly written) when a `%` is not followed by two hex digits.
fn unescape(s: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        match b {
            b'%' => {
                let hi = hex_value(*s.get(i + 1)?)?;
                let lo = hex_value(*s.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(())
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Go's `QueryEscape`: letters, digits and `-_.~` as they are, space as `+`, every
/// other byte as `%XX` in upper-case hex.
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b),
            b' ' => out.push(b'+'),
            _ => out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]),
        }
    }
}

//! Query strings the way skipper (Go's `net/url`) rewrites them, so a backend behind
//! `setQuery` sees the same query from us as from skipper: pairs decoded, the key set,
//! keys sorted, everything re-encoded with `QueryEscape`.

use std::borrow::Cow;

use super::template::Sink;

/// `query` with `key` set to the single value `value` (added if absent).
pub fn set(query: &str, key: &str, value: &str) -> String {
    let mut pairs: Pairs<'_> = pairs_cow(query).filter(|(k, _)| k != key).collect();
    pairs.push((Cow::Borrowed(key), Cow::Borrowed(value)));
    encode(pairs, query.len() + key.len() + value.len() + 2)
}

/// A query's decoded pairs while it is re-encoded: on the stack up to eight, so a
/// `setQuery` allocates only the text it makes.
type Pairs<'a> = smallvec::SmallVec<[(Cow<'a, str>, Cow<'a, str>); 8]>;

/// `query` without `key` (skipper's `dropQuery`): re-encoded like [`set`], so the keys
/// come out sorted even when `key` was not there.
pub fn drop(query: &str, key: &str) -> String {
    encode(
        pairs_cow(query).filter(|(k, _)| k != key).collect(),
        query.len(),
    )
}

/// Go's `Values.Encode`: keys sorted, a key's values in their order.
fn encode(mut pairs: Pairs<'_>, capacity: usize) -> String {
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::with_capacity(capacity);
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        escape_into(&mut out, k);
        out.push('=');
        escape_into(&mut out, v);
    }
    out
}

/// The decoded `(key, value)` pairs as Go's `ParseQuery` keeps them: pairs with a bad
/// escape or a `;` are skipped.
pub fn pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    raw_pairs(query).filter_map(|(k, v)| Some((unescape(k)?, unescape(v)?)))
}

/// [`pairs`], borrowing every key and value that has nothing to decode: `set` and
/// `drop` re-encode a query on every request of their routes, and most of its pairs
/// are plain.
fn pairs_cow(query: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> + '_ {
    let plain = |s: &str| !s.bytes().any(|b| b == b'%' || b == b'+');
    let decode = move |s| {
        if plain(s) {
            Some(Cow::Borrowed(s))
        } else {
            unescape(s).map(Cow::Owned)
        }
    };
    raw_pairs(query).filter_map(move |(k, v)| Some((decode(k)?, decode(v)?)))
}

/// The `(key, value)` pairs before decoding, as [`pairs`] keeps them.
fn raw_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty() && !p.contains(';'))
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

/// Writes the first value of `name` decoded (Go's `Query().Get`); `false` when there
/// is none or it is empty. Nothing is allocated: keys are compared as they decode.
pub fn first_value_into(query: &str, name: &str, out: &mut impl Sink) -> bool {
    let found = raw_pairs(query).find(|(k, v)| {
        decoded(k, true).map(|b| b.ok()).eq(name.bytes().map(Some))
            && decoded(v, true).all(|b| b.is_ok())
            && decoded(k, true).all(|b| b.is_ok())
    });
    let Some((_, v)) = found else { return false };
    let mut any = false;
    for b in decoded(v, true).flatten() {
        out.put(&[b]);
        any = true;
    }
    any
}

/// Writes a path percent-decoded (Go's `URL.Path`: `+` stays); `false` when it is
/// empty. A malformed escape is written as it is.
pub fn path_unescape_into(path: &str, out: &mut impl Sink) -> bool {
    if decoded(path, false).all(|b| b.is_ok()) {
        for b in decoded(path, false).flatten() {
            out.put(&[b]);
        }
    } else {
        out.put(path.as_bytes());
    }
    !path.is_empty()
}

/// Writes `s` decoded as Go's `url.QueryUnescape` decodes it (`%XX`, and `+` as a
/// space), or as it is when it has a malformed escape (where Go's function fails);
/// `false` when it is empty.
pub fn query_unescape_into(s: &str, out: &mut impl Sink) -> bool {
    if !s.bytes().any(|b| b == b'%' || b == b'+') {
        out.put(s.as_bytes());
    } else if decoded(s, true).all(|b| b.is_ok()) {
        for b in decoded(s, true).flatten() {
            out.put(&[b]);
        }
    } else {
        out.put(s.as_bytes());
    }
    !s.is_empty()
}

/// The bytes `s` decodes to, `Err` at a malformed escape; `plus` decodes `+` as a
/// space (queries).
fn decoded(s: &str, plus: bool) -> impl Iterator<Item = Result<u8, ()>> + '_ {
    let b = s.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        let c = *b.get(i)?;
        i += 1;
        Some(match c {
            b'+' if plus => Ok(b' '),
            b'%' => {
                let hex = |j: usize| b.get(j).and_then(|d| char::from(*d).to_digit(16));
                match (hex(i), hex(i + 1)) {
                    (Some(hi), Some(lo)) => {
                        i += 2;
                        // Two hex digits are at most 0xff.
                        Ok((hi * 16 + lo) as u8)
                    }
                    _ => {
                        i = b.len();
                        Err(())
                    }
                }
            }
            c => Ok(c),
        })
    })
}

/// Appends `decoded` escaped as Go escapes a path (`URL.EscapedPath` of a path a
/// filter set): unreserved bytes and `$&+,/:;=@` kept, the rest `%XX`.
pub fn escape_path_into(out: &mut String, decoded: &[u8]) {
    for &c in decoded {
        match c {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'$'
            | b'&'
            | b'+'
            | b','
            | b'/'
            | b':'
            | b';'
            | b'='
            | b'@' => out.push(char::from(c)),
            _ => push_hex(out, c),
        }
    }
}

/// The header skipper's `stripQuery("true")` moves a query key into:
/// `X-Query-Param-` and the key's characters that Go's `strconv.QuoteToASCII` leaves as
/// letters, digits or `-` (so `a_b` gives `ab`, `é` gives `u00e9`, a newline `n`).
pub fn param_header_name(key: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(14 + key.len());
    out.push_str("x-query-param-");
    for c in key.chars() {
        match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' => out.push(c),
            ' '..='~' => {}
            '\u{7}' => out.push('a'),
            '\u{8}' => out.push('b'),
            '\u{c}' => out.push('f'),
            '\n' => out.push('n'),
            '\r' => out.push('r'),
            '\t' => out.push('t'),
            '\u{b}' => out.push('v'),
            c if u32::from(c) < 0x80 => {
                let _ = write!(out, "x{:02x}", u32::from(c));
            }
            c if u32::from(c) < 0x1_0000 => {
                let _ = write!(out, "u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "U{:08x}", u32::from(c));
            }
        }
    }
    out
}

fn push_hex(out: &mut String, c: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(c >> 4)]));
    out.push(char::from(HEX[usize::from(c & 15)]));
}

/// Decodes `%XX` and `+` (space).
pub fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                // Two hex digits, as Go's `ishex` wants (no sign, which
                // `from_str_radix` would take).
                let hex = |j: usize| b.get(j).and_then(|d| char::from(*d).to_digit(16));
                let (hi, lo) = (hex(i + 1)?, hex(i + 2)?);
                // Two hex digits are at most 0xff.
                out.push((hi * 16 + lo) as u8);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Appends Go's `url.QueryEscape(s)`: unreserved bytes kept, space as `+`, the rest
/// `%XX` in upper case.
pub fn escape_into(out: &mut String, s: &str) {
    for &c in s.as_bytes() {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(c));
            }
            b' ' => out.push('+'),
            _ => push_hex(out, c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `unescape` wants two hex digits after `%`; a sign is none.
    #[test]
    fn a_percent_needs_two_hex_digits() {
        assert_eq!(unescape("a%2Bb+c"), Some("a+b c".to_owned()));
        assert_eq!(unescape("%+1"), None);
        assert_eq!(unescape("%-1"), None);
        assert_eq!(unescape("%4"), None);
    }

    #[test]
    fn set_matches_go_url_values() {
        assert_eq!(set("", "lang", "pt"), "lang=pt");
        assert_eq!(set("lang=en&b=2&a=1", "lang", "pt"), "a=1&b=2&lang=pt");
        assert_eq!(
            set("z=1&z=2&a=x+y", "k", "v w/é"),
            "a=x+y&k=v+w%2F%C3%A9&z=1&z=2"
        );
        assert_eq!(set("bad=%zz&ok=1", "k", "v"), "k=v&ok=1");
        assert_eq!(set("flag", "k", "v"), "flag=&k=v");
    }
}

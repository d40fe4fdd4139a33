//! A request path as Go's `net/url` holds it after a filter changed it, so the
//! backend gets the bytes skipper would send.
//!
//! Go keeps a URL's path twice: `Path`, decoded, which skipper's `modPath` and
//! `setPath` read and write, and `RawPath`, the path as received. Sending, the
//! client writes `EscapedPath()`: the received text when it still decodes to
//! `Path` (a filter that changed nothing, or changed it back, keeps `%2F`, `%41` or
//! `(` as the client wrote them), otherwise `Path` escaped afresh (`/`, `(` → `%28`,
//! space → `%20`). A filter's path is rooted when sent.
//!
//! The proxy keeps the path in its sent form ([`super::Exchange::path`]); these
//! functions go from it to Go's `Path` and back.

use super::query;

/// Go's `Path` for a path in its sent form: `%XX` decoded, `+` kept; `None` for a
/// malformed escape (which the proxy refused before any filter ran).
pub fn decode(sent: &str) -> Option<Vec<u8>> {
    let b = sent.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).and_then(|d| char::from(*d).to_digit(16));
            let (hi, lo) = (hex(i + 1)?, hex(i + 2)?);
            // Two hex digits are at most 0xff.
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// What Go sends for a URL received with path `received` whose `Path` a filter set
/// to `path` (`URL.EscapedPath`, rooted).
pub fn sent_form(path: &[u8], received: &str) -> String {
    if valid_encoded(received) && decode(received).is_some_and(|d| d == path) {
        return rooted(received.to_owned());
    }
    if path == b"*" {
        return "/*".to_owned();
    }
    let mut out = String::with_capacity(path.len() + 8);
    query::escape_path_into(&mut out, path);
    rooted(out)
}

/// Go's `validEncoded(s, encodePath)`: only bytes a path may carry unescaped, the
/// sub-delimiters, brackets and `%`.
pub(super) fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'['
                    | b']'
                    | b'%'
                    | b'/'
            )
    })
}

/// Go's client sends `/` for an empty path and roots a relative one.
fn rooted(mut p: String) -> String {
    if !p.starts_with('/') {
        p.insert(0, '/');
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `URL.EscapedPath` after `Path` was set (net/url `TestEscapedPath`-style
    /// cases for a received path and a new `Path`).
    #[test]
    fn sent_form_keeps_the_received_text_only_while_it_still_fits() {
        let cases: [(&str, &str, &str); 12] = [
            // (received, new Path, sent)
            ("/a%2Fb/c", "/a/b/c", "/a%2Fb/c"),
            ("/a%2Fb/c", "/x/b/c", "/x/b/c"),
            ("/a(b)", "/a(b)", "/a(b)"),
            ("/a(b)", "/x(b)", "/x%28b%29"),
            ("/p%41th", "/pAth", "/p%41th"),
            ("/p%41th", "/pATH", "/pATH"),
            ("/a", "/a b", "/a%20b"),
            ("/a", "/c%2Fd", "/c%252Fd"),
            ("/a", "/$&+,:;=@", "/$&+,:;=@"),
            ("/a", "/caf\u{e9}", "/caf%C3%A9"),
            ("/a", "x", "/x"),
            ("/a", "", "/"),
        ];
        for (received, path, want) in cases {
            assert_eq!(
                sent_form(path.as_bytes(), received),
                want,
                "{received} {path}"
            );
        }
        assert_eq!(decode("/a%2fb+c"), Some(b"/a/b+c".to_vec()));
        assert_eq!(decode("/a%2"), None);
        assert_eq!(decode("/a%+1"), None);
    }
}

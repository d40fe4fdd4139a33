//! Query strings the way skipper (Go's `net/url`) rewrites them, so a backend behind
//! `setQuery` sees the same query from us as from skipper: pairs decoded, the key set,
//! keys sorted, everything re-encoded with `QueryEscape`.

/// `query` with `key` set to the single value `value` (added if absent).
pub fn set(query: &str, key: &str, value: &str) -> String {
    let mut pairs: Vec<(String, String)> = pairs(query).filter(|(k, _)| k != key).collect();
    pairs.push((key.to_owned(), value.to_owned()));
    // Go keeps a key's values in order and sorts the keys: a stable sort by key.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::with_capacity(query.len() + key.len() + value.len() + 2);
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

/// The decoded `(key, value)` pairs; pairs with a bad escape are skipped (as Go does).
pub fn pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).filter_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        Some((unescape(k)?, unescape(v)?))
    })
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
                let hex = b.get(i + 1..i + 3)?;
                let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                out.push(v);
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
            _ => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(char::from(HEX[usize::from(c >> 4)]));
                out.push(char::from(HEX[usize::from(c & 15)]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

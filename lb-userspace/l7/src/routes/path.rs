//! The path that routes match: the request's path percent-decoded, then with repeated
//! slashes, `.` and `..` segments resolved — what skipper matches (Go's decoded
//! `URL.Path`, cleaned by `httppath.Clean` in `routing/matcher.go`). Matching the raw
//! path would let `/public/../internal`, `//internal` or `/%69nternal` past
//! `PathSubtree("/internal")` while the backend, which resolves them, serves
//! `/internal`. The backend still receives the path as the client sent it.
//!
//! Rules, in order:
//! - every `%XX` is decoded (`%2F` becomes a `/` that separates segments, as in Go);
//!   a `%` without two hex digits after it is an error (Go's server answers 400);
//!   bytes that are not UTF-8 become U+FFFD, as Go's regexps see them;
//! - the path is rooted (`a/b` is `/a/b`, the empty path is `/`);
//! - empty segments and `.` segments go, `..` removes the segment before it (never
//!   above the root);
//! - a trailing slash stays, and so does the one a final `.` stands for (`/a/.` is
//!   `/a/`); a final `..` leaves none (`/a/b/..` is `/a`).

use std::borrow::Cow;

/// A `%` in a path that is not followed by two hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the path has a `%` not followed by two hex digits at byte {at}")]
pub struct BadEscape {
    /// Byte offset of the `%`.
    pub at: usize,
}

/// The routing form of `raw` (see the module doc); borrowed when `raw` already is it.
///
/// # Errors
/// [`BadEscape`] for a malformed percent escape.
pub fn routing_path(raw: &str) -> Result<Cow<'_, str>, BadEscape> {
    let decoded = decode(raw)?;
    Ok(match decoded {
        Cow::Borrowed(p) => clean(p),
        Cow::Owned(p) => Cow::Owned(clean(&p).into_owned()),
    })
}

/// Percent-decodes `raw`.
fn decode(raw: &str) -> Result<Cow<'_, str>, BadEscape> {
    let Some(first) = raw.find('%') else {
        return Ok(Cow::Borrowed(raw));
    };
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    out.extend_from_slice(&bytes[..first]);
    let mut i = first;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |j: usize| bytes.get(j).and_then(|b| char::from(*b).to_digit(16));
            match (hex(i + 1), hex(i + 2)) {
                (Some(hi), Some(lo)) => {
                    // Two hex digits are at most 0xff.
                    out.push((hi * 16 + lo) as u8);
                    i += 3;
                }
                _ => return Err(BadEscape { at: i }),
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(Cow::Owned(match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }))
}

/// Whether `p` needs no cleaning: rooted, no empty, `.` or `..` segment.
fn is_clean(p: &str) -> bool {
    let Some(rest) = p.strip_prefix('/') else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let body = rest.strip_suffix('/').unwrap_or(rest);
    body.split('/')
        .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Resolves `p`'s empty, `.` and `..` segments (see the module doc).
pub(crate) fn clean(p: &str) -> Cow<'_, str> {
    if is_clean(p) {
        return Cow::Borrowed(p);
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut last = "";
    for seg in p.split('/') {
        last = seg;
        match seg {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            s => kept.push(s),
        }
    }
    let trailing = (p.len() > 1 && p.ends_with('/')) || last == ".";
    let mut out = String::with_capacity(p.len() + 1);
    for seg in &kept {
        out.push('/');
        out.push_str(seg);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cleaning as skipper's `httppath.Clean` (the httprouter rules) does it.
    #[test]
    fn cleans_as_skipper_does() {
        let cases = [
            // Already clean.
            ("/", "/"),
            ("/abc", "/abc"),
            ("/a/b/c", "/a/b/c"),
            ("/abc/", "/abc/"),
            ("/a/b/c/", "/a/b/c/"),
            // Missing root.
            ("", "/"),
            ("a/", "/a/"),
            ("abc", "/abc"),
            ("abc/def", "/abc/def"),
            // Repeated slashes.
            ("//", "/"),
            ("/abc//", "/abc/"),
            ("/abc/def//", "/abc/def/"),
            ("/abc//def//ghi", "/abc/def/ghi"),
            ("//abc", "/abc"),
            ("///abc", "/abc"),
            ("//abc//", "/abc/"),
            // `.` segments.
            (".", "/"),
            ("./", "/"),
            ("/abc/./def", "/abc/def"),
            ("/./abc/def", "/abc/def"),
            ("/abc/.", "/abc/"),
            // `..` segments.
            ("..", "/"),
            ("../", "/"),
            ("../../", "/"),
            ("../..", "/"),
            ("../../abc", "/abc"),
            ("/abc/def/ghi/../jkl", "/abc/def/jkl"),
            ("/abc/def/../ghi/../jkl", "/abc/jkl"),
            ("/abc/def/..", "/abc"),
            ("/abc/def/../", "/abc/"),
            ("/abc/def/../..", "/"),
            ("/abc/def/../../..", "/"),
            ("/abc/def/../../../ghi/jkl/../../../mno", "/mno"),
            // Combinations.
            ("abc/./../def", "/def"),
            ("abc//./../def", "/def"),
            ("abc/../../././../def", "/def"),
            // skipper's TestMatchPathResolved.
            ("/some/some-other/../path", "/some/path"),
            // Not dot segments.
            ("/a/.../b", "/a/.../b"),
            ("/a/.b/..c", "/a/.b/..c"),
        ];
        for (raw, want) in cases {
            assert_eq!(routing_path(raw).as_deref(), Ok(want), "{raw:?}");
        }
    }

    #[test]
    fn decodes_before_cleaning_and_borrows_what_is_clean() {
        let cases = [
            ("/%69nternal/x", "/internal/x"),
            ("/%69%6E%74ernal", "/internal"),
            ("/internal%2Fx", "/internal/x"),
            ("/%2finternal/x", "/internal/x"),
            ("/public/%2e%2e/internal", "/internal"),
            ("/public/%2E%2E/internal", "/internal"),
            ("/a%20b", "/a b"),
            ("/a+b", "/a+b"),
            ("/%25", "/%"),
            ("/%2569", "/%69"),
            ("/%ff", "/\u{fffd}"),
            ("/caf%C3%A9", "/café"),
            ("/a%00b", "/a\0b"),
        ];
        for (raw, want) in cases {
            assert_eq!(routing_path(raw).as_deref(), Ok(want), "{raw:?}");
        }
        assert!(matches!(routing_path("/a/b/"), Ok(Cow::Borrowed(_))));
        assert!(matches!(routing_path("/"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn a_malformed_escape_is_an_error() {
        for (raw, at) in [
            ("/%zz", 1),
            ("/a%2", 2),
            ("/%", 1),
            ("/%%69", 1),
            ("/ok/%g0", 4),
        ] {
            assert_eq!(routing_path(raw), Err(BadEscape { at }), "{raw:?}");
        }
    }
}

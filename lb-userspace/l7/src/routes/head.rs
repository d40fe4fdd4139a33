//! What a request head must be before it is routed, and what routes see of it.
//!
//! Routes decide on the Host and the path, so both must mean one thing to us and to
//! the backend: a request with two Hosts (routes would see one, the backend maybe the
//! other), a Host that is not `host[:port]`, or a Host that names another host than
//! the request target (HTTP/2 `:authority`, an absolute-form HTTP/1.1 target) gets
//! 400, as does an HTTP/1.1 request without a Host (RFC 9112 §3.2) and a path whose
//! percent escapes do not decode (see [`routing_path`]).

use std::borrow::Cow;

use http::{HeaderValue, Version, header, request::Parts, uri::Authority};

use super::path::{BadEscape, routing_path};

/// Why a request head is refused (400) before routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Two or more Host header lines.
    #[error("more than one Host header")]
    TwoHosts,
    /// A Host that is not `host[:port]`.
    #[error("the Host header is not host[:port]")]
    BadHost,
    /// A Host unlike the request target's authority.
    #[error("the Host header names another host than the request target")]
    HostMismatch,
    /// HTTP/1.1 without a Host.
    #[error("an HTTP/1.1 request without a Host header")]
    NoHost,
    /// The path does not decode.
    #[error(transparent)]
    BadPath(#[from] BadEscape),
}

/// What routes see of an accepted request head.
#[derive(Debug)]
pub struct Head<'a> {
    /// The Host header, else the target's authority, else "".
    pub host: &'a str,
    /// The path in its routing form.
    pub path: Cow<'a, str>,
}

/// Checks `parts` (see the module doc).
///
/// # Errors
/// The first [`Refusal`] that applies.
pub fn check(parts: &Parts) -> Result<Head<'_>, Refusal> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let host_header = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::TwoHosts);
    }
    let target = parts.uri.authority();
    let host = match (host_header, target) {
        (Some(value), target) => {
            let text = value.to_str().map_err(|_| Refusal::BadHost)?;
            if let Some(target) = target
                && !same_authority(value, target)?
            {
                return Err(Refusal::HostMismatch);
            }
            if !text.is_empty() && !plain_host(value.as_bytes()) {
                parse_host(value)?;
            }
            text
        }
        (None, Some(target)) if parts.version != Version::HTTP_11 => target.as_str(),
        (None, _) if parts.version == Version::HTTP_11 => return Err(Refusal::NoHost),
        (None, _) => "",
    };
    Ok(Head {
        host,
        path: routing_path(parts.uri.path())?,
    })
}

/// Whether `value` is `name[:port]` with a name of letters, digits, `.` and `-`, and
/// a port of digits that fits in 16 bits: the Host nearly every request has, which
/// [`parse_host`] would accept too. Checking it in place saves that parse its copy
/// of the value (one allocation per request); anything else takes the full parse.
fn plain_host(value: &[u8]) -> bool {
    let (name, port) = match value.iter().position(|&b| b == b':') {
        Some(i) => (&value[..i], Some(&value[i + 1..])),
        None => (value, None),
    };
    let name_ok = !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let port_ok = port.is_none_or(|p| {
        (1..=5).contains(&p.len())
            && p.iter().all(u8::is_ascii_digit)
            && std::str::from_utf8(p).is_ok_and(|p| p.parse::<u16>().is_ok())
    });
    name_ok && port_ok
}

/// A Host value as an authority without user info.
fn parse_host(value: &HeaderValue) -> Result<Authority, Refusal> {
    let a = Authority::try_from(value.as_bytes()).map_err(|_| Refusal::BadHost)?;
    let text = a.as_str();
    // The part after a colon that follows any IPv6 literal must be a port.
    let after_literal = text.rfind(']').and_then(|i| text.get(i..)).unwrap_or(text);
    let port_ok = after_literal
        .rsplit_once(':')
        .is_none_or(|(_, p)| p.parse::<u16>().is_ok());
    if text.contains('@') || !port_ok {
        return Err(Refusal::BadHost);
    }
    Ok(a)
}

/// Whether the Host `value` names the same host and port as `target` (hosts compare
/// without case; a missing port is 80, the port of `http`).
fn same_authority(value: &HeaderValue, target: &Authority) -> Result<bool, Refusal> {
    if value.is_empty() {
        return Ok(false);
    }
    let host = parse_host(value)?;
    Ok(host.host().eq_ignore_ascii_case(target.host())
        && host.port_u16().unwrap_or(80) == target.port_u16().unwrap_or(80))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(version: Version, uri: &str, hosts: &[&str]) -> Parts {
        let mut b = http::Request::builder().version(version).uri(uri);
        for h in hosts {
            b = b.header(header::HOST, *h);
        }
        b.body(()).expect("request").into_parts().0
    }

    /// The in-place check accepts only what the full parse accepts.
    #[test]
    fn plain_hosts_are_hosts() {
        for ok in [
            "web",
            "web:8080",
            "a.b-c.example:1",
            "198.18.0.1:65535",
            "WEB",
        ] {
            assert!(plain_host(ok.as_bytes()), "{ok}");
            let v = HeaderValue::from_static(ok);
            assert!(parse_host(&v).is_ok(), "{ok}");
        }
        for other in [
            "web:",
            "web:65536",
            "web:+1",
            ":80",
            "[::1]:80",
            "u@web",
            "web:80:1",
            "we_b",
            "web:000080",
        ] {
            assert!(!plain_host(other.as_bytes()), "{other}");
        }
    }

    #[test]
    fn one_host_that_agrees_with_the_target() {
        let h1 = Version::HTTP_11;
        let ok = |p: &Parts| check(p).map(|h| (h.host.to_owned(), h.path.into_owned()));
        assert_eq!(
            ok(&parts(h1, "/a/../b", &["web"])),
            Ok(("web".into(), "/b".into()))
        );
        assert_eq!(
            ok(&parts(h1, "http://Web:80/x", &["web"])),
            Ok(("web".into(), "/x".into()))
        );
        assert_eq!(
            ok(&parts(Version::HTTP_2, "http://web:8080/", &[])),
            Ok(("web:8080".into(), "/".into()))
        );
        assert_eq!(
            ok(&parts(Version::HTTP_10, "/", &[])),
            Ok((String::new(), "/".into()))
        );
        assert_eq!(ok(&parts(h1, "/", &[""])), Ok((String::new(), "/".into())));
        assert_eq!(
            ok(&parts(h1, "/", &["[2001:db8::1]:81"])),
            Ok(("[2001:db8::1]:81".into(), "/".into()))
        );

        let no = |version: Version, uri: &str, hosts: &[&str], want: Refusal| {
            let got = check(&parts(version, uri, hosts)).map(|_| ());
            assert_eq!(got, Err(want), "{version:?} {uri} Host {hosts:?}");
        };
        no(h1, "/", &["a", "b"], Refusal::TwoHosts);
        no(h1, "/", &["a", "a"], Refusal::TwoHosts);
        no(h1, "/", &[], Refusal::NoHost);
        no(h1, "http://public/", &[], Refusal::NoHost);
        no(h1, "http://public/", &["admin"], Refusal::HostMismatch);
        no(h1, "http://public:81/", &["public"], Refusal::HostMismatch);
        no(
            Version::HTTP_2,
            "http://public/",
            &["admin"],
            Refusal::HostMismatch,
        );
        no(
            Version::HTTP_2,
            "http://public/",
            &[""],
            Refusal::HostMismatch,
        );
        for bad in ["a b", "a/b", "u@admin", "a,b c", "x:99999"] {
            no(h1, "/", &[bad], Refusal::BadHost);
        }
        no(h1, "/%zz", &["a"], Refusal::BadPath(BadEscape { at: 1 }));
    }
}

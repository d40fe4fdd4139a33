//! The checks skipper makes on a route while parsing (`eskip/eskip.go`,
//! `applyPredicates` and `newRouteDefinition`), so a text skipper refuses is refused
//! here too, with the same reasons:
//!
//! - `Path`, `Host`, `PathRegexp` and `Method` take one string, `Header` and
//!   `HeaderRegexp` two (a `/regexp/` counts as a string: skipper keeps both as Go
//!   strings);
//! - at most one `Path` and one `Method` per route, and no two `Header`s with the
//!   same name (exactly as written: skipper compares the names case-sensitively);
//! - the endpoints of a load-balanced backend are request URIs of one scheme.
//!
//! `Any(…)` is skipper's spelling of `*` and is dropped like it. Skipper stops at a
//! route's first problem; we report them all.

use super::{Arg, Backend, ParseError, Route};

/// The route as skipper hands it on (`Any` dropped), or everything wrong with it.
pub fn route(mut r: Route) -> Result<Route, Vec<ParseError>> {
    let mut errors = Vec::new();
    let (mut path, mut method) = (false, false);
    let mut headers = Vec::new();
    r.predicates.retain(|p| p.name != "Any");
    for p in &r.predicates {
        let strings = match p.name.as_str() {
            "Path" | "Host" | "PathRegexp" | "Method" => 1,
            "Header" | "HeaderRegexp" => 2,
            _ => continue,
        };
        let once = match p.name.as_str() {
            "Path" => Some((&mut path, "path tree")),
            "Method" => Some((&mut method, "method")),
            _ => None,
        };
        if let Some((seen, what)) = &once
            && **seen
        {
            errors.push(ParseError::at(
                p.pos,
                format!("one {} predicate per route", p.name),
                format!("a second one (duplicate {what} predicate)"),
            ));
            continue;
        }
        let all_strings = p.args.iter().all(|a| !matches!(a, Arg::Num(_)));
        if p.args.len() != strings || !all_strings {
            let plural = if strings == 1 { "" } else { "s" };
            errors.push(ParseError::at(
                p.pos,
                format!("{strings} string argument{plural} to {}", p.name),
                describe_args(&p.args),
            ));
            continue;
        }
        if let Some((seen, _)) = once {
            *seen = true;
        }
        if p.name == "Header"
            && let Some(Arg::Str(name) | Arg::Regex(name)) = p.args.first()
        {
            if headers.contains(&name) {
                errors.push(ParseError::at(
                    p.pos,
                    "one Header predicate per header name",
                    format!("a second one for {name:?} (duplicate header predicate)"),
                ));
            }
            headers.push(name);
        }
    }
    if let Backend::LoadBalanced { endpoints, .. } = &r.backend
        && let Err(e) = one_scheme(endpoints)
    {
        errors.push(ParseError::at(r.backend_pos, e.0, e.1));
    }
    if errors.is_empty() {
        Ok(r)
    } else {
        Err(errors)
    }
}

fn describe_args(args: &[Arg]) -> String {
    if args.is_empty() {
        return "no arguments".into();
    }
    let kinds: Vec<&str> = args
        .iter()
        .map(|a| match a {
            Arg::Str(_) => "string",
            Arg::Regex(_) => "regexp",
            Arg::Num(_) => "number",
        })
        .collect();
    format!("({})", kinds.join(", "))
}

/// Every endpoint a request URI (Go's `url.ParseRequestURI`), all of one scheme
/// (compared in lower case, as Go stores it): `Err((expected, found))`.
fn one_scheme(endpoints: &[String]) -> Result<(), (String, String)> {
    let mut first: Option<String> = None;
    for e in endpoints {
        let scheme = request_uri_scheme(e).ok_or_else(|| {
            (
                "endpoint URLs (`scheme://host:port`)".to_owned(),
                format!("{e:?} (invalid URI for request)"),
            )
        })?;
        match &first {
            Some(s) if *s != scheme => {
                return Err((
                    "endpoints of one protocol (loadbalancer endpoints cannot have mixed protocols)"
                        .to_owned(),
                    format!("{scheme:?} after {s:?}"),
                ));
            }
            Some(_) => {}
            None => first = Some(scheme),
        }
    }
    Ok(())
}

/// The lower-cased scheme of `s` if Go's `url.ParseRequestURI` takes it (an absolute
/// path has the empty scheme); `None` if it refuses it. Covers what Go checks before
/// the authority (control characters, the scheme's spelling, that a text without a
/// scheme is an absolute path) and the authority's port being digits.
fn request_uri_scheme(s: &str) -> Option<String> {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return None;
    }
    if s == "*" {
        return Some(String::new());
    }
    let mut scheme = "";
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return None,
            ':' => {
                scheme = &s[..i];
                break;
            }
            _ => break,
        }
    }
    let rest = &s[scheme.len() + usize::from(!scheme.is_empty())..];
    if scheme.is_empty() && !rest.starts_with('/') {
        return None;
    }
    if let Some(authority) = rest.strip_prefix("//") {
        let authority = authority.split(['/', '?']).next().unwrap_or_default();
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let port = match host.rsplit_once(']') {
            Some((_, after)) => after.strip_prefix(':'),
            None => host.rsplit_once(':').map(|(_, p)| p),
        };
        if port.is_some_and(|p| !p.bytes().all(|b| b.is_ascii_digit())) {
            return None;
        }
    }
    Some(scheme.to_ascii_lowercase())
}

//! `lbctl routes FILE [PATH]`: check an eskip route file (the routes in match order),
//! and explain which route a request would take and what it would do — path and query
//! after the filters, the answer given without a backend (with its headers after the
//! response filters), or the backend and its endpoints (for `consistentHash`, the
//! endpoint the key picks). The decision is [`lb_l7::routes::plan::plan`]'s, the
//! proxy's own. Works without lbd.

use std::{path::PathBuf, time::SystemTime};

use serde::Serialize;

use super::{Context, Outcome};
use lb_l7::{
    balance::{Algorithm, Pick, Registry},
    routes::{
        Context as RouteContext, RouteTable, head,
        plan::{self, Answer, Answered, Outcome as Fate},
    },
};

/// Arguments of `lbctl routes`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// An eskip route file (as `routes_file` names it).
    file: PathBuf,
    /// A request path, with its query, to explain (e.g. `/api/users?id=7`).
    path: Option<String>,
    /// The request's method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// The request's Host header.
    #[arg(long, default_value = "")]
    host: String,
    /// A request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// The client address (templates' `${request.clientIP}`; consistent-hash keys fall
    /// back to it).
    #[arg(long, default_value = "0.0.0.0")]
    client: std::net::IpAddr,
    /// The client is a trusted proxy: its X-Forwarded-For is believed (lbd's
    /// `trusted_proxies`).
    #[arg(long)]
    trusted: bool,
    /// The time `Between`, `After` and `Before` compare with (RFC 3339); now by
    /// default.
    #[arg(long, value_parser = parse_time)]
    at: Option<SystemTime>,
}

fn parse_time(text: &str) -> Result<SystemTime, String> {
    lb_model::units::parse_rfc3339(text).map_err(|e| format!("{text:?}: {e}"))
}

#[derive(Debug, Serialize)]
struct Listing {
    file: String,
    routes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Explained {
    /// The matching route's id, if any (none: 404).
    route: Option<String>,
    /// The route as written.
    source: Option<String>,
    /// Path and query the backend would see.
    path: String,
    query: String,
    /// The status of an answer given without a backend.
    status: Option<u16>,
    /// That answer: status and Location or body size, or why it is given.
    answer: Option<String>,
    /// That answer's headers, after the response filters.
    headers: Vec<String>,
    /// The algorithm and endpoints, if a backend is asked.
    algorithm: Option<String>,
    endpoints: Vec<String>,
    /// The endpoint a consistent-hash key picks.
    pick: Option<String>,
}

/// Runs `lbctl routes`.
pub fn run(ctx: &Context, args: &Args) -> Outcome {
    let file = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file).map_err(|e| format!("{file}: {e}"))?;
    let registry = Registry::default();
    let now = SystemTime::now();
    let cx = RouteContext {
        registry: &registry,
        service_endpoints: &[],
        previous: None,
        now,
    };
    let table = RouteTable::parse(&text, &cx).map_err(|e| {
        let lines: Vec<String> = e
            .problems()
            .iter()
            .map(|p| format!("{file}: {p}"))
            .collect();
        lines.join("\n")
    })?;
    let Some(target) = &args.path else {
        let listing = Listing {
            file: file.clone(),
            routes: table.routes().iter().map(|r| r.source.clone()).collect(),
        };
        return ctx.print(&listing, || {
            let mut out = format!(
                "{file}: ok ({} routes, in match order)\n",
                listing.routes.len()
            );
            for r in &listing.routes {
                out.push_str(&format!("  {r}\n"));
            }
            out
        });
    };
    let explained = explain(&table, args, target, now)?;
    ctx.print(&explained, || render(&explained))
}

fn explain(
    table: &RouteTable,
    args: &Args,
    target: &str,
    now: SystemTime,
) -> Result<Explained, String> {
    let parts = request_parts(args, target)?;
    let mut out = Explained {
        route: None,
        source: None,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        status: None,
        answer: None,
        headers: Vec::new(),
        algorithm: None,
        endpoints: Vec::new(),
        pick: None,
    };
    let head = match head::check(&parts) {
        Ok(head) => head,
        Err(why) => {
            describe(&mut out, &plan::refused(why));
            return Ok(out);
        }
    };
    let request = plan::Request {
        parts: &parts,
        head: &head,
        peer: args.client,
        trusted: args.trusted,
        now: Some(args.at.unwrap_or(now)),
    };
    // The node's `preserve_host` is not known here; it changes only the Host sent.
    let plan = plan::plan(table, &request, false);
    if let Some(route) = plan.route {
        out.route = Some(route.id.clone());
        out.source = Some(route.source.clone());
        out.path = plan.exchange.path(parts.uri.path()).to_owned();
        out.query = plan
            .exchange
            .query(parts.uri.query().unwrap_or(""))
            .to_owned();
    }
    let (pool, key) = match &plan.outcome {
        Fate::Answer(a) => {
            describe(&mut out, a);
            return Ok(out);
        }
        Fate::Forward { pool, key } => (pool, *key),
        Fate::Tunnel(pool) => (pool, 0),
    };
    let set = pool.set.load();
    let algorithm = pool.balancer.algorithm();
    out.algorithm = Some(algorithm.name().to_owned());
    out.endpoints = set
        .endpoints()
        .iter()
        .map(|e| format!("{} (weight {})", e.address(), e.weight))
        .collect();
    if set.is_empty() {
        out.endpoints
            .push("(the service's own backends, from lbd)".into());
    } else if set.len() == 1 || matches!(algorithm, Algorithm::ConsistentHash { .. }) {
        out.pick = pool
            .balancer
            .pick(&set, &Pick { now, key })
            .map(|i| set.endpoints()[i].address().to_string());
    }
    Ok(out)
}

/// The request head `lbctl routes` explains: HTTP/1.1, `--host` as its Host unless a
/// `-H Host:` names one.
fn request_parts(args: &Args, target: &str) -> Result<http::request::Parts, String> {
    let uri: http::Uri = target
        .parse()
        .map_err(|e| format!("{target:?} is not a request path: {e}"))?;
    let method = http::Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("{:?} is not a method", args.method))?;
    let mut headers = http::HeaderMap::new();
    for h in &args.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| format!("header {h:?} is not `Name: value`"))?;
        let name = http::HeaderName::from_bytes(k.trim().as_bytes())
            .map_err(|_| format!("{k:?} is not a header name"))?;
        let value = http::HeaderValue::from_str(v.trim())
            .map_err(|_| format!("{v:?} is not a header value"))?;
        headers.append(name, value);
    }
    if !headers.contains_key(http::header::HOST) {
        let host = http::HeaderValue::from_str(&args.host)
            .map_err(|_| format!("{:?} is not a Host value", args.host))?;
        headers.insert(http::header::HOST, host);
    }
    let mut parts = http::Request::new(()).into_parts().0;
    parts.method = method;
    parts.uri = uri;
    parts.headers = headers;
    Ok(parts)
}

/// An answer given without a backend: its status, what follows the status in the
/// explanation, and its headers.
fn describe(out: &mut Explained, a: &Answer) {
    let rest = match a.why {
        Answered::NoRoute => " (no route matches)".to_owned(),
        Answered::ConnectRefused => {
            " (CONNECT is allowed only by a Method(\"CONNECT\") route)".into()
        }
        Answered::Shunt => " (shunt)".into(),
        Answered::Refused => format!(" ({})", String::from_utf8_lossy(&a.body).trim_end()),
        Answered::BackendFailed => String::new(),
        Answered::Filter => match a.headers.get(http::header::LOCATION) {
            Some(l) => format!(", Location: {}", l.to_str().unwrap_or("?")),
            None => format!(
                " inline, {} bytes of {}",
                a.body.len(),
                a.headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
            ),
        },
    };
    out.status = Some(a.status.as_u16());
    out.answer = Some(format!("{}{rest}", a.status));
    out.headers = a
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v.as_bytes())))
        .collect();
}

fn render(e: &Explained) -> String {
    let mut lines: Vec<(&str, String)> =
        vec![("route", e.route.clone().unwrap_or_else(|| "(none)".into()))];
    if let Some(s) = &e.source {
        lines.push(("as written", s.clone()));
    }
    let query = if e.query.is_empty() {
        String::new()
    } else {
        format!("?{}", e.query)
    };
    lines.push(("after filters", format!("{}{query}", e.path)));
    if let Some(a) = &e.answer {
        lines.push(("answer", a.clone()));
        for h in &e.headers {
            lines.push(("header", h.clone()));
        }
    }
    if let Some(a) = &e.algorithm {
        lines.push(("algorithm", a.clone()));
        for ep in &e.endpoints {
            lines.push(("endpoint", ep.clone()));
        }
    }
    if let Some(p) = &e.pick {
        lines.push(("picks", p.clone()));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    lines
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// An https backend is explained with its scheme, so an operator sees that the
    /// request goes over TLS (and to port 443 when the URL names none).
    #[test]
    fn https_endpoints_are_explained_with_their_scheme() {
        use clap::Parser as _;
        let registry = Registry::default();
        let now = SystemTime::now();
        let cx = RouteContext {
            registry: &registry,
            service_endpoints: &[],
            previous: None,
            now,
        };
        let table = RouteTable::parse(
            r#"api: Path("/api") -> "HTTPS://API.Example.ORG"; lb: * -> <"https://a:8443", "https://b">;"#,
            &cx,
        )
        .expect("routes");
        let cli = Cli::parse_from(["lbctl-routes", "routes.eskip"]);
        let e = explain(&table, &cli.args, "/api", now).expect("explained");
        assert_eq!(e.route.as_deref(), Some("api"));
        assert_eq!(e.endpoints, ["https://api.example.org:443 (weight 1)"]);
        assert_eq!(e.pick.as_deref(), Some("https://api.example.org:443"));
        let e = explain(&table, &cli.args, "/other", now).expect("explained");
        assert_eq!(
            e.endpoints,
            ["https://a:8443 (weight 1)", "https://b:443 (weight 1)"]
        );
    }
}

//! `lbctl routes FILE [PATH]`: check an eskip route file (the routes in match order),
//! and explain which route a request would take and what it would do — path and query
//! after the filters, the answer a filter gives, or the backend and its endpoints (for
//! `consistentHash` with a key, the endpoint itself). Works without lbd.

use std::{path::PathBuf, time::SystemTime};

use serde::Serialize;

use super::{Context, Outcome};
use lb_l7::{
    balance::{Algorithm, Pick, Registry},
    routes::{
        Backend, Context as RouteContext, Exchange, RequestInfo, RouteTable, Served, filter,
        predicate::RequestView, request_scheme,
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
    /// An answer given without a backend: status and Location or body size.
    answer: Option<String>,
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
    // The client named is the peer, untrusted (as for the templates below).
    let view = RequestView {
        query: uri.query().unwrap_or(""),
        peer: args.client,
        now: Some(now),
        ..RequestView::new(&method, uri.path(), &args.host, &headers)
    };
    let mut out = Explained {
        route: None,
        source: None,
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or("").to_owned(),
        answer: Some("404 (no route matches)".into()),
        algorithm: None,
        endpoints: Vec::new(),
        pick: None,
    };
    let Some(route) = table.find(&view) else {
        return Ok(out);
    };
    out.route = Some(route.id.clone());
    out.source = Some(route.source.clone());
    let mut ex = Exchange::for_request(&uri, !route.filters.is_empty());
    let routing = lb_l7::routes::path::routing_path(uri.path()).map_err(|e| e.to_string())?;
    // The client named is the peer: lbctl cannot know which proxies lbd trusts.
    let info = RequestInfo {
        method: method.as_str(),
        scheme: request_scheme(http::Version::HTTP_11, &uri),
        host: &args.host,
        headers: &headers,
        routing_path: &routing,
        peer: args.client,
        trusted: false,
    };
    filter::on_request(&route.filters, &mut ex, &info);
    out.path = ex.path(&uri).to_owned();
    out.query = ex.query(&uri).to_owned();
    // An answer given without a backend: its status, and what follows the status (after
    // the response filters, which may change the status) in the explanation.
    let answered = match (&ex.served, &route.backend) {
        (Some(Served::Inline { body, content_type }), _) => Some((
            http::StatusCode::OK,
            format!(
                " inline, {} bytes of {}",
                body.len(),
                content_type.to_str().unwrap_or("?")
            ),
        )),
        (Some(Served::Redirect { status, location }), _) => {
            Some((*status, format!(", Location: {location}")))
        }
        (None, Backend::Shunt) => Some((http::StatusCode::NOT_FOUND, " (shunt)".to_owned())),
        (None, Backend::Pool(_)) => None,
    };
    if let Some((mut status, rest)) = answered {
        let mut response_headers = http::HeaderMap::new();
        filter::on_response(
            &route.filters,
            &ex,
            &info,
            &mut status,
            &mut response_headers,
        );
        out.answer = Some(format!("{status}{rest}"));
    } else if let Backend::Pool(pool) = &route.backend {
        let set = pool.set.load();
        let algorithm = pool.balancer.algorithm();
        out.algorithm = Some(algorithm.name().to_owned());
        out.endpoints = set
            .endpoints()
            .iter()
            .map(|e| format!("{} (weight {})", e.authority, e.weight))
            .collect();
        if set.is_empty() {
            out.endpoints
                .push("(the service's own backends, from lbd)".into());
        } else if set.len() == 1 || matches!(algorithm, Algorithm::ConsistentHash { .. }) {
            let key = ex.key_hash(args.client);
            out.pick = pool
                .balancer
                .pick(&set, &Pick { now, key })
                .map(|i| set.endpoints()[i].authority.to_string());
        }
    }
    Ok(out)
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

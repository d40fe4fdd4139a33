//! Compiled routes: eskip routes checked and turned into a table that matches
//! requests. Unknown predicates and filters, wrong argument counts or types and bad
//! regexps are errors with the route's id and position, so a route file either loads
//! whole or not at all.
//!
//! Paths are matched in their routing form (decoded, dot segments resolved: see
//! [`path`]), so no encoding of a path gets past a path predicate.
//!
//! Which route wins is skipper's matcher's rule (`routing/matcher.go`):
//! - routes with a `Path` or `PathSubtree` are found through the path tree
//!   ([`tree`]): segment by segment a literal beats a `:param`, which beats a free
//!   wildcard or subtree, backtracking when no route at a node passes its other
//!   predicates;
//! - routes without one are tried only when the tree yields none;
//! - among the routes at one tree node (or among those without a path), the one with
//!   the highest priority that matches wins: one per `Method`, `Methods`, `Host`,
//!   `PathRegexp`, `True`, `False`, `Cookie`, `QueryParam`, `Source`,
//!   `SourceFromLast`, `ClientIP`, `Between`, `After`, `Before` and `Traffic`, one per header
//!   name of `Header` and one per header name of `HeaderRegexp`, plus every `Weight(n)` (truncated to an integer);
//!   the path predicate does not count, nor does `TrafficSegment` (it counts one
//!   and weighs -1, as in skipper);
//! - remaining ties go to the route written first (skipper's order is then
//!   unspecified: it comes from a map).

mod args;
mod error;
mod exchange;
pub mod filter;
#[cfg(test)]
mod filter_tests;
mod flowid;
mod gopath;
pub mod head;
mod host;
mod location;
pub mod params;
pub mod path;
pub mod plan;
#[cfg(test)]
mod plan_cases;
pub mod predicate;
#[cfg(test)]
mod predicate_tests;
pub mod query;
pub mod template;
#[cfg(test)]
mod template_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod traffic_tests;
mod tree;
#[cfg(test)]
mod tree_props;
#[cfg(test)]
mod tree_tests;
pub mod values;

use std::{cmp::Reverse, collections::HashMap, sync::Arc, time::SystemTime};

use arc_swap::ArcSwap;
use args::Args;
pub use error::{RouteError, RouteProblem, RoutesError};
pub use exchange::{Exchange, RequestInfo, Served, client_source, request_scheme};
pub use filter::Filter;
use params::ParamRef;
use predicate::{PathMatch, Predicate, RequestView};
use template::Template;
use tree::PathTree;

use super::{
    accesslog::StatusSet,
    balance::{Algorithm, Balancer, EndpointSet, EndpointSpec, Registry},
    eskip,
};
use lb_model::fadein::FadeIn;

/// Where a route's requests go.
#[derive(Debug)]
pub enum Backend {
    /// `<shunt>`: the filters answer (404 if none did).
    Shunt,
    /// A network backend (a pool of one) or a load-balanced list.
    Pool(Arc<Pool>),
}

/// A route's endpoints and how it picks among them.
#[derive(Debug)]
pub struct Pool {
    /// The algorithm and its state (kept across reloads for an unchanged route).
    pub balancer: Arc<Balancer>,
    /// The endpoints now; swapped whole on updates.
    pub set: ArcSwap<EndpointSet>,
    /// `Some` for `<algorithm>` without URLs: the service's endpoints, kept current by
    /// [`RouteTable::set_service_endpoints`].
    service: bool,
    /// The route's `fadeIn`.
    fade: Option<FadeIn>,
    /// `endpointCreated` times by authority.
    created: HashMap<String, SystemTime>,
}

/// One compiled route.
#[derive(Debug)]
pub struct Route {
    /// Id.
    pub id: String,
    path: Option<PathMatch>,
    predicates: Vec<Predicate>,
    /// Filters acting per request, in order.
    pub filters: Vec<Filter>,
    /// Whether a response filter's template reads the request's headers, client
    /// address or path parameters: only then does the proxy keep them for it.
    pub response_reads_request: bool,
    /// Backend.
    pub backend: Backend,
    /// `enableAccessLog`/`disableAccessLog`, if the route has one (last wins).
    pub access_log: Option<StatusSet>,
    /// `maskAccessLogQuery` keys.
    pub mask_query: Arc<[String]>,
    /// The route as written (canonical eskip), for explaining.
    pub source: String,
    /// Skipper's leaf weight: the predicate count plus `Weight(n)` (module doc).
    pub priority: i64,
}

impl Route {
    /// Whether the request satisfies every predicate but the path, which the tree
    /// has matched; `req.path` is the routing form.
    fn others_match(&self, req: &RequestView<'_>) -> bool {
        self.predicates.iter().all(|p| p.matches(req))
    }

    /// Whether a `Method` or `Methods` predicate names CONNECT: only such a route
    /// tunnels; a CONNECT that reaches any other gets 405.
    pub fn allows_connect(&self) -> bool {
        allows_connect(&self.predicates)
    }
}

/// Whether a `Method` or `Methods` among `predicates` names CONNECT.
fn allows_connect(predicates: &[Predicate]) -> bool {
    predicates.iter().any(|p| match p {
        Predicate::Method(m) => *m == http::Method::CONNECT,
        Predicate::Methods(m) => m.contains(&http::Method::CONNECT),
        _ => false,
    })
}

/// The methods skipper's `Methods` accepts.
const STANDARD_METHODS: [http::Method; 9] = [
    http::Method::GET,
    http::Method::HEAD,
    http::Method::POST,
    http::Method::PUT,
    http::Method::PATCH,
    http::Method::DELETE,
    http::Method::CONNECT,
    http::Method::OPTIONS,
    http::Method::TRACE,
];

/// A service's routes, compiled for lookup.
#[derive(Debug, Default)]
pub struct RouteTable {
    /// In file order; everything else holds indices into it.
    routes: Vec<Route>,
    /// The routes with a `Path` or `PathSubtree`.
    tree: PathTree,
    /// The routes without, in priority order.
    unrouted: Box<[u32]>,
    /// Route indices sorted by id, to find a route's predecessor on reload.
    by_id: Box<[u32]>,
    /// Whether a route has a `TrafficSegment`: only then is a request given a draw.
    segments: bool,
}

/// What routes are compiled against.
#[derive(Debug)]
pub struct Context<'a> {
    /// Shared endpoint counters.
    pub registry: &'a Registry,
    /// The service's endpoints (for `<algorithm>` without URLs).
    pub service_endpoints: &'a [EndpointSpec],
    /// The table being replaced: unchanged routes keep their balancer state.
    pub previous: Option<&'a RouteTable>,
    /// Now.
    pub now: SystemTime,
}

impl RouteTable {
    /// Parses and compiles route text.
    ///
    /// # Errors
    /// Every syntax error, and every error of the routes that parsed: the routes
    /// around a syntax error are compiled too, so all problems are found at once.
    pub fn parse(text: &str, cx: &Context<'_>) -> Result<Self, RoutesError> {
        let parsed = eskip::parse_all(text);
        let mut problems: Vec<RouteProblem> = parsed.errors.into_iter().map(Into::into).collect();
        match Self::compile(&parsed.routes, cx) {
            Ok(table) if problems.is_empty() => return Ok(table),
            Ok(_) => {}
            Err(errors) => problems.extend(errors.into_iter().map(Into::into)),
        }
        Err(RoutesError::new(problems).expect("a problem was found"))
    }

    /// Compiles parsed routes.
    ///
    /// # Errors
    /// Every route error (a route's first problem of each predicate, filter and
    /// backend), duplicate ids too, in route order.
    pub fn compile(parsed: &[eskip::Route], cx: &Context<'_>) -> Result<Self, Vec<RouteError>> {
        let mut routes = Vec::with_capacity(parsed.len());
        let mut errors = Vec::new();
        let mut ids = std::collections::HashSet::new();
        let mut regexps = HashMap::new();
        for r in parsed {
            if !ids.insert(r.id.as_str()) {
                errors.push(RouteError {
                    pos: r.pos,
                    route: r.id.clone(),
                    message: "duplicate route id".into(),
                });
            }
            match compile_route(r, cx, &mut regexps) {
                Ok(route) => routes.push(route),
                Err(e) => errors.extend(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self::index(routes))
    }

    /// Builds the lookup structures over routes in file order.
    fn index(routes: Vec<Route>) -> Self {
        let len = u32::try_from(routes.len()).expect("fewer than 2^32 routes");
        let mut order: Vec<u32> = (0..len).collect();
        // Stable: equal priorities stay in file order.
        order.sort_by_key(|&i| Reverse(routes[i as usize].priority));
        let tree = PathTree::build(
            order
                .iter()
                .filter_map(|&i| routes[i as usize].path.as_ref().map(|p| (p, i))),
        );
        let unrouted = order
            .iter()
            .copied()
            .filter(|&i| routes[i as usize].path.is_none())
            .collect();
        let mut by_id: Vec<u32> = (0..len).collect();
        by_id.sort_by(|&a, &b| routes[a as usize].id.cmp(&routes[b as usize].id));
        let segments = routes.iter().any(|r| {
            r.predicates
                .iter()
                .any(|p| matches!(p, Predicate::Segment { .. }))
        });
        Self {
            routes,
            tree,
            unrouted,
            by_id: by_id.into(),
            segments,
        }
    }

    /// The default table of a service without routes: `* -> <roundRobin>` over the
    /// service's endpoints.
    pub fn service_default(cx: &Context<'_>) -> Self {
        Self::parse("default: * -> <roundRobin>;", cx).unwrap_or_default()
    }

    /// The route the request matches (module doc). `req.path` is the path as the client sent
    /// it; it is matched in its routing form ([`path::routing_path`]), and one with a
    /// malformed escape matches nothing.
    pub fn find(&self, req: &RequestView<'_>) -> Option<&Route> {
        let routed = path::routing_path(req.path).ok()?;
        self.find_routed(&RequestView {
            path: &routed,
            ..*req
        })
    }

    /// Like [`RouteTable::find`] for a request whose `path` is already the routing
    /// form. Decoding is not idempotent (`%2569` → `%69` → `i`), so a decoded path must
    /// never go through [`RouteTable::find`] again.
    pub fn find_routed(&self, req: &RequestView<'_>) -> Option<&Route> {
        if self.segments && req.draw.is_none() {
            return self.find_routed(&RequestView {
                draw: Some(crate::balance::rng::unit()),
                ..*req
            });
        }
        let mut first = |candidates: &[u32]| {
            candidates
                .iter()
                .copied()
                .find(|&i| self.routes[i as usize].others_match(req))
        };
        self.tree
            .lookup(req.path, &mut first)
            .or_else(|| first(&self.unrouted))
            .map(|i| &self.routes[i as usize])
    }

    /// The routes in file order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Gives the routes that balance over the service's endpoints a new set.
    pub fn set_service_endpoints(
        &self,
        specs: &[EndpointSpec],
        registry: &Registry,
        now: SystemTime,
    ) {
        for r in &self.routes {
            if let Backend::Pool(pool) = &r.backend
                && pool.service
            {
                pool.set.store(Arc::new(pool.build(specs, registry, now)));
            }
        }
    }

    fn balancer_of(&self, id: &str, algorithm: Algorithm) -> Option<Arc<Balancer>> {
        self.by_id
            .binary_search_by(|&i| self.routes[i as usize].id.as_str().cmp(id))
            .ok()
            .and_then(|at| match &self.routes[self.by_id[at] as usize].backend {
                Backend::Pool(p) if p.balancer.algorithm() == algorithm => {
                    Some(Arc::clone(&p.balancer))
                }
                _ => None,
            })
    }
}

impl Pool {
    fn build(&self, specs: &[EndpointSpec], registry: &Registry, now: SystemTime) -> EndpointSet {
        if self.created.is_empty() {
            return EndpointSet::build(specs, self.fade, registry, now);
        }
        let specs: Vec<EndpointSpec> = specs
            .iter()
            .map(|s| EndpointSpec {
                created: self.created.get(&s.authority).copied().or(s.created),
                ..s.clone()
            })
            .collect();
        EndpointSet::build(&specs, self.fade, registry, now)
    }
}

/// Route-level settings gathered from the filters.
#[derive(Default)]
struct Settings {
    access_log: Option<StatusSet>,
    mask_query: Vec<String>,
    fade: Option<FadeIn>,
    created: HashMap<String, SystemTime>,
    balance_factor: Option<f64>,
}

fn compile_route(
    r: &eskip::Route,
    cx: &Context<'_>,
    regexps: &mut HashMap<String, regex::Regex>,
) -> Result<Route, Vec<RouteError>> {
    let mut errors = Vec::new();
    let mut path = None;
    let mut predicates = Vec::new();
    let mut weight = 0;
    for call in &r.predicates {
        let a = Args { call, route: &r.id };
        match compile_predicate(&a, &mut path, &mut weight, regexps) {
            Ok(Some(p)) => add_predicate(&mut predicates, p),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    let params = path.as_ref().map(params::of).unwrap_or_default();
    let param = |name: &str| params::find(&params, name);
    let mut filters = Vec::new();
    let mut settings = Settings::default();
    let mut served = false;
    for call in &r.filters {
        // skipper's request phase stops at the first filter that serves, so the
        // access-log filters after one (which act in the request phase) never run;
        // they are still checked.
        let before = served.then_some((settings.access_log, settings.mask_query.len()));
        match compile_filter(&Args { call, route: &r.id }, &mut settings, &param) {
            Ok(Some(f)) => {
                served |= f.serves();
                filters.push(f);
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
        if let Some((access_log, masked)) = before {
            settings.access_log = access_log;
            settings.mask_query.truncate(masked);
        }
    }
    let backend = compile_backend(r, settings.fade.is_some(), &mut settings, cx).and_then(|b| {
        // A tunnel is a TCP connection of its own, never TLS; an https pool cannot
        // carry one.
        let tls = matches!(&b, Backend::Pool(p) if p.set.load().endpoints().iter().any(|e| e.tls));
        if tls && allows_connect(&predicates) {
            return Err(RouteError {
                pos: r.backend_pos,
                route: r.id.clone(),
                message: "CONNECT is not tunnelled to https backends".into(),
            });
        }
        Ok(b)
    });
    let backend = match backend {
        Ok(b) if errors.is_empty() => b,
        Ok(_) => return Err(errors),
        Err(e) => {
            errors.push(e);
            return Err(errors);
        }
    };
    let priority = weight.saturating_add(count(&predicates));
    let response_reads_request = filters
        .iter()
        .any(|f| matches!(f, Filter::ResponseHeader(_, v, _) if v.template().reads_request()));
    Ok(Route {
        id: r.id.clone(),
        path,
        predicates,
        filters,
        response_reads_request,
        backend,
        access_log: settings.access_log,
        mask_query: settings.mask_query.into(),
        source: r.to_string(),
        priority,
    })
}

/// Adds `p`; a `Header` for a name already checked replaces that one. The parser
/// refuses a second `Header` with the same name as skipper's does, but names that
/// differ only in case pass it and become one entry of skipper's canonical header
/// map, which keeps either value; here the last one holds.
fn add_predicate(predicates: &mut Vec<Predicate>, p: Predicate) {
    let same = match &p {
        Predicate::Header(name, _) => predicates
            .iter()
            .position(|q| matches!(q, Predicate::Header(n, _) if n == name)),
        _ => None,
    };
    match same {
        Some(at) => predicates[at] = p,
        None => predicates.push(p),
    }
}

/// Skipper's predicate count: each predicate counts one, except that the
/// `HeaderRegexp`s of one header name count one together.
fn count(predicates: &[Predicate]) -> i64 {
    let repeated = predicates
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            matches!(p, Predicate::HeaderRegexp(name, _)
                if predicates[..*i].iter().any(|q| matches!(q, Predicate::HeaderRegexp(n, _) if n == name)))
        })
        .count();
    i64::try_from(predicates.len() - repeated).unwrap_or(i64::MAX)
}

/// A predicate that matches, or `None` for one the route keeps elsewhere (its path,
/// its weight).
fn compile_predicate(
    a: &Args<'_>,
    path: &mut Option<PathMatch>,
    weight: &mut i64,
    regexps: &mut HashMap<String, regex::Regex>,
) -> Result<Option<Predicate>, RouteError> {
    Ok(Some(match a.call.name.as_str() {
        "Path" | "PathSubtree" => {
            a.count(1, 1, "one path")?;
            if path.is_some() {
                return Err(a.fail("a route takes one Path or PathSubtree"));
            }
            let text = a.str(0)?;
            let m = if a.call.name == "Path" { PathMatch::pattern(text) } else { PathMatch::subtree(text) };
            *path = Some(m.map_err(|e| a.fail(e))?);
            return Ok(None);
        }
        "PathRegexp" => {
            a.count(1, 1, "one regexp")?;
            Predicate::PathRegexp(a.regex_shared(0, regexps)?)
        }
        "Host" => {
            a.count(1, 1, "one regexp")?;
            Predicate::Host(a.regex_shared(0, regexps)?)
        }
        // skipper's `Method` compares the request's method with the text as written;
        // `Methods` takes the standard methods in any case and compares without case.
        "Method" => {
            a.count(1, 1, "one method (use Methods for several)")?;
            let m = a.str(0)?;
            Predicate::Method(
                http::Method::from_bytes(m.as_bytes())
                    .map_err(|_| a.fail(format!("{m:?} is not a method")))?,
            )
        }
        "Methods" => {
            a.count(1, usize::MAX, "one or more methods")?;
            let mut methods = Vec::new();
            for i in 0..a.len() {
                let m = a.str(i)?.to_ascii_uppercase();
                let method = http::Method::from_bytes(m.as_bytes())
                    .ok()
                    .filter(|m| STANDARD_METHODS.contains(m))
                    .ok_or_else(|| a.fail(format!("method {m} is not allowed")))?;
                methods.push(method);
            }
            Predicate::Methods(methods)
        }
        "Header" => {
            a.count(2, 2, "a name and a value")?;
            Predicate::Header(a.header_name(0)?, a.str(1)?.to_owned())
        }
        "HeaderRegexp" => {
            a.count(2, 2, "a name and a regexp")?;
            Predicate::HeaderRegexp(a.header_name(0)?, a.regex_shared(1, regexps)?)
        }
        "Weight" => {
            a.count(1, 1, "one number")?;
            // Skipper converts the number to an int, truncating it.
            #[expect(clippy::cast_possible_truncation, reason = "skipper truncates; `as` saturates")]
            let n = a.num(0)? as i64;
            *weight = weight.saturating_add(n);
            return Ok(None);
        }
        "True" | "False" => {
            a.count(0, 0, "no arguments")?;
            Predicate::Const(a.call.name == "True")
        }
        "Cookie" => {
            a.count(2, 2, "a cookie name and a regexp")?;
            Predicate::Cookie(a.str(0)?.to_owned(), a.regex_shared(1, regexps)?)
        }
        "QueryParam" => {
            a.count(1, 2, "a query key and an optional regexp")?;
            let re = if a.len() == 2 { Some(a.regex_shared(1, regexps)?) } else { None };
            Predicate::QueryParam(a.str(0)?.to_owned(), re)
        }
        name @ ("Source" | "SourceFromLast" | "ClientIP") => {
            a.count(1, usize::MAX, "one or more addresses or CIDRs")?;
            let nets = (0..a.len())
                .map(|i| predicate::Cidr::parse(a.str(i)?).map_err(|e| a.fail(e)))
                .collect::<Result<_, _>>()?;
            let of = match name {
                "Source" => predicate::SourceOf::First,
                "SourceFromLast" => predicate::SourceOf::Last,
                _ => predicate::SourceOf::Peer,
            };
            Predicate::Source(of, nets)
        }
        "Between" | "After" | "Before" => interval(a)?,
        "Traffic" => {
            a.count(1, 3, "a chance, and optionally a cookie name and a group")?;
            if a.len() == 2 {
                return Err(a.fail(
                    "takes a chance alone, or a chance, a cookie name and a group (stickiness)",
                ));
            }
            let chance = a.num(0)?;
            if !(0.0..=1.0).contains(&chance) {
                return Err(a.fail(format!("chance {chance} is not between 0 and 1")));
            }
            let sticky = if a.len() == 3 {
                Some((a.str(1)?.to_owned(), a.str(2)?.to_owned()))
            } else {
                None
            };
            Predicate::Traffic { chance, sticky }
        }
        "TrafficSegment" => {
            a.count(2, 2, "a start and an end between 0 and 1")?;
            let (min, max) = (a.num(0)?, a.num(1)?);
            if !(0.0..=1.0).contains(&min) || !(0.0..=1.0).contains(&max) {
                return Err(a.fail(format!("[{min}, {max}) is not within 0 and 1")));
            }
            if min > max {
                return Err(a.fail(format!("the start {min} is after the end {max}")));
            }
            // skipper gives the predicate a weight of -1, so with its predicate count
            // a segment adds nothing to the route's priority.
            *weight = weight.saturating_sub(1);
            Predicate::Segment { min, max }
        }
        other => return Err(a.fail(format!("unknown predicate `{other}` (Path, PathSubtree, PathRegexp, Host, Method, Methods, Header, HeaderRegexp, Weight, True, False, Cookie, QueryParam, Source, SourceFromLast, ClientIP, Between, After, Before, Traffic, TrafficSegment)"))),
    }))
}

/// `Between`, `After` or `Before` in skipper's forms: RFC 3339 strings, or Unix
/// seconds (numbers, truncated), or local times `2006-01-02T15:04:05` followed by a
/// time zone name; `Between`'s two of one form, the first earlier than the second.
fn interval(a: &Args<'_>) -> Result<Predicate, RouteError> {
    use eskip::Arg;
    let between = a.call.name == "Between";
    let times = if between { 2 } else { 1 };
    let usage = if between {
        "two RFC 3339 times, two Unix times, or two local times and a time zone"
    } else {
        "an RFC 3339 time, a Unix time, or a local time and a time zone"
    };
    a.count(times, times + 1, usage)?;
    let at: Vec<std::time::SystemTime> = if a.len() > times {
        let tz = predicate::location(a.str(times)?).map_err(|e| a.fail(e))?;
        (0..times)
            .map(|i| match &a.call.args[i] {
                Arg::Str(s) | Arg::Regex(s) => predicate::local_time(s, &tz).map_err(|e| a.fail(e)),
                _ => Err(a.fail(format!(
                    "argument {} must be a local time string before a time zone",
                    i + 1
                ))),
            })
            .collect::<Result<_, _>>()?
    } else if a.call.args[..times]
        .iter()
        .all(|x| matches!(x, Arg::Num(_)))
    {
        (0..times)
            .map(|i| predicate::unix_time(a.num(i)?).map_err(|e| a.fail(e)))
            .collect::<Result<_, _>>()?
    } else if a.call.args[..times]
        .iter()
        .all(|x| matches!(x, Arg::Str(_) | Arg::Regex(_)))
    {
        (0..times)
            .map(|i| lb_model::units::parse_rfc3339(a.str(i)?).map_err(|e| a.fail(e)))
            .collect::<Result<_, _>>()?
    } else {
        return Err(a.fail(format!("takes {usage}, not a mix")));
    };
    Ok(match (a.call.name.as_str(), at.as_slice()) {
        ("Between", &[from, until]) => {
            if from >= until {
                return Err(a.fail("the start must be earlier than the end"));
            }
            Predicate::Interval {
                from: Some(from),
                until: Some(until),
            }
        }
        ("After", &[from]) => Predicate::Interval {
            from: Some(from),
            until: None,
        },
        (_, &[until]) => Predicate::Interval {
            from: None,
            until: Some(until),
        },
        _ => unreachable!("`at` holds `times` entries"),
    })
}

/// A filter that acts per request, or `None` for one that configures the route.
/// `param` finds the route's path parameters for templates.
fn compile_filter(
    a: &Args<'_>,
    s: &mut Settings,
    param: &dyn Fn(&str) -> Option<ParamRef>,
) -> Result<Option<Filter>, RouteError> {
    let template = |i: usize| a.str(i).map(|text| Template::new(text, param));
    Ok(Some(match a.call.name.as_str() {
        "status" => {
            a.count(1, 1, "one status code")?;
            Filter::Status(a.status(0)?)
        }
        "inlineContent" => {
            a.count(1, 2, "a body and an optional content type")?;
            let body = a.str(0)?;
            let content_type = if a.len() == 2 {
                a.header_value(1)?
            } else {
                http::HeaderValue::from_static(sniff(body))
            };
            Filter::InlineContent {
                body: bytes::Bytes::copy_from_slice(body.as_bytes()),
                content_type,
            }
        }
        "setQuery" => {
            a.count(1, 2, "a key and a value, or a whole query")?;
            if a.len() == 1 {
                Filter::SetRawQuery(template(0)?)
            } else {
                Filter::SetQuery(template(0)?, template(1)?)
            }
        }
        "dropQuery" => {
            a.count(1, 1, "one key")?;
            Filter::DropQuery(template(0)?)
        }
        "modPath" => {
            a.count(2, 2, "a regexp and a replacement")?;
            Filter::ModPath(a.regex(0)?, a.str(1)?.to_owned())
        }
        "redirectTo" => {
            a.count(1, 2, "a status and an optional location")?;
            let status = a.status(0)?;
            if !status.is_redirection() {
                return Err(a.fail(format!("{status} is not a redirect status (3xx)")));
            }
            let loc = if a.len() == 2 {
                filter::Location::parse(a.str(1)?).map_err(|e| a.fail(e))?
            } else {
                filter::Location::default()
            };
            Filter::RedirectTo(status, loc)
        }
        name @ ("setRequestHeader"
        | "appendRequestHeader"
        | "setResponseHeader"
        | "appendResponseHeader") => {
            a.count(2, 2, "a name and a value")?;
            let k = a.header_name(0)?;
            let v = filter::HeaderTemplate::new(template(1)?).map_err(|e| a.fail(e))?;
            let mode = if name.starts_with("set") {
                filter::Mode::Set
            } else {
                filter::Mode::Append
            };
            if name.ends_with("RequestHeader") {
                Filter::RequestHeader(k, v, mode)
            } else {
                Filter::ResponseHeader(k, v, mode)
            }
        }
        "dropRequestHeader" | "dropResponseHeader" => {
            a.count(1, 1, "one header name")?;
            let k = a.header_name(0)?;
            if a.call.name == "dropRequestHeader" {
                Filter::DropRequestHeader(k)
            } else {
                Filter::DropResponseHeader(k)
            }
        }
        "setPath" => {
            a.count(1, 1, "one path")?;
            Filter::SetPath(filter::PathTemplate::new(template(0)?))
        }
        "stripQuery" => {
            // skipper reads one argument, `"true"` in any case, and ignores more.
            let to_headers = a.len() == 1 && a.str(0)?.eq_ignore_ascii_case("true");
            Filter::StripQuery { to_headers }
        }
        "enableAccessLog" | "disableAccessLog" => {
            let nums = (0..a.len())
                .map(|i| a.num(i))
                .collect::<Result<Vec<_>, _>>()?;
            s.access_log = Some(
                StatusSet::from_rule(a.call.name == "enableAccessLog", &nums)
                    .map_err(|e| a.fail(e))?,
            );
            return Ok(None);
        }
        "maskAccessLogQuery" => {
            a.count(1, usize::MAX, "one or more query keys")?;
            let keys = a.strings()?;
            if let Some(i) = keys.iter().position(String::is_empty) {
                return Err(a.fail(format!("argument {} must be a non-empty query key", i + 1)));
            }
            s.mask_query.extend(keys);
            // Skipper's mask filter is also an `enableAccessLog()`: it logs every
            // status unless a later enable/disable filter says otherwise.
            s.access_log = Some(StatusSet::ALL);
            return Ok(None);
        }
        "fadeIn" => {
            a.count(1, 2, "a duration and an optional exponent")?;
            let window = a.fade_duration(0)?;
            let exponent = if a.len() == 2 { a.num(1)? } else { 1.0 };
            if !exponent.is_finite() {
                return Err(a.fail(format!("exponent {exponent} is out of range")));
            }
            // As in skipper, a duration of 0 or less, or an exponent of 0 or less
            // (every endpoint's score is then 1 or more), fades nothing; the last
            // fadeIn of the route holds, so such a one also ends an earlier one.
            s.fade = window.filter(|_| exponent > 0.0).map(|window| FadeIn {
                window,
                exponent,
                min_weight: 0.01,
            });
            return Ok(None);
        }
        "endpointCreated" => {
            a.count(2, 2, "an endpoint URL and a time")?;
            let authority = endpoint_authority(a.str(0)?).map_err(|e| a.fail(e))?;
            let when = a.time(1)?;
            s.created.insert(authority, when);
            return Ok(None);
        }
        "consistentHashKey" => {
            a.count(1, 1, "one key template")?;
            Filter::ConsistentHashKey(template(0)?)
        }
        // skipper documents `comment` as doing nothing and takes any arguments
        // (its post-processor removes it from the route); `originMarker` only feeds
        // skipper's route-creation metrics. Neither becomes a filter here.
        "comment" => return Ok(None),
        "originMarker" => {
            a.count(3, 3, "an origin, an id and an RFC 3339 creation time")?;
            a.str(0)?;
            a.str(1)?;
            lb_model::units::parse_rfc3339(a.str(2)?).map_err(|e| a.fail(e))?;
            return Ok(None);
        }
        "consistentHashBalanceFactor" => {
            a.count(1, 1, "one number")?;
            let f = a.num(0)?;
            if !(f.is_finite() && f >= 1.0) {
                return Err(a.fail(format!("{f} must be at least 1")));
            }
            s.balance_factor = Some(f);
            return Ok(None);
        }
        _ => filter::compile(a)?,
    }))
}

fn compile_backend(
    r: &eskip::Route,
    _fade: bool,
    s: &mut Settings,
    cx: &Context<'_>,
) -> Result<Backend, RouteError> {
    let fail = |message: String| RouteError {
        pos: r.backend_pos,
        route: r.id.clone(),
        message,
    };
    let (algorithm, urls, service) = match &r.backend {
        eskip::Backend::Shunt => return Ok(Backend::Shunt),
        eskip::Backend::Network(url) => (Algorithm::RoundRobin, std::slice::from_ref(url), false),
        eskip::Backend::LoadBalanced {
            algorithm,
            endpoints,
        } => {
            let algo = match algorithm.as_deref() {
                None => Algorithm::RoundRobin,
                Some(name) => Algorithm::from_name(name).ok_or_else(|| fail(format!("unknown algorithm `{name}` (roundRobin, random, consistentHash, powerOfRandomNChoices, leastConnections)")))?,
            };
            (algo, endpoints.as_slice(), endpoints.is_empty())
        }
    };
    let algorithm = match algorithm {
        Algorithm::ConsistentHash { .. } => Algorithm::ConsistentHash {
            balance_factor: s.balance_factor,
        },
        other => other,
    };
    let mut specs = Vec::with_capacity(urls.len());
    for url in urls {
        let authority = endpoint_authority(url).map_err(fail)?;
        specs.push(EndpointSpec {
            created: s.created.get(&authority).copied(),
            authority,
            weight: 1,
        });
    }
    let balancer = cx
        .previous
        .and_then(|p| p.balancer_of(&r.id, algorithm))
        .unwrap_or_else(|| Arc::new(Balancer::new(algorithm)));
    let pool = Pool {
        balancer,
        set: ArcSwap::from_pointee(EndpointSet::default()),
        service,
        fade: s.fade,
        created: std::mem::take(&mut s.created),
    };
    let initial = if service {
        cx.service_endpoints
    } else {
        &specs
    };
    pool.set
        .store(Arc::new(pool.build(initial, cx.registry, cx.now)));
    Ok(Backend::Pool(Arc::new(pool)))
}

/// A backend URL → the endpoint's address ([`EndpointSpec::authority`]):
/// `http://host[:port][/path][?query]` → `host:port`, `https://…` →
/// `https://host:port`. As in skipper (`net.SchemeHost`), a backend is its scheme and
/// host, both lower-cased (`HTTP://Example.ORG` is `example.org:80`), with the
/// scheme's port when none is given; a path, query or user in the URL is ignored and
/// the backend gets the request's path. Other schemes are refused: the proxy speaks
/// HTTP/1.1 and h2c to clients but only HTTP/1.1, plain or over TLS, to backends.
pub fn endpoint_authority(url: &str) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not an http:// or https:// URL"))?;
    let (prefix, port) = if scheme.eq_ignore_ascii_case("http") {
        ("", "80")
    } else if scheme.eq_ignore_ascii_case("https") {
        (crate::balance::HTTPS_PREFIX, "443")
    } else {
        return Err(format!(
            "{url:?}: the scheme {scheme:?} is not supported (http or https)"
        ));
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if authority.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.ends_with(':') && !p.contains(']') && p.parse::<u16>().is_ok());
    let host = authority.to_ascii_lowercase();
    Ok(if has_port {
        format!("{prefix}{host}")
    } else {
        format!("{prefix}{host}:{port}")
    })
}

/// The Content-Type skipper's `inlineContent` gives a body without one: Go's content
/// sniffing, for the HTML tags it knows and plain text otherwise.
fn sniff(body: &str) -> &'static str {
    const TAGS: [&str; 17] = [
        "!doctype html",
        "html",
        "head",
        "script",
        "iframe",
        "h1",
        "div",
        "font",
        "table",
        "a",
        "style",
        "title",
        "b",
        "body",
        "br",
        "p",
        "!--",
    ];
    let t = body.trim_start().as_bytes();
    let html = t.first() == Some(&b'<')
        && TAGS.iter().any(|tag| {
            let n = tag.len();
            t.len() > n + 1
                && t[1..=n].eq_ignore_ascii_case(tag.as_bytes())
                && (tag == &"!--" || matches!(t[n + 1], b' ' | b'>'))
        });
    if html {
        "text/html; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    }
}

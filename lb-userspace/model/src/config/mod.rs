//! The agent's TOML configuration: parsed with serde (unknown fields rejected), then
//! validated once into typed values. Every error names the file, the line and the field.

mod accesslog;
mod duration_text;
mod error;
mod flows;
mod l7;
mod locate;
mod model;
mod trust;
mod tunnel;

use std::{collections::HashSet, path::Path};

pub use accesslog::{AccessLogConfig, AccessLogFormat};
pub use error::ConfigError;
pub use flows::{FlowTables, NatTimeoutsConfig};
pub use l7::{L7Config, Limits};
pub use model::{
    BackendConfig, Config, DurationText, EndpointSlicesConfig, EtcdConfig, FadeInConfig,
    ForwardingModeConfig, HealthCheckConfig, HealthCheckKind, Hook, NodeConfig, PortSpec, Protocol,
    ServiceConfig, XdpMode,
};
pub use trust::TrustedProxies;
pub use tunnel::{Tunnel, TunnelSettings};

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidConfig {
    /// Node settings.
    pub node: NodeConfig,
    /// Services in file order; each has a unique (VIP, port, protocol).
    pub services: Vec<ServiceConfig>,
    /// Flow-table sizes and `nat` timeouts, validated from `node`.
    pub flow_tables: FlowTables,
    /// The tunnel modes' outer headers, validated from `node.tunnel`.
    pub tunnel: Tunnel,
}

/// Checks the text of an `l7` service's routes: `Err(why)`, with line and column.
/// Route texts are compiled by the l7 crate (`lb_l7::check_routes`); the config only
/// says where they are, so the check is the caller's to pass in.
pub type RouteCheck = fn(&str) -> Result<(), String>;

/// Reads, parses and validates a config file; route texts (inline or in a
/// `routes_file`, resolved against the file's directory) go through `routes`.
///
/// # Errors
/// [`ConfigError`] naming the file, and where known the line, column and field.
pub fn load(path: &Path, routes: RouteCheck) -> Result<ValidConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.display().to_string(),
        source,
    })?;
    let mut config = parse(&text, &path.display().to_string(), routes)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for svc in &mut config.services {
        if let Some(file) = &mut svc.routes_file {
            if Path::new(file.as_str()).is_relative() {
                *file = dir.join(&*file).display().to_string();
            }
            let problem = match std::fs::read_to_string(&*file) {
                Ok(text) => routes(&text)
                    .err()
                    .map(|e| each_line(&format!("{file}: "), &e)),
                Err(e) => Some(format!("{file}: {e}")),
            };
            if let Some(problem) = problem {
                return Err(ConfigError::Invalid {
                    file: path.display().to_string(),
                    line: line_of(&text, &svc.name),
                    field: format!("service {}.routes_file", svc.name),
                    problem,
                });
            }
        }
    }
    Ok(config)
}

/// `text` with `prefix` before each of its lines: a route checker reports every error
/// of a text, one a line, and each should say where it is.
fn each_line(prefix: &str, text: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The line of the `name = "…"` of service `name`, or 0.
fn line_of(text: &str, name: &str) -> usize {
    let needle = format!("\"{name}\"");
    text.lines()
        .position(|l| l.trim_start().starts_with("name") && l.contains(&needle))
        .map_or(0, |i| i + 1)
}

/// Parses and validates config text; `file` names it in errors.
///
/// # Errors
/// [`ConfigError::Syntax`] for TOML and schema errors (unknown field, wrong type, bad
/// address), [`ConfigError::Invalid`] for values that parse but make no sense.
pub fn parse(text: &str, file: &str, routes: RouteCheck) -> Result<ValidConfig, ConfigError> {
    let raw: Config = toml::from_str(text).map_err(|err| {
        let span = err.span();
        let (line, column) = span.as_ref().map_or((0, 0), |s| line_col(text, s.start));
        ConfigError::Syntax {
            file: file.to_owned(),
            line,
            column,
            field: span.and_then(|s| locate::field_at(text, s.start)),
            message: err.message().to_owned(),
        }
    })?;
    validate(raw, text, file, routes)
}

fn validate(
    raw: Config,
    text: &str,
    file: &str,
    routes: RouteCheck,
) -> Result<ValidConfig, ConfigError> {
    let invalid = |span: std::ops::Range<usize>, field: String, problem: String| {
        let (line, _) = line_col(text, span.start);
        ConfigError::Invalid {
            file: file.to_owned(),
            line,
            field,
            problem,
        }
    };
    let mut seen_vips = HashSet::new();
    let mut seen_names = HashSet::new();
    let mut services = Vec::with_capacity(raw.service.len());
    for (i, spanned) in raw.service.into_iter().enumerate() {
        let span = spanned.span();
        let svc = spanned.into_inner();
        let at = |field: &str| format!("service[{i}] ({}).{field}", svc.name);
        if svc.name.is_empty() {
            return Err(invalid(
                span,
                format!("service[{i}].name"),
                "must not be empty".into(),
            ));
        }
        if !seen_names.insert(svc.name.clone()) {
            return Err(invalid(span, at("name"), "duplicate service name".into()));
        }
        if !seen_vips.insert((svc.vip, svc.port, svc.protocol)) {
            return Err(invalid(
                span,
                at("vip"),
                format!(
                    "{}:{}/{} is already served by another service",
                    svc.vip, svc.port, svc.protocol
                ),
            ));
        }
        if let Err((field, problem)) = check_service(&svc, &raw.node, routes) {
            return Err(invalid(span, at(&field), problem));
        }
        services.push(svc);
    }
    let node_invalid = |field: &str, problem: String| ConfigError::Invalid {
        file: file.to_owned(),
        line: 0,
        field: format!("node.{field}"),
        problem,
    };
    let nat = &raw.node.nat_addresses;
    if nat.iter().filter(|a| a.is_ipv4()).count() > 1
        || nat.iter().filter(|a| a.is_ipv6()).count() > 1
    {
        return Err(node_invalid(
            "nat_addresses",
            "at most one IPv4 and one IPv6 address".into(),
        ));
    }
    let ports = raw.node.nat_ports;
    if ports.first == 0 || ports.first > ports.last {
        return Err(node_invalid(
            "nat_ports",
            format!(
                "{}-{} is not a range of ports 1-65535",
                ports.first, ports.last
            ),
        ));
    }
    let metrics = &raw.node.metrics_address;
    if !metrics.is_empty() && metrics.parse::<std::net::SocketAddr>().is_err() {
        return Err(node_invalid(
            "metrics_address",
            format!("{metrics:?} is not an address:port such as 127.0.0.1:9470"),
        ));
    }
    if let Some(etcd) = &raw.node.etcd
        && let Err(problem) = check_etcd(etcd)
    {
        return Err(node_invalid("etcd", problem));
    }
    if let Err((field, problem)) = raw.node.l7.limits() {
        return Err(node_invalid(&field, problem));
    }
    let node = &raw.node;
    let flow_tables = flows::validate(
        node.conntrack_entries,
        node.embryonic_entries,
        node.nat_entries,
        &node.nat_timeouts,
    )
    .map_err(|(field, problem)| node_invalid(&field, problem))?;
    let tunnel = node
        .tunnel
        .check()
        .map_err(|(field, problem)| node_invalid(&format!("tunnel.{field}"), problem))?;
    if services.len() > lb_common::maps::MAX_SERVICES as usize {
        return Err(ConfigError::Invalid {
            file: file.to_owned(),
            line: 0,
            field: "service".into(),
            problem: format!(
                "at most {} services are supported",
                lb_common::maps::MAX_SERVICES
            ),
        });
    }
    if raw.node.interface.is_empty() {
        return Err(ConfigError::Invalid {
            file: file.to_owned(),
            line: 0,
            field: "node.interface".into(),
            problem: "must name the interface to attach to".into(),
        });
    }
    Ok(ValidConfig {
        node: raw.node,
        services,
        flow_tables,
        tunnel,
    })
}

/// The checks one service must pass beyond its schema, against the node settings:
/// `Err((field, problem))` with the field relative to the service. Used for the
/// config file and for services from etcd alike.
pub fn check_service(
    svc: &ServiceConfig,
    node: &NodeConfig,
    routes: RouteCheck,
) -> Result<(), (String, String)> {
    let fail = |field: String, problem: String| (field, problem);
    if svc.backends.len() > lb_common::maps::MAX_BACKENDS_PER_SERVICE as usize {
        return Err(fail(
            "backends".into(),
            format!(
                "{} backends; at most {} are supported per service",
                svc.backends.len(),
                lb_common::maps::MAX_BACKENDS_PER_SERVICE
            ),
        ));
    }
    if let Some(m) = svc.table_size
        && (!crate::maglev::is_prime(m)
            || m as usize <= svc.backends.len()
            || m > lb_common::maps::MAX_TABLE_SIZE)
    {
        return Err(fail(
            "table_size".into(),
            format!(
                "{m} must be a prime above the backend count ({}) and at most {}",
                svc.backends.len(),
                lb_common::maps::MAX_TABLE_SIZE
            ),
        ));
    }
    let mut seen_backends = HashSet::new();
    for (j, b) in svc.backends.iter().enumerate() {
        if matches!(
            svc.mode,
            ForwardingModeConfig::Dsr | ForwardingModeConfig::Nat
        ) && b.address.is_ipv6() != svc.vip.is_ipv6()
        {
            return Err(fail(
                format!("backends[{j}].address"),
                format!(
                    "{} is not of the VIP's address family (dsr and nat keep the family; \
                     ipip and gue may cross it)",
                    b.address
                ),
            ));
        }
        if b.address.is_unspecified()
            || b.address.is_multicast()
            || b.address == std::net::Ipv4Addr::BROADCAST
        {
            return Err(fail(
                format!("backends[{j}].address"),
                format!("{} is not a usable backend address", b.address),
            ));
        }
        if b.weight > 10_000 {
            return Err(fail(
                format!("backends[{j}].weight"),
                format!("{} is above the maximum of 10000", b.weight),
            ));
        }
        if !seen_backends.insert(b.address) {
            return Err(fail(
                format!("backends[{j}].address"),
                format!("duplicate backend {}", b.address),
            ));
        }
    }
    if let Some(fade) = &svc.fade_in {
        if fade.window.get().is_zero() {
            return Err(fail(
                "fade_in.window".into(),
                "must be longer than 0".into(),
            ));
        }
        if !(fade.exponent.is_finite() && fade.exponent > 0.0) {
            return Err(fail(
                "fade_in.exponent".into(),
                format!("{} must be a positive number", fade.exponent),
            ));
        }
        if !(fade.min_weight > 0.0 && fade.min_weight <= 1.0) {
            return Err(fail(
                "fade_in.min_weight".into(),
                format!("{} must be in (0, 1]", fade.min_weight),
            ));
        }
    }
    check_l7(svc, routes)?;
    if svc.endpoint_slices.is_some() {
        if node.endpointslice_dir.is_empty() && node.etcd.is_none() {
            return Err(fail(
                "endpoint_slices".into(),
                "needs node.endpointslice_dir or node.etcd".into(),
            ));
        }
        if !svc.backends.is_empty() {
            return Err(fail(
                "endpoint_slices".into(),
                "use either backends or endpoint_slices, not both".into(),
            ));
        }
    }
    if let Some(hc) = &svc.health_check {
        if hc.port.is_none() && svc.port == PortSpec::All {
            return Err(fail(
                "health_check.port".into(),
                "required for an all-ports service".into(),
            ));
        }
        for (name, d) in [("interval", &hc.interval), ("timeout", &hc.timeout)] {
            if d.get().is_zero() {
                return Err(fail(
                    format!("health_check.{name}"),
                    "must be longer than 0".into(),
                ));
            }
        }
        if hc.rise == 0 || hc.fall == 0 {
            return Err(fail(
                "health_check".into(),
                "rise and fall must be at least 1".into(),
            ));
        }
    }
    if svc.mode == ForwardingModeConfig::Nat
        && !node
            .nat_addresses
            .iter()
            .any(|a| a.is_ipv6() == svc.vip.is_ipv6())
    {
        return Err(fail(
            "mode".into(),
            format!(
                "nat needs a node.nat_addresses entry of the VIP's family ({})",
                if svc.vip.is_ipv6() { "IPv6" } else { "IPv4" }
            ),
        ));
    }
    Ok(())
}

fn check_etcd(etcd: &EtcdConfig) -> Result<(), String> {
    if etcd.endpoints.is_empty() {
        return Err("endpoints must name at least one etcd client URL".into());
    }
    if let Some(bad) = etcd
        .endpoints
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
    {
        return Err(format!(
            "endpoint {bad:?} must start with http:// or https://"
        ));
    }
    if !etcd.prefix.starts_with('/') || etcd.prefix.len() < 2 || etcd.prefix.ends_with('/') {
        return Err(format!(
            "prefix {:?} must look like /name (no trailing /)",
            etcd.prefix
        ));
    }
    if etcd.username.is_empty() != etcd.password_file.is_empty() {
        return Err("username and password_file go together".into());
    }
    if etcd.cert_file.is_empty() != etcd.key_file.is_empty() {
        return Err("cert_file and key_file go together".into());
    }
    Ok(())
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    // The parser's offsets are character boundaries; should one not be, the line is
    // still right and the column counts from the boundary before it.
    let end = (0..=offset.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let before = text.get(..end).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |p| p + 1) + 1;
    (line, column)
}

#[cfg(test)]
mod tests;

/// What only `l7` services may have, and what they need: one TCP port, routes that
/// compile, not both inline routes and a route file.
fn check_l7(svc: &ServiceConfig, routes: RouteCheck) -> Result<(), (String, String)> {
    let routed = svc.routes.is_some() || svc.routes_file.is_some();
    if svc.mode != ForwardingModeConfig::L7 {
        if routed {
            return Err(("routes".into(), "only l7 services have routes".into()));
        }
        return Ok(());
    }
    if svc.port == PortSpec::All || svc.protocol != Protocol::Tcp {
        return Err((
            "port".into(),
            "an l7 service listens on one TCP port".into(),
        ));
    }
    if svc.routes.is_some() && svc.routes_file.is_some() {
        return Err((
            "routes".into(),
            "use either routes or routes_file, not both".into(),
        ));
    }
    if let Some(text) = &svc.routes {
        // Every error of the text, one a line: continuation lines indented under the
        // service's heading.
        routes(text).map_err(|e| {
            (
                "routes".to_owned(),
                e.lines().collect::<Vec<_>>().join("\n  "),
            )
        })?;
    }
    Ok(())
}

//! `[node.l7]`: limits and timeouts of the HTTP proxy.

use std::time::Duration;

use super::trust::TrustedProxies;
use crate::config::DurationText;

/// Proxy settings; every field has a default.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct L7Config {
    /// Proxy worker threads (default 0: one per CPU).
    pub workers: usize,
    /// Open client connections per node; further connections are closed at once
    /// (default 10000).
    pub max_connections: usize,
    /// Largest request head (request line and headers) in bytes; larger gets 431
    /// (default 65536, at least 8192).
    pub max_header_bytes: usize,
    /// Most request headers; more gets 431 (default 100).
    pub max_headers: usize,
    /// Time for a client to send a request head (default 10 s).
    pub header_timeout: DurationText,
    /// Time for a backend to answer with a response head (default 60 s); then 504.
    pub request_timeout: DurationText,
    /// Time a connection may sit without a request before it is closed (default 60 s).
    pub idle_timeout: DurationText,
    /// Time to connect to a backend (default 2 s); a failed connect is retried.
    pub connect_timeout: DurationText,
    /// Further attempts, on the next endpoints, when connecting fails for a request
    /// that is idempotent and has no body (default 2).
    pub retries: usize,
    /// How long a shutdown waits for requests in flight (default 30 s).
    pub shutdown_timeout: DurationText,
    /// Peers (addresses or CIDR blocks) whose X-Forwarded-For is believed for the
    /// access log's client address and the consistent-hash key; from any other peer
    /// the header is ignored (default: none, trust nobody).
    pub trusted_proxies: Vec<String>,
    /// Whether a backend gets the client's Host rather than its own `host:port`
    /// (default false), for routes without a `preserveHost` filter: skipper's
    /// `-proxy-preserve-host` flag.
    pub preserve_host: bool,
    /// A PEM file of CA certificates trusted for `https://` backends in addition to
    /// the system's trust store, for backends behind a private CA (default "":
    /// the system's store only). Read when the proxy starts.
    pub backend_ca_file: String,
    /// Accept any certificate from `https://` backends, unverified (default false):
    /// skipper's `-insecure`. Traffic is still encrypted but open to anyone on the
    /// path; meant for tests and migrations only.
    pub backend_tls_insecure_skip_verify: bool,
}

impl Default for L7Config {
    fn default() -> Self {
        Self {
            workers: 0,
            max_connections: 10_000,
            max_header_bytes: 65_536,
            max_headers: 100,
            header_timeout: DurationText::Millis(10_000),
            request_timeout: DurationText::Millis(60_000),
            idle_timeout: DurationText::Millis(60_000),
            connect_timeout: DurationText::Millis(2_000),
            retries: 2,
            shutdown_timeout: DurationText::Millis(30_000),
            trusted_proxies: Vec::new(),
            preserve_host: false,
            backend_ca_file: String::new(),
            backend_tls_insecure_skip_verify: false,
        }
    }
}

/// [`L7Config`] parsed.
#[derive(Clone, Debug)]
pub struct Limits {
    /// See [`L7Config::max_connections`].
    pub max_connections: usize,
    /// See [`L7Config::max_header_bytes`].
    pub max_header_bytes: usize,
    /// See [`L7Config::max_headers`].
    pub max_headers: usize,
    /// See [`L7Config::header_timeout`].
    pub header_timeout: Duration,
    /// See [`L7Config::request_timeout`].
    pub request_timeout: Duration,
    /// See [`L7Config::idle_timeout`].
    pub idle_timeout: Duration,
    /// See [`L7Config::connect_timeout`].
    pub connect_timeout: Duration,
    /// See [`L7Config::retries`].
    pub retries: usize,
    /// See [`L7Config::shutdown_timeout`].
    pub shutdown_timeout: Duration,
    /// See [`L7Config::trusted_proxies`].
    pub trusted_proxies: TrustedProxies,
    /// See [`L7Config::preserve_host`].
    pub preserve_host: bool,
    /// See [`L7Config::backend_ca_file`]; `None` when empty.
    pub backend_ca_file: Option<std::path::PathBuf>,
    /// See [`L7Config::backend_tls_insecure_skip_verify`].
    pub backend_tls_insecure_skip_verify: bool,
}

impl L7Config {
    /// Checks and parses; `Err((field, problem))`.
    ///
    /// # Errors
    /// A duration that does not parse or is zero, a limit out of range, a trusted
    /// proxy that is not an address block.
    pub fn limits(&self) -> Result<Limits, (String, String)> {
        let d = |name: &str, t: &DurationText| {
            let v = t.parse().map_err(|e| (format!("l7.{name}"), e))?;
            if v.is_zero() {
                return Err((format!("l7.{name}"), "must be more than 0".to_owned()));
            }
            Ok(v)
        };
        if self.max_header_bytes < 8192 {
            return Err((
                "l7.max_header_bytes".into(),
                format!("{} is below the minimum of 8192", self.max_header_bytes),
            ));
        }
        if self.max_connections == 0 || self.max_headers == 0 {
            return Err((
                "l7.max_connections".into(),
                "limits must be more than 0".into(),
            ));
        }
        Ok(Limits {
            max_connections: self.max_connections,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            header_timeout: d("header_timeout", &self.header_timeout)?,
            request_timeout: d("request_timeout", &self.request_timeout)?,
            idle_timeout: d("idle_timeout", &self.idle_timeout)?,
            connect_timeout: d("connect_timeout", &self.connect_timeout)?,
            retries: self.retries,
            shutdown_timeout: d("shutdown_timeout", &self.shutdown_timeout)?,
            trusted_proxies: TrustedProxies::parse(&self.trusted_proxies)
                .map_err(|e| ("l7.trusted_proxies".to_owned(), e.to_string()))?,
            preserve_host: self.preserve_host,
            backend_ca_file: (!self.backend_ca_file.is_empty())
                .then(|| self.backend_ca_file.clone().into()),
            backend_tls_insecure_skip_verify: self.backend_tls_insecure_skip_verify,
        })
    }
}

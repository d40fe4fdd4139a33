//! Kubernetes `discovery.k8s.io/v1` EndpointSlice documents → backends per service port.
//!
//! Follows the semantics kube-proxy implements (shared/testdata/endpointslices/
//! schema-notes.md):
//! - accepted: `discovery.k8s.io/v1` `EndpointSlice` objects, alone, in multi-document
//!   YAML, in an `EndpointSliceList` (items without kind/apiVersion) or a kubectl `List`;
//!   everything else is ignored with a reason;
//! - addressType `IPv4`/`IPv6` only (FQDN and unknown types ignored, never sniffed);
//! - the slice's service is `(namespace, kubernetes.io/service-name label)`; no label, no
//!   service;
//! - only an endpoint's first address is used (as kube-proxy does), canonicalised;
//! - conditions: nil `ready` and nil `serving` mean true, nil `terminating` false; ready
//!   endpoints take new flows, serving+terminating ones only drain — unless a service
//!   port has no ready endpoint, then they take new flows too (kube-proxy's fallback);
//! - ports: name defaults to `""`, protocol to `TCP`; a nil, zero or out-of-range port is
//!   unusable, and a slice without usable ports gives no backends;
//! - duplicates (same address and port across slices) keep the non-terminating copy;
//! - a document that is a `discovery.k8s.io/v1` `EndpointSlice` but does not fit its
//!   schema (a `creationTimestamp` that is not RFC 3339, a port that is not a number,
//!   …) refuses the whole file with the document's field and line: the API server
//!   would not have stored it, and taking the rest of the file would silently drop
//!   that slice's endpoints.

use std::{collections::BTreeMap, net::IpAddr, time::SystemTime};

mod raw;
mod yaml;

use raw::{RawDoc, RawSlice};

/// A backend's state from its conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EndpointState {
    /// Ready: new and existing flows.
    Ready,
    /// Serving but terminating: existing flows only (new ones only as a fallback).
    Draining,
}

/// One usable endpoint of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The first address, canonical.
    pub addr: IpAddr,
    /// Its state.
    pub state: EndpointState,
}

/// One usable port of a slice.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlicePort {
    /// Port name (`""` when unnamed): the join key to the Service's port.
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The target port.
    pub port: u16,
}

/// An accepted EndpointSlice, reduced to what backends are built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Namespace (`default` when absent).
    pub namespace: String,
    /// The `kubernetes.io/service-name` label.
    pub service: String,
    /// The slice's own name.
    pub name: String,
    /// Whether the addresses are IPv6.
    pub ipv6: bool,
    /// `metadata.creationTimestamp`, when present and valid (a fade-in input).
    pub created: Option<SystemTime>,
    /// Usable ports.
    pub ports: Vec<SlicePort>,
    /// Usable endpoints (excluded ones dropped).
    pub endpoints: Vec<Endpoint>,
}

/// A document that was not ingested, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// 0-based index of the document in its file (items of a list count separately).
    pub index: usize,
    /// Why.
    pub reason: String,
}

/// A file's contents: accepted slices and ignored documents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Accepted slices.
    pub slices: Vec<Slice>,
    /// Ignored documents.
    pub ignored: Vec<Ignored>,
}

/// Why a file of EndpointSlices was refused as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SliceError {
    /// Not YAML or JSON.
    #[error("{message}")]
    Syntax {
        /// The YAML parser's message, with its line and column.
        message: String,
    },
    /// A `discovery.k8s.io/v1` `EndpointSlice` that does not fit the schema.
    #[error("document {document}: malformed EndpointSlice: {message}")]
    Malformed {
        /// 0-based index of the document in the file (a list counts once, empty
        /// documents count too).
        document: usize,
        /// The field's path, what is wrong with it, and its line and column.
        message: String,
    },
}

/// Parses a file of one or more YAML or JSON documents.
///
/// # Errors
/// [`SliceError`]: text that is not YAML/JSON at all, or a malformed EndpointSlice,
/// with the location.
pub fn parse(text: &str) -> Result<Parsed, SliceError> {
    // JSON (`kubectl get -o json`, what an API client or etcd holds): a JSON reader
    // allocates only for the fields kept. Any failure falls through to the YAML
    // reader, which reads JSON too and reports precisely.
    if text.trim_start().starts_with(['{', '['])
        && let Some(docs) = typed_json(text)
    {
        return Ok(from_typed(docs));
    }
    // Fast path: every document straight into the fields we read, the rest skipped
    // without being built. A file with any document that does not fit those types —
    // ignored or malformed ones, bad YAML — is read again one document at a time,
    // which gives the precise per-document reasons.
    match typed_yaml(text) {
        Some(docs) => Ok(from_typed(docs)),
        None => parse_generic(text),
    }
}

/// Every non-null JSON document of `text` as a [`RawDoc`], or `None` if any does not
/// fit.
fn typed_json(text: &str) -> Option<Vec<RawDoc>> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Option<RawDoc>>()
        .filter_map(Result::transpose)
        .collect::<Result<_, _>>()
        .ok()
}

/// Every non-empty YAML document of `text` as a [`RawDoc`], or `None` if any does not
/// fit.
fn typed_yaml(text: &str) -> Option<Vec<RawDoc>> {
    yaml::typed(text)
}

/// [`parse`] for documents that all fit [`RawDoc`].
fn from_typed(docs: Vec<RawDoc>) -> Parsed {
    let mut out = Parsed::default();
    let mut index = 0;
    for doc in docs {
        match doc.kind.as_deref() {
            Some(list @ ("EndpointSliceList" | "List")) => {
                let inherit = list == "EndpointSliceList";
                for item in doc.items.unwrap_or_default() {
                    let refused = if inherit {
                        not_ours(Some("EndpointSlice"), doc.api_version.as_deref())
                    } else {
                        not_ours(item.kind.as_deref(), item.api_version.as_deref())
                    };
                    match refused {
                        Some(reason) => out.ignored.push(Ignored { index, reason }),
                        None => take(item.into_slice(), index, &mut out),
                    }
                    index += 1;
                }
            }
            _ => {
                match not_ours(doc.kind.as_deref(), doc.api_version.as_deref()) {
                    Some(reason) => out.ignored.push(Ignored { index, reason }),
                    None => take(doc.into_slice(), index, &mut out),
                }
                index += 1;
            }
        }
    }
    out
}

/// [`parse`] one document at a time: slower, but reports each document on its own.
/// A document's type fields are read first, leniently; then only what they make an
/// EndpointSlice is read against the schema.
fn parse_generic(text: &str) -> Result<Parsed, SliceError> {
    let mut out = Parsed::default();
    let mut index = 0;
    for (document, doc) in yaml::documents(text)?.iter().enumerate() {
        let header = yaml::header(doc)?;
        if header.null {
            continue; // an empty document (e.g. a trailing `---`)
        }
        let malformed = |message| SliceError::Malformed { document, message };
        match header.kind.as_deref() {
            Some(list @ ("EndpointSliceList" | "List")) => {
                // EndpointSliceList items carry no TypeMeta: they inherit the list's.
                let refused: Vec<Option<String>> = header
                    .items
                    .iter()
                    .map(|item| {
                        if list == "EndpointSliceList" {
                            not_ours(Some("EndpointSlice"), header.api_version.as_deref())
                        } else {
                            not_ours(item.kind.as_deref(), item.api_version.as_deref())
                        }
                    })
                    .collect();
                let strict: Vec<bool> = refused.iter().map(Option::is_none).collect();
                let mut slices = if strict.contains(&true) {
                    yaml::strict(doc, yaml::Parts::Items(&strict)).map_err(malformed)?
                } else {
                    Vec::new()
                }
                .into_iter();
                for refused in refused {
                    match refused {
                        Some(reason) => out.ignored.push(Ignored { index, reason }),
                        None => {
                            if let Some(slice) = slices.next() {
                                take(slice, index, &mut out);
                            }
                        }
                    }
                    index += 1;
                }
            }
            kind => {
                match not_ours(kind, header.api_version.as_deref()) {
                    Some(reason) => out.ignored.push(Ignored { index, reason }),
                    None => {
                        for slice in yaml::strict(doc, yaml::Parts::Whole).map_err(malformed)? {
                            take(slice, index, &mut out);
                        }
                    }
                }
                index += 1;
            }
        }
    }
    Ok(out)
}

const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// Why a document of this `kind` and `apiVersion` is not ours, or `None` when it is a
/// `discovery.k8s.io/v1` `EndpointSlice`.
fn not_ours(kind: Option<&str>, api: Option<&str>) -> Option<String> {
    if kind != Some("EndpointSlice") {
        return Some(format!("kind {kind:?} is not EndpointSlice"));
    }
    if api != Some("discovery.k8s.io/v1") {
        return Some(format!("apiVersion {api:?} is not discovery.k8s.io/v1"));
    }
    None
}

/// Takes the slice of document `index`, or records why it gives none.
fn take(raw: RawSlice, index: usize, out: &mut Parsed) {
    let mut ignore = |reason: String| out.ignored.push(Ignored { index, reason });
    let name = raw.metadata.name.clone().unwrap_or_default();
    let ipv6 = match raw.address_type.as_deref() {
        Some("IPv4") => false,
        Some("IPv6") => true,
        other => {
            return ignore(format!(
                "slice {name:?}: addressType {other:?} is not IPv4 or IPv6"
            ));
        }
    };
    let service = raw
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME).cloned().flatten())
        .filter(|s| !s.is_empty());
    let Some(service) = service else {
        return ignore(format!("slice {name:?}: no {LABEL_SERVICE_NAME} label"));
    };
    let ports = raw
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let port = u16::try_from(p.port.0?).ok().filter(|&p| p > 0)?;
            Some(SlicePort {
                name: p.name.unwrap_or_default(),
                protocol: p.protocol.unwrap_or_else(|| "TCP".into()),
                port,
            })
        })
        .collect();
    let endpoints = raw
        .endpoints
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let first = e.addresses.as_ref()?.first()?;
            let addr: IpAddr = first.parse().ok()?;
            let addr = canonical(addr);
            if addr.is_ipv6() != ipv6 {
                return None;
            }
            let c = e.conditions.unwrap_or_default();
            let (ready, serving, terminating) = (
                c.ready.unwrap_or(true),
                c.serving.unwrap_or(true),
                c.terminating.unwrap_or(false),
            );
            let state = if ready {
                EndpointState::Ready
            } else if serving && terminating {
                EndpointState::Draining
            } else {
                return None;
            };
            Some(Endpoint { addr, state })
        })
        .collect();
    out.slices.push(Slice {
        namespace: raw.metadata.namespace.unwrap_or_else(|| "default".into()),
        service,
        name,
        ipv6,
        created: raw.metadata.creation_timestamp,
        ports,
        endpoints,
    });
}

/// IPv4-mapped IPv6 addresses as IPv4; everything else as parsed (already canonical).
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// A backend of one service port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortBackend {
    /// Address.
    pub addr: IpAddr,
    /// Target port.
    pub port: u16,
    /// State.
    pub state: EndpointState,
}

/// `(namespace, service)`.
pub type ServiceKey = (String, String);
/// `(port name, protocol)`.
pub type PortKey = (String, String);

/// Backends per service port, per service.
pub type ServiceBackends = BTreeMap<ServiceKey, BTreeMap<PortKey, Vec<PortBackend>>>;

/// Every service's backends, per service port, from a set of slices.
pub fn backends<'a>(slices: impl IntoIterator<Item = &'a Slice>) -> ServiceBackends {
    type States = BTreeMap<(IpAddr, u16), EndpointState>;
    let mut out: BTreeMap<ServiceKey, BTreeMap<PortKey, States>> = BTreeMap::new();
    for slice in slices {
        let service = out
            .entry((slice.namespace.clone(), slice.service.clone()))
            .or_default();
        for port in &slice.ports {
            let set = service
                .entry((port.name.clone(), port.protocol.clone()))
                .or_default();
            for ep in &slice.endpoints {
                let state = set.entry((ep.addr, port.port)).or_insert(ep.state);
                // A duplicate keeps the non-terminating copy.
                *state = (*state).min(ep.state);
            }
        }
    }
    out.into_iter()
        .map(|(svc, ports)| {
            let ports = ports
                .into_iter()
                .map(|(k, set)| {
                    let list = set
                        .into_iter()
                        .map(|((addr, port), state)| PortBackend { addr, port, state })
                        .collect();
                    (k, list)
                })
                .collect();
            (svc, ports)
        })
        .collect()
}

/// The backends that take new flows: the ready ones, or if there are none the draining
/// ones (kube-proxy's fallback).
pub fn for_new_flows(list: &[PortBackend]) -> Vec<&PortBackend> {
    let ready: Vec<&PortBackend> = list
        .iter()
        .filter(|b| b.state == EndpointState::Ready)
        .collect();
    if ready.is_empty() {
        list.iter()
            .filter(|b| b.state == EndpointState::Draining)
            .collect()
    } else {
        ready
    }
}

#[cfg(test)]
mod tests;

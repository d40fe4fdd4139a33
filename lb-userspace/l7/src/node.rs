//! The proxy as part of lbd: what the agent's state means for it. After every change
//! (reload, etcd, health, fade-in step) lbd calls [`L7Node::sync`], which derives each
//! `l7` service's routes and endpoints and applies what differs; route files are
//! watched by their stamps. The proxy starts with the first `l7` service.

use std::{collections::HashMap, net::SocketAddr, path::Path, sync::Arc, time::SystemTime};

use super::{
    accesslog::AccessLog,
    balance::EndpointSpec,
    proxy::{Proxy, ServiceInput},
};
use lb_model::{
    config::{ForwardingModeConfig, PortSpec, ValidConfig},
    dataplane::ServiceSpec,
    filestamp::{FileStamp, SETTLE},
};

/// A route file: the text in force and the stamp it was read at.
#[derive(Debug, Default)]
struct WatchedFile {
    read: Option<FileStamp>,
    text: Option<Arc<str>>,
}

/// lbd's proxy and what it last applied.
#[derive(Debug, Default)]
pub struct L7Node {
    proxy: Option<Proxy>,
    /// Listening sockets handed over by the previous lbd, until the first sync.
    inherited: Vec<std::net::TcpListener>,
    files: HashMap<String, WatchedFile>,
    applied: Vec<ServiceInput>,
    /// Each route source's state: `None` when its latest text compiled, else why not.
    route_states: std::collections::BTreeMap<String, Option<String>>,
}

impl L7Node {
    /// A node that serves `listeners` (handed over by the previous lbd, see
    /// [`super::handover`]) for the services that listen on their addresses.
    pub fn with_listeners(listeners: Vec<std::net::TcpListener>) -> Self {
        Self {
            inherited: listeners,
            ..Self::default()
        }
    }

    /// The proxy's listening sockets, to hand over to the next lbd.
    pub fn listeners(&self) -> Vec<&std::net::TcpListener> {
        self.proxy
            .as_ref()
            .map(Proxy::listeners)
            .unwrap_or_default()
    }

    /// Brings the proxy in line with the config's `l7` services and the weights last
    /// programmed (`applied`: health and fade-in included).
    pub fn sync(&mut self, config: &ValidConfig, applied: &[ServiceSpec]) {
        let inputs = self.inputs(config, applied);
        if inputs == self.applied {
            // Handed-over sockets no service wants close after the first sync.
            self.inherited.clear();
            return;
        }
        if self.proxy.is_none() {
            if inputs.is_empty() {
                self.inherited.clear();
                return;
            }
            match start(config) {
                Ok(p) => self.proxy = Some(p),
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        "cannot start the l7 proxy, l7 services are not served"
                    );
                    return;
                }
            }
        }
        let Some(proxy) = &mut self.proxy else { return };
        proxy.adopt(std::mem::take(&mut self.inherited));
        let errors = proxy.apply(&inputs);
        for e in &errors {
            if let super::proxy::ApplyError::Listen {
                service,
                addr,
                source,
            } = e
            {
                tracing::error!(
                    service = %service,
                    listen = %addr,
                    error = %source,
                    "cannot listen, the l7 service is not served"
                );
            }
        }
        // A source whose text changed is ok unless this apply refused it.
        for input in &inputs {
            let before = self.applied.iter().find(|a| a.name == input.name);
            if before.is_none_or(|b| b.routes != input.routes) {
                let refused = errors.iter().find_map(|e| match e {
                    super::proxy::ApplyError::Routes { origin, source }
                        if *origin == input.routes_origin =>
                    {
                        Some(source.to_string())
                    }
                    _ => None,
                });
                let file = config
                    .services
                    .iter()
                    .find(|s| s.name == input.name)
                    .and_then(|s| s.routes_file.as_deref())
                    .map(tracing::field::display);
                match &refused {
                    Some(error) => tracing::error!(
                        service = %input.name,
                        source = "routes",
                        file,
                        %error,
                        "routes refused, the previous routes serve"
                    ),
                    None => tracing::info!(
                        service = %input.name,
                        source = "routes",
                        file,
                        "routes loaded"
                    ),
                }
                self.route_states
                    .insert(input.routes_origin.clone(), refused);
            }
        }
        self.route_states
            .retain(|origin, _| inputs.iter().any(|i| &i.routes_origin == origin));
        self.applied = inputs;
    }

    /// The proxy's counters, if it runs.
    pub fn snapshot(&self) -> Option<super::stats::L7Snapshot> {
        self.proxy.as_ref().map(|p| super::stats::L7Snapshot {
            routes: self
                .route_states
                .iter()
                .map(|(o, e)| (o.clone(), e.clone()))
                .collect(),
            ..p.snapshot()
        })
    }

    /// The running proxy, if any service needed one.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// Drains requests in flight and flushes the access log.
    pub fn shutdown(self) {
        if let Some(p) = self.proxy {
            p.shutdown();
        }
    }

    fn inputs(&mut self, config: &ValidConfig, applied: &[ServiceSpec]) -> Vec<ServiceInput> {
        let mut out = Vec::new();
        for svc in config
            .services
            .iter()
            .filter(|s| s.mode == ForwardingModeConfig::L7)
        {
            let PortSpec::Port(port) = svc.port else {
                continue;
            };
            let (routes, origin) = match (&svc.routes, &svc.routes_file) {
                (Some(text), _) => (
                    Some(Arc::from(text.as_str())),
                    format!("service {} routes", svc.name),
                ),
                (None, Some(file)) => (self.route_file(file), file.clone()),
                (None, None) => (None, format!("service {} default route", svc.name)),
            };
            let endpoints = applied
                .iter()
                .find(|s| s.name == svc.name)
                .map(|spec| endpoints(spec, port))
                .unwrap_or_default();
            out.push(ServiceInput {
                name: svc.name.clone(),
                listen: SocketAddr::new(svc.vip, port),
                routes,
                routes_origin: origin,
                endpoints,
            });
        }
        out
    }

    /// The text of a route file: re-read when its stamp changed and the file was last
    /// modified [`SETTLE`] ago or more (the first read is not delayed); while
    /// unreadable, the last text read stays in force.
    fn route_file(&mut self, file: &str) -> Option<Arc<str>> {
        let stamp = FileStamp::of(Path::new(file));
        let w = self.files.entry(file.to_owned()).or_default();
        let first = w.read.is_none();
        if w.read.as_ref() == Some(&stamp) || !(first || stamp.settled(SystemTime::now(), SETTLE)) {
            return w.text.clone();
        }
        w.read = Some(stamp);
        match std::fs::read_to_string(file) {
            Ok(text) => w.text = Some(Arc::from(text)),
            Err(e) => tracing::error!(
                source = "routes",
                %file,
                error = %e,
                "cannot read the route file, the routes in force stay"
            ),
        }
        w.text.clone()
    }
}

fn endpoints(spec: &ServiceSpec, vip_port: u16) -> Vec<EndpointSpec> {
    spec.backends
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let port = spec
                .ports
                .get(i)
                .copied()
                .filter(|p| *p != 0)
                .unwrap_or(vip_port);
            EndpointSpec {
                authority: SocketAddr::new(*addr, port).to_string(),
                weight: spec.weights.get(i).copied().unwrap_or(1),
                created: None,
            }
        })
        .collect()
}

fn start(config: &ValidConfig) -> Result<Proxy, String> {
    let node = &config.node;
    let limits = node
        .l7
        .limits()
        .map_err(|(f, p)| format!("node.{f}: {p}"))?;
    let log = AccessLog::open(node.access_log.clone())
        .map_err(|e| format!("access log {}: {e}", node.access_log.file))?;
    let proxy = Proxy::start(limits, node.l7.workers, Some(log), node.access_log.enabled)
        .map_err(|e| e.to_string())?;
    tracing::info!("l7 proxy started");
    Ok(proxy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_file_is_read_once_its_new_stamp_has_settled() {
        let dir = std::env::temp_dir().join(format!("lb-l7-settle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("routes.eskip");
        let file = path.to_str().expect("utf-8 path");
        let mut node = L7Node::default();
        std::fs::write(&path, "a: * -> <shunt>;").expect("write");
        // The first read is not delayed.
        assert_eq!(node.route_file(file).as_deref(), Some("a: * -> <shunt>;"));
        // Truncated on the way to a new text: the text in force stays...
        std::fs::write(&path, "").expect("truncate");
        assert_eq!(node.route_file(file).as_deref(), Some("a: * -> <shunt>;"));
        // ...and a stamp that changes again starts its wait again.
        std::thread::sleep(SETTLE / 2);
        std::fs::write(&path, "b: * -> <shunt>;\n").expect("write");
        assert_eq!(node.route_file(file).as_deref(), Some("a: * -> <shunt>;"));
        std::thread::sleep(SETTLE * 3 / 4);
        assert_eq!(node.route_file(file).as_deref(), Some("a: * -> <shunt>;"));
        // Settled: read.
        std::thread::sleep(SETTLE / 2);
        assert_eq!(node.route_file(file).as_deref(), Some("b: * -> <shunt>;\n"));
        // Unchanged since: no wait, no read.
        assert_eq!(node.route_file(file).as_deref(), Some("b: * -> <shunt>;\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

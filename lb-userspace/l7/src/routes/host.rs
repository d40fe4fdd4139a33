//! The Host a backend gets, as skipper's proxy chooses it: the endpoint's own
//! `host:port` by default, the client's Host with the node's `preserve_host` or a
//! route's `preserveHost("true")`, or whatever a filter set Host to
//! (`setRequestHeader`, `appendRequestHeader`, `modRequestHeader`).
//!
//! skipper keeps the choice as a text and compares texts; the choice here is kept
//! by kind so that a load-balanced route, whose endpoint is picked only after the
//! filters ran, needs no text for "the backend's own".

use http::HeaderValue;

/// Which Host goes to the backend; filters change it in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum UpstreamHost {
    /// The picked endpoint's `host:port` (each retry's own).
    #[default]
    Backend,
    /// The client's Host (else the target's authority; the backend's when the
    /// request had neither, as for an HTTP/1.0 request without a Host).
    Incoming,
    /// A value a filter set.
    Set(HeaderValue),
}

impl UpstreamHost {
    /// Where a request starts: the node's `preserve_host` (skipper's
    /// `-proxy-preserve-host`).
    pub fn initial(preserve_host: bool) -> Self {
        if preserve_host {
            Self::Incoming
        } else {
            Self::Backend
        }
    }

    /// `preserveHost(preserve)`. It overrides only the proxy's own choices: with
    /// `true` the backend's Host becomes the client's, with `false` the client's
    /// (or a set value equal to it, which skipper cannot tell apart) becomes the
    /// backend's; any other value a filter set stays. `incoming` is the client's
    /// Host.
    pub fn preserve(&mut self, preserve: bool, incoming: &str) {
        let is_incoming = match self {
            Self::Incoming => true,
            Self::Set(v) => v.as_bytes() == incoming.as_bytes(),
            Self::Backend => false,
        };
        if preserve && *self == Self::Backend {
            *self = Self::Incoming;
        } else if !preserve && is_incoming {
            *self = Self::Backend;
        }
    }
}

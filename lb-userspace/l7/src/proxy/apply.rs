//! Applying a service's new input to its running state: routes recompiled when their
//! text changed, endpoints replaced in place; and what can go wrong.

use std::{net::SocketAddr, sync::Arc, time::SystemTime};

use super::{Running, ServiceInput};
use crate::{
    balance::Registry,
    routes::{Context, RouteTable, RoutesError},
};

/// A service the proxy could not (fully) apply; it keeps what it had.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Its routes did not compile; the previous routes stay.
    #[error("{origin}: {source}; keeping the previous routes")]
    Routes {
        /// File or inline origin.
        origin: String,
        /// Why.
        source: RoutesError,
    },
    /// Its VIP:port could not be bound.
    #[error("service {service}: listening on {addr}: {source}")]
    Listen {
        /// Service.
        service: String,
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Applies a running service's new input: routes recompiled when their text changed,
/// endpoints replaced when they changed. A text that was refused before is refused
/// again with the same error, without compiling it again, for as long as it is the
/// input; a text equal to the one in force clears the refusal. So every apply says
/// whether the service's input is in force (after good → bad → good → bad, the second
/// bad text is reported like the first).
pub(super) fn update(
    running: &mut Running,
    input: &ServiceInput,
    registry: &Registry,
    now: SystemTime,
) -> Result<(), ApplyError> {
    if running.input.routes == input.routes {
        running.rejected = None;
    }
    if running.input == *input {
        return Ok(());
    }
    let refused = |source: RoutesError| ApplyError::Routes {
        origin: input.routes_origin.clone(),
        source,
    };
    let mut result = Ok(());
    if running.input.routes != input.routes {
        match &running.rejected {
            Some((text, error)) if Some(text) == input.routes.as_ref() => {
                result = Err(refused(error.clone()));
            }
            _ => {
                let previous = running.state.routes.load_full();
                match compile(input, registry, Some(&previous), now) {
                    Ok(table) => {
                        running.state.routes.store(Arc::new(table));
                        running.rejected = None;
                        running.input = input.clone();
                        return Ok(());
                    }
                    Err(source) => {
                        running.rejected = input
                            .routes
                            .as_ref()
                            .map(|text| (Arc::clone(text), source.clone()));
                        result = Err(refused(source));
                    }
                }
            }
        }
    }
    if running.input.endpoints != input.endpoints {
        running
            .state
            .routes
            .load()
            .set_service_endpoints(&input.endpoints, registry, now);
        running.input.endpoints.clone_from(&input.endpoints);
    }
    result
}

pub(super) fn compile(
    input: &ServiceInput,
    registry: &Registry,
    previous: Option<&RouteTable>,
    now: SystemTime,
) -> Result<RouteTable, RoutesError> {
    let cx = Context {
        registry,
        service_endpoints: &input.endpoints,
        previous,
        now,
    };
    match &input.routes {
        Some(text) => RouteTable::parse(text, &cx),
        None => Ok(RouteTable::service_default(&cx)),
    }
}

//! What a backend failure is answered with, as skipper answers it.
//!
//! skipper (`proxy/proxy.go`, `makeBackendRequest` and `makeErrorResponse`) sorts
//! the error of Go's HTTP client into a status:
//! - dialing failed (refused, unreachable, dial timeout): 502, and an idempotent
//!   bodiless request may go to the next endpoint;
//! - the route's `backendTimeout` deadline passed, or no response head within the
//!   response-header timeout (a `net.Error` that is a timeout): 504;
//! - any other `net.Error` — a socket error after the connection was made, such as a
//!   reset or a broken pipe while the request is written or the head is read: 503;
//! - anything else, which for a backend means it closed the connection before a
//!   whole response head came (Go returns `io.EOF`/`io.ErrUnexpectedEOF`) or sent a
//!   head that does not parse (`malformed HTTP response`): 500, the code skipper
//!   gives an error it does not know;
//! - with no endpoint to ask: 503.
//!
//! [`Failure::after_connect`] makes the same sort of hyper's errors: an `io::Error`
//! in the chain is the socket's (503, or 504 for a timeout); a message cut short or
//! a head that does not parse is the backend's protocol failure (500).

use std::error::Error as StdError;

use http::StatusCode;

use super::forward::Failure;

impl Failure {
    /// The failure of a request whose connection was made (`e` is what the client
    /// returned, with its causes).
    pub(super) fn after_connect(e: &(dyn StdError + 'static)) -> Self {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(e);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                return if io.kind() == std::io::ErrorKind::TimedOut {
                    Failure::Timeout
                } else {
                    Failure::Reset
                };
            }
            cause = c.source();
        }
        Failure::Closed
    }

    /// The status of skipper's answer (the body is its reason phrase).
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Failure::NoEndpoints | Failure::Reset => StatusCode::SERVICE_UNAVAILABLE,
            Failure::Unreachable => StatusCode::BAD_GATEWAY,
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Failure::Closed | Failure::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Failure::ClientBody => StatusCode::BAD_REQUEST,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(Box<dyn StdError + 'static>);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl StdError for Wrap {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }

    /// skipper's statuses per kind (proxy.go `makeBackendRequest`): a socket error
    /// anywhere in the chain is Go's `net.Error` (503, a timeout 504); without one
    /// the error is not one skipper knows (500).
    #[test]
    fn errors_sort_as_skipper_sorts_them() {
        use std::io::{Error, ErrorKind};
        let io = |k: ErrorKind| Wrap(Box::new(Wrap(Box::new(Error::from(k)))));
        let cases: [(&(dyn StdError + 'static), Failure, u16); 5] = [
            (&io(ErrorKind::ConnectionReset), Failure::Reset, 503),
            (&io(ErrorKind::BrokenPipe), Failure::Reset, 503),
            (&io(ErrorKind::TimedOut), Failure::Timeout, 504),
            (&Wrap(Box::new(std::fmt::Error)), Failure::Closed, 500),
            (&std::fmt::Error, Failure::Closed, 500),
        ];
        for (e, want, status) in cases {
            let got = Failure::after_connect(e);
            assert_eq!(
                std::mem::discriminant(&got),
                std::mem::discriminant(&want),
                "{e:?}"
            );
            assert_eq!(got.status().as_u16(), status, "{e:?}");
        }
        assert_eq!(Failure::Unreachable.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            Failure::NoEndpoints.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}

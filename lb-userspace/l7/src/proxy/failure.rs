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
//! [`Failure::after_connect`] makes the same sort of hyper's errors and of our own
//! client's ([`super::upstream::ClientError`]): an `io::Error` in the chain is the
//! socket's (503, or 504 for a timeout); a message cut short or a head that does not
//! parse is the backend's protocol failure (500).

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

    /// The failure of a TLS endpoint whose TCP connect succeeded and whose handshake
    /// did not; `None` when `e` is no such failure. As Go's TLS client fails in
    /// skipper: a certificate that does not verify, or no common protocol, is an
    /// error skipper does not know (500); an alert from the backend or a socket error
    /// is a `net.Error` (503); the handshake running out of time is a timeout (504);
    /// the backend closing mid-handshake is Go's `io.EOF` (500).
    pub(super) fn handshake(e: &(dyn StdError + 'static)) -> Option<Self> {
        use super::tls::ConnectError;
        let mut cause: Option<&(dyn StdError + 'static)> = Some(e);
        while let Some(c) = cause {
            match c.downcast_ref::<ConnectError>() {
                Some(ConnectError::Connect(_)) => return None,
                Some(ConnectError::ServerName(_)) => return Some(Failure::Tls),
                Some(ConnectError::Handshake(io)) => {
                    return Some(match (io.kind(), tls_error(io)) {
                        (_, Some(rustls::Error::AlertReceived(_))) => Failure::Reset,
                        (_, Some(_)) => Failure::Tls,
                        (std::io::ErrorKind::TimedOut, None) => Failure::Timeout,
                        (std::io::ErrorKind::UnexpectedEof, None) => Failure::Closed,
                        (_, None) => Failure::Reset,
                    });
                }
                None => cause = c.source(),
            }
        }
        None
    }

    /// The status of skipper's answer (the body is its reason phrase).
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Failure::NoEndpoints | Failure::Reset => StatusCode::SERVICE_UNAVAILABLE,
            Failure::Unreachable => StatusCode::BAD_GATEWAY,
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Failure::Closed | Failure::Internal | Failure::Tls => StatusCode::INTERNAL_SERVER_ERROR,
            Failure::ClientBody => StatusCode::BAD_REQUEST,
        }
    }
}

/// The rustls error an I/O error of tokio-rustls carries, if any (`io::Error`'s
/// `source` skips the error it wraps, so it is asked for directly).
fn tls_error(io: &std::io::Error) -> Option<&rustls::Error> {
    io.get_ref()?.downcast_ref::<rustls::Error>()
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

    /// A failed handshake with an `https://` backend, as Go's TLS client fails in
    /// skipper: the certificate does not verify (500, an error skipper does not
    /// know), the backend sends an alert or resets (a `net.Error`: 503), the
    /// handshake times out (504), the backend closes mid-handshake (`io.EOF`: 500);
    /// a failed TCP connect is no handshake failure (502 and retried, as for http).
    #[test]
    fn tls_handshake_failures_sort_as_skipper_sorts_them() {
        use std::io::{Error, ErrorKind};

        use super::super::tls::ConnectError;
        let tls = |e: rustls::Error| ConnectError::Handshake(Error::new(ErrorKind::InvalidData, e));
        let io = |k: ErrorKind| ConnectError::Handshake(Error::from(k));
        let cases = [
            (
                tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer,
                )),
                Some(500),
            ),
            (
                tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName,
                )),
                Some(500),
            ),
            (
                tls(rustls::Error::AlertReceived(
                    rustls::AlertDescription::HandshakeFailure,
                )),
                Some(503),
            ),
            (io(ErrorKind::TimedOut), Some(504)),
            (io(ErrorKind::UnexpectedEof), Some(500)),
            (io(ErrorKind::ConnectionReset), Some(503)),
            (ConnectError::ServerName("a b".into()), Some(500)),
            (
                ConnectError::Connect(Box::new(Error::from(ErrorKind::ConnectionRefused))),
                None,
            ),
        ];
        for (e, want) in cases {
            let text = format!("{e:?}");
            let wrapped = Wrap(Box::new(e));
            assert_eq!(
                Failure::handshake(&wrapped).map(|f| f.status().as_u16()),
                want,
                "{text}"
            );
        }
        let plain = Wrap(Box::new(Error::from(ErrorKind::ConnectionRefused)));
        assert!(Failure::handshake(&plain).is_none());
    }
}

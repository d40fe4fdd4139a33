//! What can go wrong on a backend connection of our own, sorted the way
//! [`super::super::failure`] and [`super::super::body`] need it: a socket error keeps
//! its `io::Error` (its kind tells a timeout from a reset), a backend that closed early
//! or answered something that is not HTTP/1.1 carries none.

/// Why an exchange with a backend, or its response body, failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket failed: reset, broken pipe, a timeout of the kernel's.
    #[error("the backend connection failed")]
    Io(#[source] std::io::Error),
    /// The backend closed the connection before a whole response head.
    #[error("the backend closed the connection before a whole response head")]
    ClosedBeforeHead,
    /// The backend closed the connection before the end of the response body.
    #[error("the backend closed the connection before the end of the response body")]
    ClosedMidBody,
    /// The backend's response does not parse, or frames its body in a way we refuse.
    #[error("the backend's response is malformed")]
    Malformed(#[source] Malformed),
    /// The request body could not be read (the client's framing or connection).
    #[error("reading the request body for the backend")]
    RequestBody(#[source] crate::proxy::client_body::ClientBodyError),
    /// The request body is longer or shorter than its Content-Length.
    #[error("the request body does not match its Content-Length")]
    RequestBodyLength,
    /// The body of a response that came through hyper (hyper-util's pools, tunnels)
    /// failed.
    #[error("the backend's response body failed")]
    Hyper(#[source] hyper::Error),
    /// The request's deadline for its response head passed
    /// ([`super::SendError::Timeout`]).
    #[error("no response head by the request's deadline")]
    TimedOut,
}

/// What is wrong with a backend's response, as its parser found it.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Malformed {
    /// The status line or a header line does not parse (this includes obs-fold).
    #[error("response head: {0}")]
    Head(httparse::Error),
    /// The response head is longer than [`super::codec::MAX_HEAD`] bytes.
    #[error("response head over {} bytes", super::codec::MAX_HEAD)]
    HeadTooLarge,
    /// A header name or value that `http` does not take.
    #[error("response header {0}")]
    Header(&'static str),
    /// Content-Length is not a number, or there are several that differ.
    #[error("invalid or conflicting Content-Length")]
    ContentLength,
    /// Both Transfer-Encoding and Content-Length: RFC 9112 §6.3 calls it a likely
    /// smuggling attempt, to be handled as an error.
    #[error("both Transfer-Encoding and Content-Length")]
    LengthAndEncoding,
    /// Transfer-Encoding in an HTTP/1.0 response, which cannot have one.
    #[error("Transfer-Encoding in an HTTP/1.0 response")]
    EncodingInHttp10,
    /// A chunk size that is no hex number, or one past `u64`.
    #[error("invalid chunk size")]
    ChunkSize,
    /// A chunk extension with a bare LF, or more extension bytes than allowed.
    #[error("invalid chunk extension")]
    ChunkExtension,
    /// A chunk's data not followed by CRLF, or a line not ended by one.
    #[error("missing CRLF in the chunked body")]
    ChunkCrlf,
    /// The trailer section does not parse.
    #[error("trailers: {0}")]
    Trailers(httparse::Error),
    /// The trailer section is longer than allowed, or has too many fields.
    #[error("trailer section too large")]
    TrailersTooLarge,
}

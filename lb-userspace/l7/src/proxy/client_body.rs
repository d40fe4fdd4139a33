//! A client's request body, however it came: over HTTP/1 through the proxy's own
//! server ([`super::h1`]), over HTTP/2 through hyper's, or none.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::h1::{BodyError, RequestBody};

/// A request body from a client.
#[derive(Debug)]
pub enum ClientBody {
    /// No body (an HTTP/1 head without one).
    Empty,
    /// An HTTP/1 body, read by the client's connection.
    H1(RequestBody),
    /// A body from hyper's server: an HTTP/2 stream's DATA.
    Hyper(Incoming),
}

/// Why a client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// The HTTP/1 body's framing or connection failed.
    #[error(transparent)]
    H1(#[from] BodyError),
    /// hyper's (HTTP/2) body failed.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        match self.get_mut() {
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::H1(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(ClientBodyError::H1))),
            ClientBody::Hyper(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(ClientBodyError::Hyper))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Empty => true,
            ClientBody::H1(b) => b.is_end_stream(),
            ClientBody::Hyper(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::H1(b) => b.size_hint(),
            ClientBody::Hyper(b) => b.size_hint(),
        }
    }
}

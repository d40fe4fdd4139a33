//! A CONNECT's client side once the backend said yes: the connection hands its
//! socket, with whatever it had read past the CONNECT's head, to the tunnel
//! ([`crate::proxy::tunnel`]) after writing the 2xx answer.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::{net::TcpStream, sync::oneshot};

/// The client's socket after a CONNECT's 2xx answer, and the bytes the client sent
/// after the CONNECT's head that were already read.
#[derive(Debug)]
pub struct Upgraded {
    pub stream: TcpStream,
    pub read: Bytes,
}

/// In a CONNECT request's extensions: resolves to the client's side of the tunnel
/// once the connection has written the 2xx answer (an error if it did not). A
/// request's extensions must be `Clone`; clones share the one receiver, and the
/// first to wait takes it.
#[derive(Clone, Debug)]
pub struct OnUpgrade(Arc<Mutex<Option<oneshot::Receiver<Upgraded>>>>);

/// Why no socket came.
#[derive(Debug, thiserror::Error)]
#[error("the connection did not hand its socket over (no 2xx answer, or it closed)")]
pub struct NotUpgraded;

impl OnUpgrade {
    /// Waits for the connection to hand the client's socket over.
    ///
    /// # Errors
    /// The answer was not a 2xx, the connection ended before it was written, or
    /// another clone took the socket.
    pub async fn upgraded(self) -> Result<Upgraded, NotUpgraded> {
        let rx = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or(NotUpgraded)?;
        rx.await.map_err(|_| NotUpgraded)
    }
}

/// A pair for one CONNECT: the connection keeps the sender.
pub(crate) fn pair() -> (oneshot::Sender<Upgraded>, OnUpgrade) {
    let (tx, rx) = oneshot::channel();
    (tx, OnUpgrade(Arc::new(Mutex::new(Some(rx)))))
}

//! CONNECT through a route that allows it (`Method("CONNECT")`): the request goes to
//! the pool's pick on a connection of its own, and when the backend answers 2xx both
//! connections become one byte tunnel until either side closes. Any other answer goes
//! back to the client as it is. A CONNECT no route allows never gets here: 405.

use std::time::Duration;

use http::{Request, Response, Uri, header, request::Parts};
use hyper::{body::Incoming, upgrade::OnUpgrade};
use hyper_util::rt::TokioIo;

use super::{body::UpBody, forward::Failure, h1, rewind::Rewind, service::ServiceState};
use crate::{
    balance::{InFlight, Pick},
    routes::Pool,
};

/// Opens the tunnel for `parts` (whose target is the authority to connect to).
pub(super) async fn open(
    state: &ServiceState,
    pool: &Pool,
    mut parts: Parts,
    now: std::time::SystemTime,
) -> Result<(Response<Incoming>, Option<InFlight>), Failure> {
    let set = pool.set.load_full();
    let i = pool
        .balancer
        .pick(&set, &Pick { now, key: 0 })
        .ok_or(Failure::NoEndpoints)?;
    let endpoint = &set.endpoints()[i];
    let limits = &state.shared.limits;
    let stream = match tokio::time::timeout(
        limits.connect_timeout,
        tokio::net::TcpStream::connect(&*endpoint.authority),
    )
    .await
    {
        Ok(Ok(s)) => s,
        _ => {
            endpoint
                .stats
                .failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Failure::Unreachable);
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Failure::after_connect(&e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    // HTTP/1 clients come through our own server, HTTP/2 ones through hyper's.
    let client_side = match parts.extensions.remove::<h1::OnUpgrade>() {
        Some(on) => Some(ClientSide::H1(on)),
        None => parts
            .extensions
            .remove::<OnUpgrade>()
            .map(ClientSide::Hyper),
    };
    let target = parts.uri.authority().map(|a| a.as_str().to_owned());
    let Some(target) = target else {
        return Err(Failure::ClientBody);
    };
    let mut req = Request::new(UpBody::Empty);
    *req.method_mut() = http::Method::CONNECT;
    *req.uri_mut() = target.parse::<Uri>().map_err(|_| Failure::ClientBody)?;
    super::headers::strip_hop_by_hop(&mut parts.headers);
    *req.headers_mut() = parts.headers;
    if let Ok(v) = target.parse() {
        req.headers_mut().insert(header::HOST, v);
    }
    let inflight = endpoint.stats.start();
    let mut resp =
        match tokio::time::timeout(limits.request_timeout, sender.send_request(req)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(Failure::after_connect(&e)),
            Err(_) => return Err(Failure::Timeout),
        };
    if !resp.status().is_success() {
        return Ok((resp, Some(inflight)));
    }
    let backend_side = hyper::upgrade::on(&mut resp);
    let Some(client_side) = client_side else {
        return Err(Failure::Internal);
    };
    let idle = limits.idle_timeout;
    tokio::spawn(async move {
        // The endpoint counts the tunnel as in flight while it is open.
        let _inflight = inflight;
        let Ok(backend) = backend_side.await else {
            return;
        };
        let mut backend = TokioIo::new(backend);
        // A tunnel with no bytes either way for `idle_timeout` is closed like an idle
        // connection.
        match client_side {
            ClientSide::H1(on) => {
                let Ok(h1::Upgraded { stream, read }) = on.upgraded().await else {
                    return;
                };
                let mut client = Rewind::new(read, stream);
                let _ = copy_until_idle(&mut client, &mut backend, idle).await;
            }
            ClientSide::Hyper(on) => {
                let Ok(client) = on.await else { return };
                let _ = copy_until_idle(&mut TokioIo::new(client), &mut backend, idle).await;
            }
        }
    });
    Ok((resp, None))
}

/// The client's side of a tunnel, once its connection lets go of it.
enum ClientSide {
    H1(h1::OnUpgrade),
    Hyper(OnUpgrade),
}

/// Copies both ways until both sides end or nothing moves for `idle`.
async fn copy_until_idle<A, B>(a: &mut A, b: &mut B, idle: Duration) -> std::io::Result<()>
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut ab, mut ba) = ([0u8; 16 * 1024], [0u8; 16 * 1024]);
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        tokio::select! {
            r = a.read(&mut ab), if a_open => match r? {
                0 => { a_open = false; b.shutdown().await?; }
                n => b.write_all(&ab[..n]).await?,
            },
            r = b.read(&mut ba), if b_open => match r? {
                0 => { b_open = false; a.shutdown().await?; }
                n => a.write_all(&ba[..n]).await?,
            },
            () = tokio::time::sleep(idle) => return Ok(()),
        }
    }
    Ok(())
}

//! Zero-downtime restart: the next lbd takes over the running one's listening sockets.
//!
//! Stopping lbd and starting another leaves the l7 ports closed in between (clients
//! are refused for about 0.1 s) and ends every keep-alive connection. Instead, an lbd
//! that starts while another runs for the same state directory asks it to hand over,
//! on the unix socket `<node.state_dir>/handover.sock` (mode 0600):
//!
//! 1. the new lbd connects and sends `lbd-handover 1`;
//! 2. the old one stops its control plane (agent loop, admin socket, metrics, etcd
//!    watch, health checks) so that two agents never program the data plane at once,
//!    and sends each of its proxy's listening sockets (`SCM_RIGHTS`), then `end`.
//!    It goes on accepting and serving on them meanwhile;
//! 3. the new lbd adopts the data plane as after any restart, serves on the sockets it
//!    received (the same sockets: connections waiting in their backlogs are not lost;
//!    more workers than sockets bind more with `SO_REUSEPORT`), and sends `serving`;
//! 4. the old lbd stops accepting and drains: HTTP/2 connections get GOAWAY, HTTP/1
//!    ones end between requests (`Connection: close` on the response in flight, idle
//!    ones closed), up to `shutdown_timeout`; then it exits, leaving the data plane
//!    to the new one.
//!
//! If the new lbd goes away before `serving`, the old one resumes as if nothing had
//! happened (its proxy never stopped). With no lbd answering, lbd starts afresh.

mod fds;

use std::{
    io::{self, BufRead as _, Read as _, Write as _},
    net::TcpListener,
    os::{
        fd::AsFd as _,
        unix::{fs::PermissionsExt as _, net::UnixStream},
    },
    path::{Path, PathBuf},
    time::Duration,
};

use lb_model::throttle::{AcceptBackoff, Throttle};

/// What the new lbd sends first.
const REQUEST: &[u8] = b"lbd-handover 1\n";
/// One per socket, each with the socket attached.
const LISTENER: &[u8] = b"listener\n";
/// After the last socket.
const END: &[u8] = b"end\n";
/// The new lbd serves.
const SERVING: &[u8] = b"serving\n";
/// How long the new lbd waits for the old one's sockets: it answers between two of
/// its events, so a slow reconcile may hold it up.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A handover that failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The socket calls failed.
    #[error("handover socket {path}: {source}")]
    Io {
        /// The socket.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The other side said something else than the protocol.
    #[error("handover socket {path}: unexpected {got:?}")]
    Protocol {
        /// The socket.
        path: String,
        /// What came.
        got: String,
    },
    /// The other side closed the connection before the end.
    #[error("handover socket {path}: the other lbd went away")]
    Gone {
        /// The socket.
        path: String,
    },
}

/// The handover socket of a node.
pub fn socket_path(state_dir: &str) -> PathBuf {
    Path::new(state_dir).join("handover.sock")
}

/// The running lbd that handed its sockets over (the new lbd's side).
#[derive(Debug)]
pub struct Predecessor {
    stream: UnixStream,
    /// The listening sockets received, in the order sent.
    pub listeners: Vec<TcpListener>,
}

impl Predecessor {
    /// Tells the old lbd that this one serves: it stops accepting and drains.
    ///
    /// # Errors
    /// The old lbd is gone (then it drains anyway or has exited).
    pub fn serving(mut self) -> io::Result<()> {
        self.stream.write_all(SERVING)
    }
}

/// Asks an lbd running on `path` to hand over. `Ok(None)` when no lbd answers there.
///
/// # Errors
/// An lbd answered but the handover failed part-way.
pub fn take_over(path: &Path) -> Result<Option<Predecessor>, HandoverError> {
    let io_err = |source| HandoverError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(_) => return Ok(None),
    };
    stream
        .set_read_timeout(Some(ANSWER_WITHIN))
        .map_err(io_err)?;
    stream.write_all(REQUEST).map_err(io_err)?;
    let mut text = Vec::new();
    let mut fds = Vec::new();
    let mut buf = [0u8; 512];
    while !text.ends_with(END) {
        let (n, got) = fds::recv_with_fds(&stream, &mut buf).map_err(io_err)?;
        if n == 0 {
            return Err(HandoverError::Gone {
                path: path.display().to_string(),
            });
        }
        text.extend_from_slice(&buf[..n]);
        fds.extend(got);
    }
    let lines = text.len() / LISTENER.len();
    let expected = [LISTENER.repeat(fds.len()), END.to_vec()].concat();
    if text != expected {
        return Err(HandoverError::Protocol {
            path: path.display().to_string(),
            got: format!(
                "{lines} lines, {} sockets: {}",
                fds.len(),
                String::from_utf8_lossy(&text)
            ),
        });
    }
    stream.set_read_timeout(None).map_err(io_err)?;
    let listeners = fds
        .into_iter()
        .map(|fd| {
            let l = TcpListener::from(fd);
            l.set_nonblocking(true).map(|()| l)
        })
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_err)?;
    Ok(Some(Predecessor { stream, listeners }))
}

/// The next lbd, asking for the sockets (the old lbd's side).
#[derive(Debug)]
pub struct Successor {
    stream: UnixStream,
}

impl Successor {
    /// Sends `listeners`, then waits (blocking) until the new lbd serves on them.
    ///
    /// # Errors
    /// Sending failed, or the new lbd went away before it served: the caller then
    /// resumes.
    pub fn hand_over(mut self, listeners: &[&TcpListener]) -> io::Result<()> {
        self.stream.set_nonblocking(false)?;
        for l in listeners {
            fds::send_with_fd(&self.stream, LISTENER, l.as_fd())?;
        }
        self.stream.write_all(END)?;
        let mut answer = Vec::new();
        (&mut self.stream)
            .take(SERVING.len() as u64)
            .read_to_end(&mut answer)?;
        if answer == SERVING {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the new lbd went away before it served",
            ))
        }
    }
}

/// The socket a running lbd answers handover requests on; removed when dropped.
#[derive(Debug)]
pub struct HandoverSocket {
    path: PathBuf,
}

impl Drop for HandoverSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `path` (replacing a socket nobody answers on) and sends every well-formed
/// request on `requests` until the runtime ends. Call inside a tokio runtime.
///
/// # Errors
/// The socket cannot be created.
pub fn serve(
    path: &Path,
    requests: tokio::sync::mpsc::Sender<Successor>,
) -> io::Result<HandoverSocket> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    let guard = HandoverSocket {
        path: path.to_owned(),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    tokio::spawn(async move {
        let mut backoff = AcceptBackoff::default();
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => {
                    backoff.reset();
                    s
                }
                Err(e) => {
                    tokio::time::sleep(backoff.failed("handover", &e)).await;
                    continue;
                }
            };
            match read_request(stream).await {
                Ok(successor) => {
                    if requests.send(successor).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    static BAD: Throttle = Throttle::per_second();
                    if let Some(suppressed) = BAD.pass() {
                        tracing::warn!(
                            listener = "handover",
                            error = %e,
                            suppressed,
                            "handover request refused"
                        );
                    }
                }
            }
        }
    });
    Ok(guard)
}

/// Reads the request line (within a second).
async fn read_request(stream: tokio::net::UnixStream) -> io::Result<Successor> {
    use tokio::io::AsyncReadExt as _;
    let mut got = vec![0u8; REQUEST.len()];
    let mut stream = stream;
    tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut got))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no request within 1 s"))??;
    if got != REQUEST {
        let line = got.lines().next().and_then(Result::ok).unwrap_or_default();
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a handover request: {line:?}"),
        ));
    }
    Ok(Successor {
        stream: stream.into_std()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_go_to_the_new_side_which_then_serves() {
        let dir = std::env::temp_dir().join(format!("lbd-handover-test-{}", std::process::id()));
        let path = socket_path(dir.to_str().expect("utf-8"));
        assert!(take_over(&path).expect("nobody there").is_none());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let _socket = rt.block_on(async { serve(&path, tx) }).expect("serve");
        let ours: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let addrs: Vec<_> = ours.iter().map(|l| l.local_addr().expect("addr")).collect();
        let newcomer = std::thread::spawn(move || {
            let p = take_over(&path)
                .expect("handover")
                .expect("an lbd answered");
            let got: Vec<_> = p
                .listeners
                .iter()
                .map(|l| l.local_addr().expect("addr"))
                .collect();
            p.serving().expect("serving");
            got
        });
        let successor = rt.block_on(rx.recv()).expect("a request");
        let refs: Vec<&TcpListener> = ours.iter().collect();
        successor.hand_over(&refs).expect("handed over");
        assert_eq!(newcomer.join().expect("thread"), addrs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_successor_that_goes_away_is_an_error() {
        let (a, b) = UnixStream::pair().expect("pair");
        drop(b);
        let s = Successor { stream: a };
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        assert!(s.hand_over(&[&l]).is_err());
    }
}

//! A byte relay with no HTTP in it: the ceiling of any user-space proxy on the
//! machine it runs on, measured beside the real ones by `lb-l7bench`.
//!
//! Each accepted client connection gets a backend connection of its own, and bytes
//! are copied both ways as they come: per request the relay makes the same two reads
//! and two writes as an HTTP proxy with backend keep-alive (one of each per
//! direction), and nothing else: no parsing, no routing, no pool, no timers. What a
//! proxy spends beyond the relay is its own work; what the relay spends is the
//! kernel's TCP work that every user-space proxy pays.
//!
//! One thread per worker, each with its own `SO_REUSEPORT` listener and
//! edge-triggered epoll (mio), as nginx and our proxy's workers run. A direction whose
//! receiver is slow keeps what it could not write (at most [`MAX_PENDING`] bytes) and
//! reads no more until that is written, so memory stays bounded. A connection that
//! closes or fails on either side closes both.

use std::{
    io::{self, Read as _, Write as _},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use mio::{
    Events, Interest, Poll, Token, Waker,
    net::{TcpListener, TcpStream},
};

/// What one direction holds back for a slow receiver before it stops reading.
const MAX_PENDING: usize = 1 << 20;

/// The listener's and the waker's tokens; connections take the ones above.
const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// A running relay: its workers stop when it is dropped.
pub struct Relay {
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `listen` with `workers` threads (at least one) and relays every
    /// connection to `backend`. Threads inherit the caller's network namespace.
    ///
    /// # Errors
    /// A listener that cannot bind, or a thread that cannot start.
    pub fn start(listen: SocketAddr, backend: SocketAddr, workers: usize) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut relay = Self {
            stop: Arc::clone(&stop),
            wakers: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..workers.max(1) {
            let listener = TcpListener::from_std(reuseport_listener(listen)?);
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let stop = Arc::clone(&stop);
            let worker = Worker {
                poll,
                listener,
                backend,
                pairs: Vec::new(),
                free: Vec::new(),
            };
            relay.wakers.push(waker);
            relay.threads.push(
                std::thread::Builder::new()
                    .name(format!("relay-{i}"))
                    .spawn(move || worker.run(&stop))?,
            );
        }
        Ok(relay)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in &self.wakers {
            let _ = w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn reuseport_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// One side of a relayed connection, with what waits to be written to it.
struct Side {
    stream: TcpStream,
    pending: Vec<u8>,
}

/// A client connection and its backend connection.
struct Pair {
    sides: [Side; 2],
}

struct Worker {
    poll: Poll,
    listener: TcpListener,
    backend: SocketAddr,
    pairs: Vec<Option<Pair>>,
    free: Vec<usize>,
}

/// What a pump of one direction found.
enum Pumped {
    /// Nothing more to do until the next event.
    Idle,
    /// The source closed or a socket failed: close the pair.
    Closed,
}

impl Worker {
    fn run(mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(1024);
        let mut buf = vec![0_u8; 64 * 1024];
        if self
            .poll
            .registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)
            .is_err()
        {
            return;
        }
        while !stop.load(Ordering::Relaxed) {
            // No timeout: the waker is what ends the wait when the relay stops, so an
            // idle relay costs nothing (it runs inside the process callgrind counts).
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            for event in &events {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) => self.relay((t - 2) / 2, &mut buf),
                }
            }
        }
    }

    fn accept(&mut self) {
        loop {
            let Ok((client, _)) = self.listener.accept() else {
                return;
            };
            // A backend that cannot be reached closes the client: it is the relay's
            // only answer. The connect blocks the worker; backends are on loopback
            // and the load generator opens its connections before it measures.
            let Ok(backend) = std::net::TcpStream::connect(self.backend) else {
                continue;
            };
            if backend.set_nonblocking(true).is_err() {
                continue;
            }
            let backend = TcpStream::from_std(backend);
            let _ = client.set_nodelay(true);
            let _ = backend.set_nodelay(true);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.pairs.push(None);
                self.pairs.len() - 1
            });
            let mut pair = Pair {
                sides: [
                    Side {
                        stream: client,
                        pending: Vec::new(),
                    },
                    Side {
                        stream: backend,
                        pending: Vec::new(),
                    },
                ],
            };
            let registry = self.poll.registry();
            let interest = Interest::READABLE | Interest::WRITABLE;
            let [a, b] = &mut pair.sides;
            if registry
                .register(&mut a.stream, Token(2 + 2 * slot), interest)
                .and_then(|()| registry.register(&mut b.stream, Token(3 + 2 * slot), interest))
                .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.pairs[slot] = Some(pair);
        }
    }

    /// Moves what can move in both directions of pair `slot`; closes it when either
    /// side is done.
    fn relay(&mut self, slot: usize, buf: &mut [u8]) {
        let Some(Some(pair)) = self.pairs.get_mut(slot) else {
            return;
        };
        let [a, b] = &mut pair.sides;
        let closed =
            matches!(pump(a, b, buf), Pumped::Closed) || matches!(pump(b, a, buf), Pumped::Closed);
        if closed && let Some(mut pair) = self.pairs[slot].take() {
            for side in &mut pair.sides {
                let _ = self.poll.registry().deregister(&mut side.stream);
            }
            self.free.push(slot);
        }
    }
}

/// Copies from `from` to `to` until `from` has nothing more to read now, or `to`
/// cannot take more (then what is left waits in `to.pending`, and `from` is not read
/// again until it is written).
fn pump(from: &mut Side, to: &mut Side, buf: &mut [u8]) -> Pumped {
    loop {
        if !to.pending.is_empty() {
            match to.stream.write(&to.pending) {
                Ok(n) => {
                    to.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Pumped::Closed,
            }
            if !to.pending.is_empty() {
                return Pumped::Idle;
            }
        }
        let n = match from.stream.read(buf) {
            Ok(0) => return Pumped::Closed,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Pumped::Idle,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Pumped::Closed,
        };
        let written = match to.stream.write(&buf[..n]) {
            Ok(w) => w,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(_) => return Pumped::Closed,
        };
        if written < n {
            if to.pending.len() + (n - written) > MAX_PENDING {
                return Pumped::Closed;
            }
            to.pending.extend_from_slice(&buf[written..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Relay;
    use std::{
        io::{Read as _, Write as _},
        net::{SocketAddr, TcpListener},
    };

    /// A relay of one worker on a free loopback port in front of `backend`, and that
    /// port's address.
    fn relay_to(backend: &TcpListener) -> (Relay, SocketAddr) {
        let backend = backend.local_addr().expect("backend address");
        // SO_REUSEPORT on port 0 would not tell the port: take a free one first.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let listen = SocketAddr::from(([127, 0, 0, 1], port));
        (
            Relay::start(listen, backend, 1).expect("relay starts"),
            listen,
        )
    }

    /// Bytes go both ways through the relay, in order, over loopback, with more in
    /// flight than the sockets hold (so what waits for a slow receiver is kept).
    #[test]
    fn relays_both_ways() {
        let backend = TcpListener::bind("127.0.0.1:0").expect("backend listens");
        let (_relay, listen) = relay_to(&backend);
        let echo = std::thread::spawn(move || {
            let (mut s, _) = backend.accept().expect("the relay connects");
            let mut buf = [0_u8; 4096];
            let mut total = 0;
            while total < 3_000_000 {
                let n = s.read(&mut buf).expect("backend reads");
                assert!(n > 0, "the relay closed early");
                s.write_all(&buf[..n]).expect("backend writes");
                total += n;
            }
        });
        let mut client = std::net::TcpStream::connect(listen).expect("client connects");
        let sent: Vec<u8> = (0..3_000_000_u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let mut c = client.try_clone().expect("client clone");
            let sent = sent.clone();
            std::thread::spawn(move || c.write_all(&sent).expect("client writes"))
        };
        let mut got = vec![0_u8; sent.len()];
        client.read_exact(&mut got).expect("client reads all back");
        writer.join().expect("writer thread");
        echo.join().expect("echo thread");
        assert!(got == sent, "bytes came back changed or out of order");
    }

    /// A backend that closes closes its client too, and the relay takes the next
    /// connection.
    #[test]
    fn a_close_on_one_side_closes_the_other() {
        let backend = TcpListener::bind("127.0.0.1:0").expect("backend listens");
        let (_relay, listen) = relay_to(&backend);
        for _ in 0..2 {
            let mut client = std::net::TcpStream::connect(listen).expect("client connects");
            let (mut s, _) = backend.accept().expect("the relay connects");
            s.write_all(b"bye").expect("backend writes");
            drop(s);
            let mut got = Vec::new();
            client
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .expect("timeout set");
            client
                .read_to_end(&mut got)
                .expect("client reads to the close");
            assert_eq!(got, b"bye");
        }
    }
}

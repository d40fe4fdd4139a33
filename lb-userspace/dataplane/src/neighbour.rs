//! Managed neighbour entries for backends (rtnetlink `RTM_NEWNEIGH` with
//! `NTF_EXT_MANAGED`, Linux 5.16+).
//!
//! The XDP program takes next-hop MACs from `bpf_fib_lookup`, which only succeeds when
//! the kernel already has a resolved neighbour entry. A managed entry makes the kernel
//! resolve the backend's address itself and keep it resolved, with no traffic from us,
//! so forwarding does not depend on some other process having talked to the backend.
//!
//! One socket per [`Neighbours`], kept for the agent's life; requests go out in
//! batches (one `sendto` per [`BATCH`] entries, not a socket and a round trip per
//! backend: a cold start of 30 000 backends is some hundred system calls) and every
//! acknowledgement is matched to its request by sequence number and port id, so a
//! stale or foreign message is never taken for an answer.
//!
//! Hand-written rather than a netlink crate: two message types with two attributes
//! each, whose bytes the tests pin against iproute2's; the crates that cover rtnetlink
//! bring an async runtime or a large generated surface for this.

use std::{io, net::IpAddr, os::fd::OwnedFd, time::Duration};

use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, bind, getsockname,
    netlink::SocketAddrNetlink, recv, sendto, socket_with, sockopt,
};

const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const NDA_DST: u16 = 1;
const NDA_FLAGS_EXT: u16 = 15;
const NTF_EXT_LEARNED: u8 = 0x10;
const NTF_EXT_MANAGED: u32 = 0x1;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const ENOENT: i32 = rustix::io::Errno::NOENT.raw_os_error();

/// Requests per `sendto`. Their acknowledgements (36 bytes each, up to ~90 with an
/// error, which echoes the request) must fit the socket's receive buffer before we
/// read them: 128 take at most ~12 KiB of the default 208 KiB.
pub const BATCH: usize = 128;

/// How long to wait for the kernel's acknowledgements of a batch. The kernel answers
/// neighbour requests synchronously, so this only bounds a broken socket.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// An rtnetlink socket for neighbour requests.
#[derive(Debug)]
pub struct Neighbours {
    sock: OwnedFd,
    /// The port id the kernel bound us to; its acknowledgements carry it.
    port: u32,
    /// The sequence number of the next request.
    next_seq: u32,
}

/// Why one address's request failed.
pub type Failure = (IpAddr, io::Error);

impl Neighbours {
    /// Opens and binds an rtnetlink socket.
    ///
    /// # Errors
    /// socket(2), bind(2) or getsockname(2) failed (e.g. `EMFILE`).
    pub fn open() -> io::Result<Self> {
        let sock = route_socket(ACK_TIMEOUT)?;
        let port = SocketAddrNetlink::try_from(getsockname(&sock)?)
            .map_err(|_| io::Error::other("getsockname of a netlink socket is not netlink"))?
            .pid();
        Ok(Self {
            sock,
            port,
            // Not 0 or 1: a reply to a message sent before this socket existed can
            // never carry our port, but start away from the usual first numbers anyway.
            next_seq: 0x1000,
        })
    }

    /// Asks the kernel to keep each of `addrs` on `ifindex` resolved (idempotent).
    /// Returns the addresses whose request failed, with the kernel's error (e.g.
    /// `ENODEV` for a vanished interface or `EPERM` without `CAP_NET_ADMIN`); a
    /// transport error is every remaining address's failure.
    pub fn ensure_managed(&mut self, ifindex: u32, addrs: &[IpAddr]) -> Vec<Failure> {
        self.each(addrs, |addr| {
            request(
                RTM_NEWNEIGH,
                NLM_F_CREATE | NLM_F_REPLACE,
                ifindex,
                addr,
                Some(NTF_EXT_MANAGED),
            )
        })
    }

    /// Removes entries made by [`Self::ensure_managed`]; a missing entry is not a
    /// failure.
    pub fn remove(&mut self, ifindex: u32, addrs: &[IpAddr]) -> Vec<Failure> {
        let mut failures = self.each(addrs, |addr| request(RTM_DELNEIGH, 0, ifindex, addr, None));
        failures.retain(|(_, e)| e.raw_os_error() != Some(ENOENT));
        failures
    }

    /// Sends `make(addr)` for every address, [`BATCH`] to a datagram, and collects
    /// the failures.
    fn each(&mut self, addrs: &[IpAddr], make: impl Fn(IpAddr) -> Vec<u8>) -> Vec<Failure> {
        let mut failures = Vec::new();
        for chunk in addrs.chunks(BATCH) {
            let first = self.next_seq;
            self.next_seq = self.next_seq.wrapping_add(chunk.len() as u32);
            let mut buf = Vec::with_capacity(chunk.len() * 56);
            for (i, &addr) in chunk.iter().enumerate() {
                let mut msg = make(addr);
                msg[8..12].copy_from_slice(&first.wrapping_add(i as u32).to_ne_bytes());
                buf.extend_from_slice(&msg);
            }
            match self.transact(&buf, first, chunk.len()) {
                Ok(codes) => failures.extend(
                    chunk
                        .iter()
                        .zip(codes)
                        .filter(|(_, code)| *code != 0)
                        .map(|(&addr, code)| (addr, io::Error::from_raw_os_error(code))),
                ),
                Err(e) => failures.extend(chunk.iter().map(|&addr| (addr, copy(&e)))),
            }
        }
        failures
    }

    /// Sends one batch and reads acknowledgements until each of its `count` requests
    /// (sequence numbers `first..first + count`) has one. Returns each request's
    /// error code (0 for success, else a positive errno).
    fn transact(&mut self, batch: &[u8], first: u32, count: usize) -> io::Result<Vec<i32>> {
        sendto(
            &self.sock,
            batch,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )?;
        let mut codes: Vec<Option<i32>> = vec![None; count];
        let mut left = count;
        let mut reply = vec![0u8; 64 * 1024];
        while left > 0 {
            let (got, _) = recv(&self.sock, &mut reply[..], RecvFlags::empty()).map_err(|e| {
                if e == rustix::io::Errno::AGAIN {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no netlink acknowledgement within {ACK_TIMEOUT:?}"),
                    )
                } else {
                    e.into()
                }
            })?;
            for ack in acks(&reply[..got])? {
                if ack.port != self.port {
                    continue;
                }
                // Out of range (`codes` holds exactly this batch's requests):
                let Some(slot) = codes.get_mut(ack.seq.wrapping_sub(first) as usize) else {
                    continue; // a late answer to an earlier batch
                };
                if slot.replace(ack.code).is_none() {
                    left -= 1;
                }
            }
        }
        Ok(codes.into_iter().map(|c| c.unwrap_or(0)).collect())
    }
}

/// A bound rtnetlink (`NETLINK_ROUTE`) socket whose receives give up after `timeout`.
///
/// # Errors
/// socket(2), bind(2) or setsockopt(2) failed.
pub(crate) fn route_socket(timeout: Duration) -> io::Result<OwnedFd> {
    let sock = socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        // NETLINK_ROUTE is protocol 0, the default.
        None,
    )?;
    bind(&sock, &SocketAddrNetlink::new(0, 0))?;
    sockopt::set_socket_timeout(&sock, sockopt::Timeout::Recv, Some(timeout))?;
    Ok(sock)
}

/// One acknowledgement: the request's sequence number, the port it was sent to, and
/// its error code as a positive errno (0 for success).
#[derive(Debug, PartialEq, Eq)]
struct Ack {
    seq: u32,
    port: u32,
    code: i32,
}

/// The acknowledgements in one datagram. Messages of other types are skipped.
///
/// # Errors
/// `InvalidData` for a message whose length runs past the datagram or is too short to
/// be a header: the rest of the datagram cannot be framed.
fn acks(datagram: &[u8]) -> io::Result<Vec<Ack>> {
    let malformed = |what| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed netlink reply: {what}"),
        )
    };
    let u32_at = |b: &[u8], at: usize| -> u32 {
        u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    };
    let mut out = Vec::new();
    let mut rest = datagram;
    while !rest.is_empty() {
        if rest.len() < 16 {
            return Err(malformed("a header cut short"));
        }
        let len = u32_at(rest, 0) as usize;
        if len < 16 || len > rest.len() {
            return Err(malformed("a message length past the datagram"));
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if kind == NLMSG_ERROR {
            if len < 20 {
                return Err(malformed("an acknowledgement without its error code"));
            }
            out.push(Ack {
                seq: u32_at(rest, 8),
                port: u32_at(rest, 12),
                code: (u32_at(rest, 16) as i32).saturating_neg(),
            });
        }
        // Messages are 4-byte aligned.
        let next = (len + 3) & !3;
        rest = rest.get(next..).unwrap_or(&[]);
    }
    Ok(out)
}

/// The same error again, for each address of a batch that failed as a whole.
fn copy(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Encodes one neighbour request: nlmsghdr (sequence 0, set by the batch), ndmsg,
/// NDA_DST and optionally NDA_FLAGS_EXT.
fn request(kind: u16, flags: u16, ifindex: u32, addr: IpAddr, ext_flags: Option<u32>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(56);
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched below
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // sequence
    buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel assigns
    // struct ndmsg
    let family = if addr.is_ipv6() { AF_INET6 } else { AF_INET };
    buf.extend_from_slice(&[family, 0, 0, 0]);
    buf.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    buf.extend_from_slice(&0u16.to_ne_bytes()); // state NUD_NONE: the kernel resolves
    buf.push(if ext_flags.is_some() {
        NTF_EXT_LEARNED
    } else {
        0
    });
    buf.push(0); // type
    match addr {
        IpAddr::V4(v4) => push_attr(&mut buf, NDA_DST, &v4.octets()),
        IpAddr::V6(v6) => push_attr(&mut buf, NDA_DST, &v6.octets()),
    }
    if let Some(ext) = ext_flags {
        push_attr(&mut buf, NDA_FLAGS_EXT, &ext.to_ne_bytes());
    }
    let len = buf.len() as u32;
    buf[..4].copy_from_slice(&len.to_ne_bytes());
    buf
}

/// Appends a route attribute whose payload is a multiple of 4 bytes (so no padding).
fn push_attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    buf.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes iproute2 sends for `ip neigh replace 198.18.9.2 dev <3> managed
    /// extern_learn` (captured with strace), apart from the sequence number.
    #[test]
    fn request_matches_iproute2() {
        let msg = request(
            RTM_NEWNEIGH,
            NLM_F_CREATE | NLM_F_REPLACE,
            3,
            IpAddr::from([198, 18, 9, 2]),
            Some(NTF_EXT_MANAGED),
        );
        assert_eq!(msg.len(), 44);
        assert_eq!(&msg[4..8], &[0x1c, 0x00, 0x05, 0x05]);
        assert_eq!(
            &msg[16..],
            b"\x02\x00\x00\x00\x03\x00\x00\x00\x00\x00\x10\x00\x08\x00\x01\x00\xc6\x12\x09\x02\x08\x00\x0f\x00\x01\x00\x00\x00"
        );
    }

    #[test]
    fn ipv6_request_carries_family_and_16_byte_destination() {
        let addr = IpAddr::from([
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b,
        ]);
        let msg = request(
            RTM_NEWNEIGH,
            NLM_F_CREATE | NLM_F_REPLACE,
            3,
            addr,
            Some(NTF_EXT_MANAGED),
        );
        assert_eq!(msg.len(), 56);
        assert_eq!(msg[16], AF_INET6);
        assert_eq!(&msg[28..32], &[20, 0, 1, 0], "NDA_DST with 16 bytes");
        assert_eq!(msg[47], 0x0b);
    }

    /// An acknowledgement as the kernel writes it: nlmsghdr, then nlmsgerr (the error
    /// and the request's header), with `extra` bytes of echoed request after it.
    fn ack(seq: u32, port: u32, errno: i32, extra: usize) -> Vec<u8> {
        let len = 36 + extra;
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&port.to_ne_bytes());
        m.extend_from_slice(&(-errno).to_ne_bytes());
        m.resize(len, 0);
        m
    }

    #[test]
    fn acknowledgements_are_framed_by_length_and_carry_seq_port_and_errno() {
        let mut datagram = ack(7, 42, 0, 0);
        datagram.extend(ack(9, 42, 19, 6)); // ENODEV, echo not a multiple of 4
        datagram.extend([0, 0]); // its alignment padding
        datagram.extend(ack(8, 43, 0, 0));
        assert_eq!(
            acks(&datagram).expect("framed"),
            vec![
                Ack {
                    seq: 7,
                    port: 42,
                    code: 0
                },
                Ack {
                    seq: 9,
                    port: 42,
                    code: 19
                },
                Ack {
                    seq: 8,
                    port: 43,
                    code: 0
                },
            ]
        );
        assert!(acks(&datagram[..8]).is_err(), "a cut header");
        let mut long = ack(1, 1, 0, 0);
        long[0] = 200;
        assert!(acks(&long).is_err(), "a length past the datagram");
        let mut short = ack(1, 1, 0, 0);
        short[0] = 4;
        assert!(acks(&short).is_err(), "a length shorter than a header");
    }
}

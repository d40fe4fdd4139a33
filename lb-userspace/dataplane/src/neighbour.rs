//! Managed neighbour entries for backends (rtnetlink `RTM_NEWNEIGH` with
//! `NTF_EXT_MANAGED`, Linux 5.16+).
//!
//! The XDP program takes next-hop MACs from `bpf_fib_lookup`, which only succeeds when
//! the kernel already has a resolved neighbour entry. A managed entry makes the kernel
//! resolve the backend's address itself and keep it resolved, with no traffic from us,
//! so forwarding does not depend on some other process having talked to the backend.

use std::{
    io,
    mem::size_of,
    net::IpAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
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

/// Asks the kernel to keep `addr` on `ifindex` resolved (idempotent).
///
/// # Errors
/// The kernel's error, e.g. `ENODEV` for a vanished interface or `EPERM` without
/// `CAP_NET_ADMIN`.
pub fn ensure_managed(ifindex: u32, addr: IpAddr) -> io::Result<()> {
    let msg = request(
        RTM_NEWNEIGH,
        NLM_F_CREATE | NLM_F_REPLACE,
        ifindex,
        addr,
        Some(NTF_EXT_MANAGED),
    );
    transact(&msg)
}

/// Removes an entry made by [`ensure_managed`]; a missing entry is not an error.
///
/// # Errors
/// The kernel's error other than `ENOENT`.
pub fn remove(ifindex: u32, addr: IpAddr) -> io::Result<()> {
    match transact(&request(RTM_DELNEIGH, 0, ifindex, addr, None)) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// Encodes one neighbour request: nlmsghdr, ndmsg, NDA_DST and optionally NDA_FLAGS_EXT.
fn request(kind: u16, flags: u16, ifindex: u32, addr: IpAddr, ext_flags: Option<u32>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(56);
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched below
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    buf.extend_from_slice(&1u32.to_ne_bytes()); // sequence
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

/// Sends one request on a fresh rtnetlink socket and waits for its acknowledgement.
fn transact(msg: &[u8]) -> io::Result<()> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, owned descriptor.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero sockaddr_nl is valid; family set below.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: msg and kernel outlive the call; lengths are theirs.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&raw const kernel).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut reply = [0u8; 512];
    // SAFETY: reply is a writable buffer of the given length.
    let got = unsafe { libc::recv(sock.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    parse_ack(&reply[..got as usize])
}

/// Reads the `nlmsgerr` that acknowledges a request: error 0 is success.
fn parse_ack(reply: &[u8]) -> io::Result<()> {
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed netlink reply");
    let kind = u16::from_ne_bytes(
        reply
            .get(4..6)
            .ok_or_else(malformed)?
            .try_into()
            .map_err(|_| malformed())?,
    );
    if kind != NLMSG_ERROR {
        return Err(malformed());
    }
    let code = i32::from_ne_bytes(
        reply
            .get(16..20)
            .ok_or_else(malformed)?
            .try_into()
            .map_err(|_| malformed())?,
    );
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(-code))
    }
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

    #[test]
    fn ack_codes() {
        let mut reply = [0u8; 36];
        reply[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert!(parse_ack(&reply).is_ok());
        reply[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        assert_eq!(
            parse_ack(&reply).expect_err("ENODEV").raw_os_error(),
            Some(libc::ENODEV)
        );
        assert!(parse_ack(&reply[..8]).is_err());
    }
}

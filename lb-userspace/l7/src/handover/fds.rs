//! File descriptors over a unix stream socket (`SCM_RIGHTS`): one message carries a
//! short text and at most one descriptor. Linux never merges the data of a message
//! that carries descriptors with the next one on reception, so each received
//! descriptor arrives with the first byte of its own text.

use std::{
    io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::net::UnixStream,
    },
};

/// Room for the control message of one descriptor (`CMSG_SPACE(sizeof(int))` is 24 on
/// 64-bit Linux; 64 leaves slack).
const CONTROL: usize = 64;

/// Sends `text` with `fd` attached.
///
/// # Errors
/// `sendmsg` failed or sent part of `text`.
pub(super) fn send_with_fd(sock: &UnixStream, text: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut control = [0u8; CONTROL];
    let mut iov = libc::iovec {
        iov_base: text.as_ptr().cast_mut().cast(),
        iov_len: text.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    msg.msg_controllen = space;
    // SAFETY: msg_control points at `space` <= CONTROL writable bytes, so the first
    // header and its data fit; CMSG_FIRSTHDR is non-null for a non-empty buffer.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
    }
    // SAFETY: msg is fully initialised and points at live buffers.
    let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != text.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes and the descriptors attached to them (close on
/// exec). `Ok((0, _))` is the end of the stream.
///
/// # Errors
/// `recvmsg` failed, or the control data was cut short (descriptors lost).
pub(super) fn recv_with_fds(
    sock: &UnixStream,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control = [0u8; CONTROL * 4];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len();
    // SAFETY: msg points at live, writable buffers of the sizes it states.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of well-formed
    // control messages; CMSG_FIRSTHDR/CMSG_NXTHDR stay within them.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    // The descriptor is new in this process and ours alone.
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "descriptors were cut off in transit",
        ));
    }
    Ok((n as usize, fds))
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    #[test]
    fn descriptors_arrive_each_with_its_own_text() {
        let (a, b) = UnixStream::pair().expect("pair");
        let listeners: Vec<std::net::TcpListener> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        use std::os::fd::AsFd as _;
        for l in &listeners {
            send_with_fd(&a, b"listener\n", l.as_fd()).expect("send");
        }
        (&a).write_all(b"end\n").expect("end");
        drop(a);
        let mut text = Vec::new();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            let (n, fds) = recv_with_fds(&b, &mut buf).expect("recv");
            if n == 0 {
                break;
            }
            assert!(fds.len() <= 1, "one descriptor per read");
            text.extend_from_slice(&buf[..n]);
            got.extend(fds);
        }
        assert_eq!(text, b"listener\nlistener\nlistener\nend\n");
        let addrs: Vec<_> = got
            .into_iter()
            .map(|fd| std::net::TcpListener::from(fd).local_addr().expect("addr"))
            .collect();
        let want: Vec<_> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr"))
            .collect();
        assert_eq!(addrs, want, "the same sockets, in order");
        let mut rest = Vec::new();
        let _ = (&b).read_to_end(&mut rest);
    }
}

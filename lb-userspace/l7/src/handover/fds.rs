//! File descriptors over a unix stream socket (`SCM_RIGHTS`): one message carries a
//! short text and at most one descriptor. Linux never merges the data of a message
//! that carries descriptors with the next one on reception, so each received
//! descriptor arrives with the first byte of its own text.

use std::{
    io::{self, IoSlice, IoSliceMut},
    mem::MaybeUninit,
    os::{
        fd::{BorrowedFd, OwnedFd},
        unix::net::UnixStream,
    },
};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// Sends `text` with `fd` attached.
///
/// # Errors
/// `sendmsg` failed or sent part of `text`.
pub(super) fn send_with_fd(sock: &UnixStream, text: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other(
            "no room for a descriptor's control message",
        ));
    }
    let sent = sendmsg(
        sock,
        &[IoSlice::new(text)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != text.len() {
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
    // Room for a few descriptors: one arrives per message, but a peer that sends
    // more must see them refused as cut off rather than silently lost.
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "descriptors were cut off in transit",
        ));
    }
    Ok((got.bytes, fds))
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

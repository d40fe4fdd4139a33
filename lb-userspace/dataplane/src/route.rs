//! The kernel's route towards an address (rtnetlink `RTM_GETROUTE`, as `ip route get`
//! asks it): the outgoing interface, the next hop (the gateway, or the address itself
//! when it is on-link) and the preferred source.
//!
//! `ipip` and `gue` backends are usually routed: the data plane's FIB lookup for an
//! outer header then needs the *gateway's* neighbour entry resolved, not the
//! backend's. The agent asks this for each tunnel backend and keeps the next hop
//! resolved with a managed neighbour entry ([`crate::neighbour`]), so the first packet
//! of a flow does not wait for some other traffic to resolve the router.

use std::{io, net::IpAddr, time::Duration};

use rustix::net::{RecvFlags, SendFlags, netlink::SocketAddrNetlink, recv, sendto};

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PREFSRC: u16 = 7;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// What the kernel's route towards an address says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The outgoing interface's index.
    pub oif: u32,
    /// The next hop: the gateway, or the destination itself when it is on-link.
    pub next_hop: IpAddr,
    /// The source address the route prefers, if it names one.
    pub source: Option<IpAddr>,
}

/// Asks the kernel for its route towards `dst`.
///
/// # Errors
/// The socket failed, or the kernel answered with an error (e.g. `ENETUNREACH`: no
/// route).
pub fn get(dst: IpAddr) -> io::Result<Route> {
    let sock = crate::neighbour::route_socket(Duration::from_secs(5))?;
    let seq = 1u32;
    sendto(
        &sock,
        &request(dst, seq),
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut reply = vec![0u8; 8192];
    let (n, _) = recv(&sock, &mut reply[..], RecvFlags::empty())?;
    parse(&reply[..n], dst)
}

/// An `RTM_GETROUTE` request for `dst`: header, `rtmsg` with a full-length
/// destination, and `RTA_DST`.
fn request(dst: IpAddr, seq: u32) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match dst {
        IpAddr::V4(a) => (AF_INET, a.octets().to_vec()),
        IpAddr::V6(a) => (AF_INET6, a.octets().to_vec()),
    };
    let mut msg = vec![0u8; 16];
    msg[4..6].copy_from_slice(&RTM_GETROUTE.to_ne_bytes());
    msg[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg[8..12].copy_from_slice(&seq.to_ne_bytes());
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    msg.extend_from_slice(&[family, (addr.len() * 8) as u8, 0, 0, 0, 0, 0, 0]);
    msg.extend_from_slice(&0u32.to_ne_bytes());
    let len = (4 + addr.len()) as u16;
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&RTA_DST.to_ne_bytes());
    msg.extend_from_slice(&addr);
    let total = msg.len() as u32;
    msg[0..4].copy_from_slice(&total.to_ne_bytes());
    msg
}

/// The route in the kernel's answer.
fn parse(datagram: &[u8], dst: IpAddr) -> io::Result<Route> {
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("route reply: {what}"));
    let header = datagram.get(..16).ok_or_else(|| bad("short"))?;
    let len = u32::from_ne_bytes(header[0..4].try_into().map_err(|_| bad("length"))?) as usize;
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    let body = datagram
        .get(16..len.min(datagram.len()))
        .ok_or_else(|| bad("length"))?;
    if kind == NLMSG_ERROR {
        let code = body
            .get(..4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| bad("error without a code"))?;
        return Err(io::Error::from_raw_os_error(-code));
    }
    if kind != RTM_NEWROUTE {
        return Err(bad("not a route"));
    }
    let mut attrs = body.get(12..).ok_or_else(|| bad("short rtmsg"))?;
    let (mut oif, mut gateway, mut source) = (None, None, None);
    while attrs.len() >= 4 {
        let alen = usize::from(u16::from_ne_bytes([attrs[0], attrs[1]]));
        let akind = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if alen < 4 || alen > attrs.len() {
            return Err(bad("attribute length"));
        }
        let value = &attrs[4..alen];
        match akind {
            RTA_OIF if value.len() == 4 => {
                oif = Some(u32::from_ne_bytes([value[0], value[1], value[2], value[3]]));
            }
            RTA_GATEWAY => gateway = addr(value),
            RTA_PREFSRC => source = addr(value),
            _ => {}
        }
        let step = (alen + 3) & !3;
        attrs = attrs.get(step..).unwrap_or(&[]);
    }
    Ok(Route {
        oif: oif.ok_or_else(|| bad("no outgoing interface"))?,
        next_hop: gateway.unwrap_or(dst),
        source,
    })
}

fn addr(value: &[u8]) -> Option<IpAddr> {
    match value.len() {
        4 => Some(IpAddr::from([value[0], value[1], value[2], value[3]])),
        16 => {
            let a: [u8; 16] = value.try_into().ok()?;
            Some(IpAddr::from(a))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_an_rtm_getroute_for_the_whole_address() {
        let r = request("198.19.0.11".parse().expect("ip"), 7);
        assert_eq!(r.len(), 16 + 12 + 8);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().expect("4")), 36);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_GETROUTE);
        assert_eq!((r[16], r[17]), (AF_INET, 32));
        assert_eq!(r[28..32], [8, 0, 1, 0]);
        assert_eq!(r[32..36], [198, 19, 0, 11]);
        let r6 = request("2001:db8:1::11".parse().expect("ip"), 7);
        assert_eq!((r6[16], r6[17], r6.len()), (AF_INET6, 128, 48));
    }

    /// A reply as the kernel writes one: header, rtmsg, then OIF, GATEWAY, PREFSRC.
    fn reply(gateway: Option<[u8; 4]>) -> Vec<u8> {
        let mut m = vec![0u8; 16];
        m[4..6].copy_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        m.extend_from_slice(&[AF_INET, 32, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0]);
        let mut attr = |kind: u16, v: &[u8]| {
            m.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            m.extend_from_slice(&kind.to_ne_bytes());
            m.extend_from_slice(v);
        };
        attr(RTA_OIF, &3u32.to_ne_bytes());
        if let Some(g) = gateway {
            attr(RTA_GATEWAY, &g);
        }
        attr(RTA_PREFSRC, &[198, 18, 0, 2]);
        let n = m.len() as u32;
        m[0..4].copy_from_slice(&n.to_ne_bytes());
        m
    }

    #[test]
    fn replies_give_the_gateway_or_the_destination_and_the_source() {
        let dst: IpAddr = "198.19.0.11".parse().expect("ip");
        let via = parse(&reply(Some([198, 18, 0, 254])), dst).expect("route");
        assert_eq!(via.oif, 3);
        assert_eq!(via.next_hop, IpAddr::from([198, 18, 0, 254]));
        assert_eq!(via.source, Some(IpAddr::from([198, 18, 0, 2])));
        let onlink = parse(&reply(None), dst).expect("route");
        assert_eq!(
            onlink.next_hop, dst,
            "on-link: the destination is the next hop"
        );
        let mut err = vec![0u8; 20];
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[0..4].copy_from_slice(&20u32.to_ne_bytes());
        err[16..20].copy_from_slice(&(-101i32).to_ne_bytes());
        assert_eq!(
            parse(&err, dst).expect_err("no route").raw_os_error(),
            Some(101)
        );
    }
}

//! The policy route of health probes of `ipip`/`gue` services (rtnetlink
//! `RTM_NEWRULE` and `RTM_NEWROUTE`, as `ip rule` and `ip route` make them).
//!
//! A probe socket carries a probe mark (`lb_common::probe`) and connects to the VIP,
//! which the node neither holds nor (usually) routes towards its interface. The rule
//! `fwmark PROBE_MARK/PROBE_MARK_MASK lookup PROBE_TABLE` sends marked packets to a
//! table of their own whose one route, `default via <gateway> dev <interface>`, takes
//! them out of the data plane's interface, where `lb_probe` (TC egress) encapsulates
//! them to the backend. The gateway only has to be a resolved neighbour on that
//! interface (the kernel builds the link header before TC egress); `lb_probe` asks the
//! FIB for the real next hop of the outer header.
//!
//! Idempotent: the rule is added with `NLM_F_EXCL` and an existing identical one is
//! fine; the route is replaced. Removal tolerates what is already gone.

use std::{io, net::IpAddr, time::Duration};

use lb_common::probe::{PROBE_MARK, PROBE_MARK_MASK};
use rustix::net::{RecvFlags, SendFlags, netlink::SocketAddrNetlink, recv, sendto};

/// The routing table of probes (`ip route show table 19522`).
pub const PROBE_TABLE: u32 = 0x4c42;
/// The priority of the probe rule: before the main table's (32766).
pub const PROBE_RULE_PRIORITY: u32 = 19522;

const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const FRA_PRIORITY: u16 = 6;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FRA_FWMASK: u16 = 16;
const FR_ACT_TO_TBL: u8 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_TABLE: u16 = 15;
const RTPROT_STATIC: u8 = 4;
const RTN_UNICAST: u8 = 1;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const EEXIST: i32 = rustix::io::Errno::EXIST.raw_os_error();
const ENOENT: i32 = rustix::io::Errno::NOENT.raw_os_error();
const ESRCH: i32 = rustix::io::Errno::SRCH.raw_os_error();

fn family(v6: bool) -> u8 {
    if v6 { AF_INET6 } else { AF_INET }
}

/// A netlink message: header, `body`, then `attrs` (kind, value).
fn message(kind: u16, flags: u16, body: &[u8], attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    m[8..12].copy_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(body);
    for (akind, value) in attrs {
        m.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        m.extend_from_slice(&akind.to_ne_bytes());
        m.extend_from_slice(value);
        m.resize((m.len() + 3) & !3, 0);
    }
    let n = m.len() as u32;
    m[0..4].copy_from_slice(&n.to_ne_bytes());
    m
}

/// The probe rule of one family, for `kind` (add or delete).
fn rule(kind: u16, flags: u16, v6: bool) -> Vec<u8> {
    // struct fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action,
    // flags (u32). The table is in FRA_TABLE (it does not fit the u8).
    let body = [family(v6), 0, 0, 0, 0, 0, 0, FR_ACT_TO_TBL, 0, 0, 0, 0];
    message(
        kind,
        flags,
        &body,
        &[
            (FRA_PRIORITY, &PROBE_RULE_PRIORITY.to_ne_bytes()),
            (FRA_FWMARK, &PROBE_MARK.to_ne_bytes()),
            (FRA_FWMASK, &PROBE_MARK_MASK.to_ne_bytes()),
            (FRA_TABLE, &PROBE_TABLE.to_ne_bytes()),
        ],
    )
}

/// The probe table's default route of one family, for `kind`; `via` (gateway and
/// interface) for an add.
fn route(kind: u16, flags: u16, v6: bool, via: Option<(IpAddr, u32)>) -> Vec<u8> {
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let body = [
        family(v6),
        0,
        0,
        0,
        0,
        RTPROT_STATIC,
        0,
        RTN_UNICAST,
        0,
        0,
        0,
        0,
    ];
    let table = PROBE_TABLE.to_ne_bytes();
    let mut attrs: Vec<(u16, Vec<u8>)> = vec![(RTA_TABLE, table.to_vec())];
    if let Some((gateway, oif)) = via {
        let g = match gateway {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        attrs.push((RTA_GATEWAY, g));
        attrs.push((RTA_OIF, oif.to_ne_bytes().to_vec()));
    }
    let attrs: Vec<(u16, &[u8])> = attrs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    message(kind, flags, &body, &attrs)
}

/// Sends one request and returns the kernel's answer as a positive errno (0: done).
fn transact(msg: &[u8]) -> io::Result<i32> {
    let sock = crate::neighbour::route_socket(Duration::from_secs(5))?;
    sendto(
        &sock,
        msg,
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut reply = [0u8; 1024];
    let (n, _) = recv(&sock, &mut reply[..], RecvFlags::empty())?;
    let reply = &reply[..n];
    if reply.len() < 20 || u16::from_ne_bytes([reply[4], reply[5]]) != NLMSG_ERROR {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "rtnetlink: no acknowledgement",
        ));
    }
    Ok(-i32::from_ne_bytes([
        reply[16], reply[17], reply[18], reply[19],
    ]))
}

fn check(code: i32, fine: &[i32]) -> io::Result<()> {
    if code == 0 || fine.contains(&code) {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

/// Makes probes of `v6`'s family leave by interface `oif` via `gateway`: the rule
/// (added once) and the table's default route (replaced).
///
/// # Errors
/// The socket failed or the kernel refused (e.g. `EPERM`, or `ENETUNREACH` for a
/// gateway that is not on the interface).
pub fn install(v6: bool, gateway: IpAddr, oif: u32) -> io::Result<()> {
    check(
        transact(&route(
            RTM_NEWROUTE,
            NLM_F_CREATE | NLM_F_REPLACE,
            v6,
            Some((gateway, oif)),
        ))?,
        &[],
    )?;
    check(
        transact(&rule(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, v6))?,
        &[EEXIST],
    )
}

/// Removes the rule and the route of `v6`'s family; what is gone already is fine.
///
/// # Errors
/// The socket failed or the kernel refused.
pub fn remove(v6: bool) -> io::Result<()> {
    check(transact(&rule(RTM_DELRULE, 0, v6))?, &[ENOENT])?;
    check(
        transact(&route(RTM_DELROUTE, 0, v6, None))?,
        &[ENOENT, ESRCH],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_matches_the_probe_mark_and_names_the_table() {
        let m = rule(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, false);
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().expect("4")) as usize,
            m.len()
        );
        assert_eq!(m.len(), 16 + 12 + 4 * 8);
        assert_eq!((m[16], m[23]), (AF_INET, FR_ACT_TO_TBL));
        // FRA_FWMARK then FRA_FWMASK, as `ip rule add fwmark 0x4c420000/0xfffe0000`.
        assert_eq!(u16::from_ne_bytes([m[38], m[39]]), FRA_FWMARK);
        assert_eq!(m[40..44], PROBE_MARK.to_ne_bytes());
        assert_eq!(u16::from_ne_bytes([m[46], m[47]]), FRA_FWMASK);
        assert_eq!(m[48..52], PROBE_MARK_MASK.to_ne_bytes());
        assert_eq!(m[56..60], PROBE_TABLE.to_ne_bytes());
    }

    #[test]
    fn the_route_is_a_default_route_via_the_gateway_in_the_probe_table() {
        let gw: IpAddr = "2001:db8::fe".parse().expect("ip");
        let m = route(RTM_NEWROUTE, NLM_F_CREATE, true, Some((gw, 3)));
        assert_eq!((m[16], m[17], m[23]), (AF_INET6, 0, RTN_UNICAST));
        assert_eq!(m[32..36], PROBE_TABLE.to_ne_bytes());
        assert_eq!(u16::from_ne_bytes([m[38], m[39]]), RTA_GATEWAY);
        assert_eq!(
            m[40..56],
            "2001:db8::fe"
                .parse::<std::net::Ipv6Addr>()
                .expect("ip")
                .octets()
        );
        assert_eq!(m[60..64], 3u32.to_ne_bytes());
    }
}

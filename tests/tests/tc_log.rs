//! The log build of the TC programs (a binary of its own: `xdp_log` reads the records
//! of its one test from the process's logger, which these would add to).

use std::net::Ipv4Addr;

use lb_common::{Counter, ForwardingMode};
use lb_dataplane::kernel::BPF_OBJECT_LOG;
use lb_model::dataplane::ServiceSpec;
use lb_testbed::{
    fixture::{
        CLIENT_ADDR, CLIENT_MAC, FixtureHost, HOST_MAC, Hook, XdpRig, action, backend, service,
        with_hook,
    },
    packet::{Packet, TCP},
};

const SEED: u32 = 0x1065;
const DSR_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const NAT_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);

fn svc(vip: Ipv4Addr, mode: ForwardingMode) -> ServiceSpec {
    service(
        format!("{vip}:80"),
        vip.into(),
        80,
        TCP,
        mode,
        vec![backend(0).0],
    )
}

fn syn(vip: Ipv4Addr, sport: u16) -> Packet {
    Packet::tcp4(
        Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800),
        CLIENT_ADDR,
        sport,
        vip,
        80,
        b"",
    )
}

/// `lb_tc` and its tail-call programs of the log build pass the verifier (each ends in
/// `lb_tc_log` through `LB_TC_LOG_PROGS`) and steer as the default build: a dsr SYN,
/// a nat SYN, and a nat SYN that finds no free port.
#[test]
fn the_tc_log_build_loads_and_steers() {
    lb_testbed::needs_root!();
    with_hook(Hook::Tc, || {
        FixtureHost::new().run(|| {
            let mut rig = XdpRig::load_object(SEED, BPF_OBJECT_LOG);
            rig.set_nat(40000, 1);
            rig.program(svc(DSR_VIP, ForwardingMode::Dsr));
            rig.program(svc(NAT_VIP, ForwardingMode::Nat));
            rig.expect(&syn(DSR_VIP, 1000).bytes, action::TX, Counter::Tx);
            rig.expect(&syn(NAT_VIP, 2000).bytes, action::TX, Counter::Tx);
            rig.expect(
                &syn(NAT_VIP, 2001).bytes,
                action::DROP,
                Counter::DropNatPortsExhausted,
            );
        });
    });
}

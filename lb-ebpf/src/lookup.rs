//! VIP and backend lookup. The control plane computes the tables; this only indexes.

use lb_common::{BackendSlot, VipInfo, VipKey, flow_hash_v4, maps::MAX_BACKENDS_PER_SERVICE};

use crate::{
    maps::{BACKENDS, CONFIG, VIPS},
    parse::Ipv4L4,
};

/// The service owning this packet's (destination, port, protocol), if any.
#[inline(always)]
pub fn vip(pkt: &Ipv4L4) -> Option<&'static VipInfo> {
    let key = VipKey {
        addr_be: pkt.dst_be,
        port_be: pkt.dst_port_be,
        proto: pkt.proto,
        _pad: 0,
    };
    // SAFETY: values are plain data that userspace replaces whole; a concurrent update
    // swaps the element, so the reference stays valid for this program run.
    unsafe { VIPS.get(key) }
}

/// The backend slot the flow hash selects in the service's live table, or `None` when
/// the service has no usable backend.
#[inline(always)]
pub fn backend(vip: &VipInfo, pkt: &Ipv4L4) -> Option<&'static BackendSlot> {
    let count = vip.backend_count;
    if count == 0 || count > MAX_BACKENDS_PER_SERVICE {
        return None;
    }
    let seed = CONFIG.get(0).map_or(0, |c| c.hash_seed);
    let hash = flow_hash_v4(
        seed,
        pkt.src_be,
        pkt.dst_be,
        pkt.src_port_be,
        pkt.dst_port_be,
        pkt.proto,
    );
    BACKENDS.get(vip.table_base() + hash % count)
}

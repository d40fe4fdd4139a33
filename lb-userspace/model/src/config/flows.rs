//! `[node]` flow-table sizes and `[node.nat_timeouts]`: how many flows the data plane
//! can hold, and how long a `nat` flow keeps its port in each TCP state.

use serde::Deserialize;

use super::duration_text::DurationText;

/// Fewest entries any flow table may be given: below this a table is a misconfiguration
/// (and a per-CPU LRU would hold next to nothing per CPU).
pub const MIN_ENTRIES: u32 = 1024;
/// Most entries a flow table may be given (64 Mi: several GiB of kernel memory).
pub const MAX_ENTRIES: u32 = 1 << 26;
/// Longest timeout accepted: a week. A flow idle longer is gone.
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// `[node.nat_timeouts]`: how long a `nat` flow holds its NAT port after its last
/// packet, by state. Ports are released when the time runs out (a new flow may take
/// the port over at once; lbd sweeps the rest every few seconds).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct NatTimeoutsConfig {
    /// Only the client's SYN seen (default `10s`): a spoofed SYN holds a port this long.
    pub tcp_syn: DurationText,
    /// After the handshake, idle (default `6h`, beyond the 2 h TCP keepalive).
    pub tcp_established: DurationText,
    /// One side has sent FIN, or both and the final ACK is awaited (default `2m`).
    pub tcp_closing: DurationText,
    /// Both FINs seen, the backend's first: the backend holds TIME_WAIT on the port's
    /// 4-tuple, so the port waits as long (default `60s`, Linux's TIME_WAIT).
    pub tcp_time_wait: DurationText,
    /// After the final ACK of a close the client began, or a RST (default `0s`: the
    /// backend has no state left for the port).
    pub tcp_closed: DurationText,
    /// UDP, idle (default `60s`).
    pub udp: DurationText,
}

impl Default for NatTimeoutsConfig {
    fn default() -> Self {
        let secs = |s: u64| DurationText::Millis(s * 1000);
        Self {
            tcp_syn: secs(10),
            tcp_established: secs(6 * 3600),
            tcp_closing: secs(120),
            tcp_time_wait: secs(60),
            tcp_closed: secs(0),
            udp: secs(60),
        }
    }
}

/// Validated flow-table settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowTables {
    /// Established `dsr` flows (one LRU shared by all CPUs).
    pub conntrack_entries: u32,
    /// Half-open flows (`lb_common::halfopen`: buckets of four shared by all CPUs, the
    /// count of buckets rounded up to a power of two).
    pub embryonic_entries: u32,
    /// `nat` flows (each takes one entry in each of the two `nat` maps).
    pub nat_entries: u32,
    /// `nat` timeouts as the data plane reads them.
    pub nat_timeouts: lb_common::NatTimeouts,
}

impl Default for FlowTables {
    fn default() -> Self {
        Self {
            conntrack_entries: lb_common::maps::CONNTRACK_ENTRIES,
            embryonic_entries: lb_common::maps::EMBRYONIC_ENTRIES,
            nat_entries: lb_common::maps::NAT_ENTRIES,
            nat_timeouts: lb_common::NatTimeouts::DEFAULT,
        }
    }
}

/// Checks the sizes and timeouts: `Err((field, problem))`, the field relative to
/// `[node]`.
pub fn validate(
    conntrack_entries: u32,
    embryonic_entries: u32,
    nat_entries: u32,
    timeouts: &NatTimeoutsConfig,
) -> Result<FlowTables, (String, String)> {
    for (field, n) in [
        ("conntrack_entries", conntrack_entries),
        ("embryonic_entries", embryonic_entries),
        ("nat_entries", nat_entries),
    ] {
        if !(MIN_ENTRIES..=MAX_ENTRIES).contains(&n) {
            return Err((
                field.into(),
                format!("{n} is outside {MIN_ENTRIES}..={MAX_ENTRIES}"),
            ));
        }
    }
    let ns = |field: &str, text: &DurationText, positive: bool| {
        let d = text.get();
        if d > MAX_TIMEOUT {
            return Err((
                format!("nat_timeouts.{field}"),
                format!("{d:?} is longer than the maximum of 7 days"),
            ));
        }
        if positive && d.is_zero() {
            return Err((format!("nat_timeouts.{field}"), "must be above 0".into()));
        }
        // At most a week, so the nanoseconds fit a u64 with room to spare.
        Ok(d.as_nanos() as u64)
    };
    let syn = ns("tcp_syn", &timeouts.tcp_syn, true)?;
    let established = ns("tcp_established", &timeouts.tcp_established, true)?;
    let closing = ns("tcp_closing", &timeouts.tcp_closing, true)?;
    let time_wait = ns("tcp_time_wait", &timeouts.tcp_time_wait, false)?;
    let closed = ns("tcp_closed", &timeouts.tcp_closed, false)?;
    let udp = ns("udp", &timeouts.udp, true)?;
    Ok(FlowTables {
        conntrack_entries,
        embryonic_entries,
        nat_entries,
        // Index = lb_common::NatState.
        nat_timeouts: lb_common::NatTimeouts {
            tcp_ns: [
                syn,
                established,
                closing,
                closing,
                closing,
                time_wait,
                closed,
                established,
            ],
            udp_ns: udp,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_data_plane_defaults() {
        let t = validate(
            lb_common::maps::CONNTRACK_ENTRIES,
            lb_common::maps::EMBRYONIC_ENTRIES,
            lb_common::maps::NAT_ENTRIES,
            &NatTimeoutsConfig::default(),
        )
        .expect("defaults are valid");
        assert_eq!(t, FlowTables::default());
    }

    #[test]
    fn sizes_and_timeouts_out_of_range_name_their_field() {
        let ok = NatTimeoutsConfig::default();
        let err = validate(10, 4096, 4096, &ok).expect_err("too small");
        assert_eq!(err.0, "conntrack_entries");
        let err = validate(4096, 4096, u32::MAX, &ok).expect_err("too big");
        assert_eq!(err.0, "nat_entries");
        let long = NatTimeoutsConfig {
            udp: DurationText::Millis(8 * 24 * 3600 * 1000),
            ..NatTimeoutsConfig::default()
        };
        let err = validate(4096, 4096, 4096, &long).expect_err("too long");
        assert_eq!(err.0, "nat_timeouts.udp");
        let zero = NatTimeoutsConfig {
            tcp_syn: DurationText::Millis(0),
            ..NatTimeoutsConfig::default()
        };
        let err = validate(4096, 4096, 4096, &zero).expect_err("zero");
        assert_eq!(err.0, "nat_timeouts.tcp_syn");
        let closed = NatTimeoutsConfig {
            tcp_closed: DurationText::Millis(250),
            ..NatTimeoutsConfig::default()
        };
        let t = validate(4096, 4096, 4096, &closed).expect("valid");
        assert_eq!(
            t.nat_timeouts.tcp_ns[lb_common::NatState::Closed as usize],
            250_000_000
        );
    }
}

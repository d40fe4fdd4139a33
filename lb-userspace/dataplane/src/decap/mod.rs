//! `lb_decap` on a backend of `ipip`/`gue` services: what it is told (the VIPs the
//! host serves, the GUE ports), its counters, and — with the `object` feature — loading
//! it and attaching it to an interface's TC ingress with TCX ([`load::Decap`]).
//!
//! In the design's terms: the load balancer's `lb_xdp` encapsulates a client's
//! packet to the backend; on the backend, `lb_decap` strips the outer headers of
//! packets whose inner destination is one of the host's VIPs and hands the client's
//! packet, unchanged, to the stack, which delivers it to the VIP on a loopback or dummy
//! interface; the reply goes from the VIP straight to the client. The program needs
//! no kernel tunnel module (our kernels have none).
//!
//! VIPs are addresses, not (address, port, protocol): the host's stack already answers
//! per port (a listener, or a reset), and its firewall sees the inner packet — TC
//! ingress runs before netfilter — so a port list here would be a second firewall to
//! keep in step with the first. What the address check must stop is a tunnel into the
//! backend's network: a decapsulated packet for another address would be forwarded.
//!
//! Pins (with a pin directory): the three maps by name ([`PINNED_MAPS`]) and one TCX
//! link per interface ([`link_pin`]), so the program keeps decapsulating after the
//! process exits, and a later run with the same directory updates the VIPs and
//! replaces the program in place (`bpf_link_update`: no packet goes undecapsulated).

#[cfg(feature = "object")]
pub mod load;

use lb_common::Addr;
use std::{
    collections::BTreeSet,
    fmt,
    net::IpAddr,
    path::{Path, PathBuf},
};

use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use lb_common::{
    AddrKey, DecapConfig, DecapCounter,
    decap::{DECAP_GUE_PORTS, MAX_DECAP_VIPS},
    maps::names,
};
use lb_model::dataplane::{DataplaneError, addr16, from_addr16};

use crate::maps::{map_error, removed};

/// The maps `lb_decap` uses, pinned by these names.
pub const PINNED_MAPS: [&str; 3] = [
    names::DECAP_VIPS,
    names::DECAP_CONFIG,
    names::DECAP_COUNTERS,
];

/// File-name prefix of the pinned TCX links in the pin directory: `link_tcx_<interface>`.
pub const LINK_PIN_PREFIX: &str = "link_tcx_";

/// Where the pinned link of `interface` lives in `pin_dir`.
#[must_use]
pub fn link_pin(pin_dir: &Path, interface: &str) -> PathBuf {
    pin_dir.join(format!("{LINK_PIN_PREFIX}{interface}"))
}

/// The interfaces with a pinned link in `pin_dir`, sorted (none if it cannot be read).
#[must_use]
pub fn pinned_interfaces(pin_dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(pin_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix(LINK_PIN_PREFIX)
                .map(str::to_owned)
        })
        .collect();
    out.sort();
    out
}

/// A setting `lb_decap` cannot be given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// No VIP: the program would refuse every tunnel packet.
    #[error("no VIP given: name the addresses this backend serves with --vip")]
    NoVips,
    /// More VIPs than the map holds.
    #[error("{count} VIPs given, at most {max} fit")]
    TooManyVips {
        /// How many were given.
        count: usize,
        /// The map's size.
        max: u32,
    },
    /// An address no packet is sent to.
    #[error("{addr} cannot be a VIP (unspecified or multicast)")]
    NotUnicast {
        /// The address.
        addr: IpAddr,
    },
    /// More GUE ports than the config holds.
    #[error("{count} GUE ports given, at most {max} at once")]
    TooManyGuePorts {
        /// How many were given.
        count: usize,
        /// The slots in the config.
        max: usize,
    },
    /// Port 0 marks an unused slot.
    #[error("GUE port 0 is not a port")]
    GuePortZero,
}

/// What `lb_decap` is told: the VIPs this host serves and the GUE ports, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecapSettings {
    vips: BTreeSet<Addr>,
    gue_ports: BTreeSet<u16>,
}

impl DecapSettings {
    /// Checks `vips` (at least one, unicast) and `gue_ports` (none: GUE off);
    /// duplicates count once.
    ///
    /// # Errors
    /// The first setting that cannot be given.
    pub fn new(vips: &[IpAddr], gue_ports: &[u16]) -> Result<Self, SettingsError> {
        if vips.is_empty() {
            return Err(SettingsError::NoVips);
        }
        if let Some(&addr) = vips.iter().find(|a| a.is_unspecified() || a.is_multicast()) {
            return Err(SettingsError::NotUnicast { addr });
        }
        let set: BTreeSet<Addr> = vips.iter().map(|&a| addr16(a)).collect();
        if set.len() > MAX_DECAP_VIPS as usize {
            return Err(SettingsError::TooManyVips {
                count: set.len(),
                max: MAX_DECAP_VIPS,
            });
        }
        if gue_ports.contains(&0) {
            return Err(SettingsError::GuePortZero);
        }
        let ports: BTreeSet<u16> = gue_ports.iter().copied().collect();
        if ports.len() > DECAP_GUE_PORTS {
            return Err(SettingsError::TooManyGuePorts {
                count: ports.len(),
                max: DECAP_GUE_PORTS,
            });
        }
        Ok(Self {
            vips: set,
            gue_ports: ports,
        })
    }

    /// The VIPs, in address order (IPv4 first).
    pub fn vips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.vips.iter().map(|&a| from_addr16(a))
    }

    /// The GUE ports, ascending.
    pub fn gue_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.gue_ports.iter().copied()
    }

    /// The config map's value.
    #[must_use]
    pub fn config(&self) -> DecapConfig {
        let mut config = DecapConfig::default();
        for (slot, port) in config.gue_ports_be.iter_mut().zip(&self.gue_ports) {
            *slot = port.to_be();
        }
        config
    }

    /// The map updates that turn a VIP map holding `current` into one holding these
    /// VIPs: keys to insert, then keys to remove (in that order, so a VIP kept is
    /// never missing).
    #[must_use]
    pub fn vip_changes(&self, current: &[AddrKey]) -> (Vec<AddrKey>, Vec<AddrKey>) {
        let have: BTreeSet<Addr> = current.iter().map(|k| k.addr).collect();
        let add = self
            .vips
            .difference(&have)
            .map(|&addr| AddrKey { addr })
            .collect();
        let remove = have
            .difference(&self.vips)
            .map(|&addr| AddrKey { addr })
            .collect();
        (add, remove)
    }
}

/// The GUE ports a config value holds, ascending.
#[must_use]
pub fn gue_ports_of(config: &DecapConfig) -> Vec<u16> {
    let mut ports: Vec<u16> = config
        .gue_ports_be
        .iter()
        .map(|p| u16::from_be(*p))
        .filter(|p| *p != 0)
        .collect();
    ports.sort_unstable();
    ports
}

/// `lb_decap`'s counters summed over CPUs, indexed by [`DecapCounter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecapCounts([u64; DecapCounter::COUNT as usize]);

impl DecapCounts {
    /// One counter.
    #[must_use]
    pub fn get(&self, counter: DecapCounter) -> u64 {
        self.0[counter as usize]
    }

    /// Every packet the program saw (each counts once).
    #[must_use]
    pub fn packets(&self) -> u64 {
        self.0.iter().sum()
    }

    /// What moved from `before` to `self`, counter by counter.
    #[must_use]
    pub fn since(&self, before: &Self) -> Self {
        let mut out = *self;
        for (o, b) in out.0.iter_mut().zip(before.0) {
            *o = o.saturating_sub(b);
        }
        out
    }

    /// Counts from per-CPU values in counter order (what the map read gives).
    fn from_per_cpu(per_counter: impl IntoIterator<Item = u64>) -> Self {
        let mut out = Self::default();
        for (slot, v) in out.0.iter_mut().zip(per_counter) {
            *slot = v;
        }
        out
    }
}

/// One `name value` line per counter, names padded to a column.
impl fmt::Display for DecapCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in DecapCounter::ALL {
            writeln!(f, "{:<20} {}", c.name(), self.get(c))?;
        }
        Ok(())
    }
}

/// Handles to `lb_decap`'s maps: from a loaded object, or from the pins of a running
/// one (`lbd decap --status`).
pub struct DecapMaps {
    pub(crate) vips: HashMap<MapData, AddrKey, u32>,
    pub(crate) config: Array<MapData, DecapConfig>,
    pub(crate) counters: PerCpuArray<MapData, u64>,
}

impl fmt::Debug for DecapMaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecapMaps").finish_non_exhaustive()
    }
}

impl DecapMaps {
    /// Opens the maps pinned under `pin_dir` by `lbd decap --pin-path`.
    ///
    /// # Errors
    /// [`DataplaneError::Pinned`] naming the first map that is missing or unreadable.
    pub fn open_pinned(pin_dir: &Path) -> Result<Self, DataplaneError> {
        fn open<T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>>(
            dir: &Path,
            name: &'static str,
        ) -> Result<T, DataplaneError> {
            let path = dir.join(name);
            let pinned = |source: aya::maps::MapError| DataplaneError::Pinned {
                path: path.display().to_string(),
                source: Box::new(source),
            };
            let data = MapData::from_pin(&path).map_err(pinned)?;
            let map = aya::maps::Map::from_map_data(data).map_err(pinned)?;
            T::try_from(map).map_err(map_error("open", name))
        }
        Ok(Self {
            vips: open(pin_dir, names::DECAP_VIPS)?,
            config: open(pin_dir, names::DECAP_CONFIG)?,
            counters: open(pin_dir, names::DECAP_COUNTERS)?,
        })
    }

    /// Makes the maps say what `settings` says: the config, then the VIPs (new ones
    /// inserted before old ones go).
    ///
    /// # Errors
    /// A map update failed.
    pub fn apply(&mut self, settings: &DecapSettings) -> Result<(), DataplaneError> {
        self.config
            .set(0, settings.config(), 0)
            .map_err(map_error("set", names::DECAP_CONFIG))?;
        let (add, remove) = settings.vip_changes(&self.vip_keys()?);
        for key in add {
            self.vips
                .insert(key, 0, 0)
                .map_err(map_error("insert", names::DECAP_VIPS))?;
        }
        for key in remove {
            removed(self.vips.remove(&key), names::DECAP_VIPS)?;
        }
        Ok(())
    }

    fn vip_keys(&self) -> Result<Vec<AddrKey>, DataplaneError> {
        self.vips
            .keys()
            .collect::<Result<_, _>>()
            .map_err(map_error("walk", names::DECAP_VIPS))
    }

    /// The VIPs in the map, in address order.
    ///
    /// # Errors
    /// The walk failed.
    pub fn vips(&self) -> Result<Vec<IpAddr>, DataplaneError> {
        let mut keys = self.vip_keys()?;
        keys.sort_by_key(|k| k.addr);
        Ok(keys.into_iter().map(|k| from_addr16(k.addr)).collect())
    }

    /// The settings in the config map.
    ///
    /// # Errors
    /// The read failed.
    pub fn config(&self) -> Result<DecapConfig, DataplaneError> {
        self.config
            .get(&0, 0)
            .map_err(map_error("read", names::DECAP_CONFIG))
    }

    /// The counters, summed over CPUs.
    ///
    /// # Errors
    /// A read failed.
    pub fn counts(&self) -> Result<DecapCounts, DataplaneError> {
        let values = DecapCounter::ALL
            .iter()
            .map(|&c| {
                self.counters
                    .get(&(c as u32), 0)
                    .map(|per_cpu| per_cpu.iter().sum::<u64>())
                    .map_err(map_error("read", names::DECAP_COUNTERS))
            })
            .collect::<Result<Vec<u64>, _>>()?;
        Ok(DecapCounts::from_per_cpu(values))
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    const V4: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 100, 1));
    const V6: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1));

    #[test]
    fn settings_are_checked() {
        assert_eq!(DecapSettings::new(&[], &[]), Err(SettingsError::NoVips));
        let unspecified = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
        assert_eq!(
            DecapSettings::new(&[V4, unspecified], &[]),
            Err(SettingsError::NotUnicast { addr: unspecified })
        );
        let multicast = IpAddr::V4(Ipv4Addr::new(239, 1, 1, 1));
        assert!(matches!(
            DecapSettings::new(&[multicast], &[]),
            Err(SettingsError::NotUnicast { .. })
        ));
        assert_eq!(
            DecapSettings::new(&[V4], &[6080, 0]),
            Err(SettingsError::GuePortZero)
        );
        assert_eq!(
            DecapSettings::new(&[V4], &[1, 2, 3, 4, 5]),
            Err(SettingsError::TooManyGuePorts { count: 5, max: 4 })
        );
        // Duplicates count once.
        let s = DecapSettings::new(&[V6, V4, V4], &[6080, 6080, 1, 2, 3]).expect("valid");
        assert_eq!(s.vips().collect::<Vec<_>>(), vec![V4, V6]);
        assert_eq!(s.gue_ports().collect::<Vec<_>>(), vec![1, 2, 3, 6080]);
    }

    #[test]
    fn too_many_vips_are_refused() {
        let many: Vec<IpAddr> = (0..=MAX_DECAP_VIPS)
            .map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16)))
            .collect();
        assert_eq!(
            DecapSettings::new(&many, &[]),
            Err(SettingsError::TooManyVips {
                count: MAX_DECAP_VIPS as usize + 1,
                max: MAX_DECAP_VIPS
            })
        );
    }

    #[test]
    fn config_holds_the_ports_in_network_order() {
        let s = DecapSettings::new(&[V4], &[6080, 443]).expect("valid");
        let c = s.config();
        assert_eq!(c.gue_ports_be, [443u16.to_be(), 6080u16.to_be(), 0, 0]);
        assert_eq!(c.flags, 0);
        assert_eq!(gue_ports_of(&c), vec![443, 6080]);
        assert_eq!(
            DecapSettings::new(&[V4], &[]).expect("valid").config(),
            DecapConfig::default(),
            "no port: GUE off"
        );
    }

    #[test]
    fn vip_changes_insert_new_and_remove_old() {
        let s = DecapSettings::new(&[V4, V6], &[]).expect("valid");
        let old = AddrKey {
            addr: addr16(IpAddr::V4(Ipv4Addr::new(198, 18, 100, 9))),
        };
        let kept = AddrKey { addr: addr16(V4) };
        let (add, remove) = s.vip_changes(&[old, kept]);
        assert_eq!(add, vec![AddrKey { addr: addr16(V6) }]);
        assert_eq!(remove, vec![old]);
        assert_eq!(
            s.vip_changes(&[kept, AddrKey { addr: addr16(V6) }]),
            (vec![], vec![])
        );
    }

    #[test]
    fn counts_print_one_line_per_counter_and_subtract() {
        let before = DecapCounts::from_per_cpu([1, 0, 0, 0, 0, 0, 0]);
        let after = DecapCounts::from_per_cpu([5, 2, 3, 1, 0, 0, 0]);
        let d = after.since(&before);
        assert_eq!(d.get(DecapCounter::Passed), 4);
        assert_eq!(d.get(DecapCounter::DecapsulatedGue), 3);
        assert_eq!(d.packets(), 10);
        let text = after.to_string();
        assert_eq!(text.lines().count(), DecapCounter::COUNT as usize);
        assert!(text.contains("decapsulated_ipip    2\n"), "{text}");
        assert!(text.starts_with("passed               5\n"), "{text}");
    }

    #[test]
    fn link_pins_are_named_after_the_interface() {
        let dir = std::env::temp_dir().join(format!("lb-decap-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for name in ["eth1", "eth0"] {
            std::fs::write(link_pin(&dir, name), b"").expect("file");
        }
        std::fs::write(dir.join(names::DECAP_VIPS), b"").expect("file");
        assert_eq!(pinned_interfaces(&dir), vec!["eth0", "eth1"]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert!(pinned_interfaces(&dir).is_empty());
    }
}

//! The VIP-address prefilter the data plane reads before its VIP map
//! ([`lb_common::maps::vip_filter_slot`]): a bit per address hash, set for every
//! programmed VIP's address, so traffic to other addresses is passed after one array
//! read. A set bit is a "maybe"; a clear one is certain, so a bit must be set before
//! its VIP's entry appears and cleared only after the last VIP entry of an address that
//! hashes there is gone.

use lb_common::{
    VipKey,
    maps::{VIP_FILTER_WORDS, vip_filter_slot},
};

use super::super::{DataplaneError, MapOps};

/// What the data plane's prefilter holds, as far as this agent wrote it.
#[derive(Debug)]
pub(super) struct Filter {
    words: Vec<u64>,
    /// Every word has been written by this agent (a new or adopted map's contents are
    /// not known until then).
    synced: bool,
}

impl Default for Filter {
    fn default() -> Self {
        Self {
            words: vec![0; VIP_FILTER_WORDS as usize],
            synced: false,
        }
    }
}

/// The words the VIPs `keys` need.
pub(super) fn wanted<'a>(keys: impl Iterator<Item = &'a VipKey>) -> Vec<u64> {
    let mut words = vec![0u64; VIP_FILTER_WORDS as usize];
    for k in keys {
        let (w, bit) = vip_filter_slot(&k.addr);
        words[w as usize] |= bit;
    }
    words
}

impl Filter {
    /// Sets the bits `add` names, clearing none: before VIP entries appear.
    pub(super) fn grow(
        &mut self,
        ops: &mut impl MapOps,
        add: &[u64],
    ) -> Result<(), DataplaneError> {
        let union: Vec<u64> = self.words.iter().zip(add).map(|(a, b)| a | b).collect();
        self.write(ops, &union)
    }

    /// Makes the data plane's words exactly `want` (after VIP entries went).
    pub(super) fn write(
        &mut self,
        ops: &mut impl MapOps,
        want: &[u64],
    ) -> Result<(), DataplaneError> {
        for (i, (&w, old)) in want.iter().zip(self.words.iter_mut()).enumerate() {
            if !self.synced || w != *old {
                ops.put_vip_filter_word(i as u32, w)?;
                *old = w;
            }
        }
        self.synced = true;
        Ok(())
    }
}

//! `enableAccessLog` / `disableAccessLog`: which response statuses a route logs,
//! decided once per route as a bit set so a request costs one bit test.

/// Statuses 0-639 a route logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusSet([u64; 10]);

impl StatusSet {
    /// Logs everything.
    pub const ALL: Self = Self([u64::MAX; 10]);
    /// Logs nothing.
    pub const NONE: Self = Self([0; 10]);

    /// The set of `enableAccessLog(prefixes…)` (`enable`) or `disableAccessLog(…)`:
    /// a one-digit prefix is a class (`2` → 200-299), two digits a decade (`40` →
    /// 400-409), three digits one status; no prefix means all. A status is logged when
    /// `(some prefix matches) == enable`.
    ///
    /// # Errors
    /// A prefix that is not 1-3 digits.
    pub fn from_rule(enable: bool, prefixes: &[f64]) -> Result<Self, String> {
        if prefixes.is_empty() {
            return Ok(if enable { Self::ALL } else { Self::NONE });
        }
        let mut matched = Self::NONE;
        for &p in prefixes {
            if p.fract() != 0.0 || !(0.0..1000.0).contains(&p) {
                return Err(format!("{p} is not a status prefix of 1 to 3 digits"));
            }
            let p = p as u16;
            let (lo, hi) = match p {
                0..=9 => (p * 100, p * 100 + 99),
                10..=99 => (p * 10, p * 10 + 9),
                _ => (p, p),
            };
            for s in lo..=hi.min(639) {
                matched.insert(s);
            }
        }
        Ok(if enable {
            matched
        } else {
            matched.complement()
        })
    }

    fn insert(&mut self, s: u16) {
        self.0[usize::from(s / 64)] |= 1 << (s % 64);
    }

    fn complement(self) -> Self {
        Self(self.0.map(|w| !w))
    }

    /// Whether `status` is logged.
    #[inline]
    pub fn contains(&self, status: u16) -> bool {
        let s = usize::from(status);
        s < 640 && self.0[s / 64] & (1 << (s % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_select_classes_decades_and_statuses() {
        let s = StatusSet::from_rule(true, &[2.0, 40.0, 503.0]).expect("valid");
        for (status, want) in [
            (200, true),
            (299, true),
            (300, false),
            (400, true),
            (409, true),
            (410, false),
            (503, true),
            (502, false),
        ] {
            assert_eq!(s.contains(status), want, "{status}");
        }
        let d = StatusSet::from_rule(false, &[2.0]).expect("valid");
        assert!(!d.contains(204) && d.contains(404) && d.contains(500));
        assert!(
            StatusSet::from_rule(true, &[])
                .expect("valid")
                .contains(302)
        );
        assert!(
            !StatusSet::from_rule(false, &[])
                .expect("valid")
                .contains(302)
        );
        assert!(StatusSet::from_rule(true, &[1000.0]).is_err());
        assert!(StatusSet::from_rule(true, &[2.5]).is_err());
    }
}

//! The config's duration values: Go's syntax with a unit, parsed when the file is
//! read. A module of its own because every section's schema (node, flows, l7, health)
//! uses it and none of them owns it.

use std::fmt;

use serde::Deserialize;

/// A duration in the config, in Go's syntax with a unit (`"30s"`, `"1m30s"`, `"1.5h"`,
/// `"300ms"`; see [`crate::units::duration`]). Parsed when the file is read, so a value
/// that is malformed, negative or out of range refuses the file with its line and
/// field, and every use reads a ready `Duration`.
///
/// A bare number is refused: it used to mean milliseconds, which nobody guesses from
/// `interval = 2`.
#[derive(Clone, Copy, Debug)]
pub enum DurationText {
    /// Milliseconds: how code writes its defaults.
    Millis(u64),
    /// Read from a file.
    Parsed(std::time::Duration),
}

impl DurationText {
    /// The duration.
    pub fn get(&self) -> std::time::Duration {
        match *self {
            DurationText::Millis(ms) => std::time::Duration::from_millis(ms),
            DurationText::Parsed(d) => d,
        }
    }

    /// The duration, for callers written when the text was parsed where it was used.
    ///
    /// # Errors
    /// None: the text was checked when the config was read.
    pub fn parse(&self) -> Result<std::time::Duration, String> {
        Ok(self.get())
    }
}

impl PartialEq for DurationText {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for DurationText {}

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, such as \"30s\", \"1m30s\" or \"500ms\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationText, E> {
                crate::units::parse_duration(v)
                    .map(DurationText::Parsed)
                    .map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationText, E> {
                Err(E::custom(crate::units::DurationError::MissingUnit {
                    text: v.to_string(),
                }))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationText, E> {
                Err(E::custom(crate::units::DurationError::MissingUnit {
                    text: v.to_string(),
                }))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<DurationText, E> {
                Err(E::custom(crate::units::DurationError::MissingUnit {
                    text: v.to_string(),
                }))
            }
        }
        d.deserialize_any(Visitor)
    }
}

//! The access log: skipper's line format (or JSON), per-route enable/disable rules.

mod rule;

pub use rule::StatusSet;

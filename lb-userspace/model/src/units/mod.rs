//! Durations and points in time as our inputs write them, parsed once where the text
//! enters (config, route files, EndpointSlices, etcd) into `std::time` values.
//!
//! - Durations use Go's `time.ParseDuration` syntax everywhere (`"300ms"`, `"1m30s"`,
//!   `"1.5h"`): skipper reads eskip with it, so route files behave as they do in
//!   skipper, and the config uses the same syntax so there is one to remember.
//!   [`duration`] is our own small parser for it (no crate implements Go's rules).
//! - Times are RFC 3339, read by `jiff` ([`timestamp`]).
//!
//! Every value that does not fit — too large, negative where that makes no sense, not
//! the syntax — is an error that quotes the text; nothing here panics on any input.

pub mod duration;
pub mod timestamp;

pub use duration::{DurationError, parse_duration};
pub use timestamp::{TimestampError, from_unix_seconds, parse_rfc3339};

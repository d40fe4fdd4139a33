//! The access log (see `shared/L7-SPEC.md`): skipper's line with nginx-style escaping,
//! or JSON; per-route enable/disable rules by status prefix; query stripping and
//! masking; rendering into reused buffers and buffered writes.

mod render;
mod rule;
#[cfg(test)]
mod tests;
mod writer;

pub use render::{Entry, Format, QueryPolicy, Renderer};
pub use rule::StatusSet;
pub use writer::{AccessLog, AccessLogConfig};

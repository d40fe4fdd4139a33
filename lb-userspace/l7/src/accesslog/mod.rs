//! The access log (see `shared/L7-SPEC.md`): skipper's line with nginx-style escaping,
//! or skipper's JSON; per-route enable/disable rules by status prefix; query stripping
//! and skipper's `maskAccessLogQuery` re-encoding; rendering into reused buffers and
//! buffered writes.

mod mask;
mod render;
mod rule;
#[cfg(test)]
mod tests;
mod writer;

pub use mask::hash as mask_hash;
pub use render::{Entry, Format, QueryPolicy, Renderer};
pub use rule::StatusSet;
pub use writer::{AccessLog, AccessLogConfig};

//! Flow ids for `flowId()`: skipper's standard generator, so ids from skipper and
//! from us look alike in logs and pass each other's `flowId("reuse")` check.
//!
//! An id is 16 characters of a 64-letter alphabet (digits, lower and upper case
//! letters, `-` and `+`), each from 6 bits of one random draw (one draw gives ten).
//! A received id is reused only when it has 8 to 64 characters of that alphabet;
//! anything else would let a client put arbitrary text in every log downstream.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use crate::balance::rng;

/// The header the id travels in.
pub static HEADER: HeaderName = HeaderName::from_static("x-flow-id");

/// The characters of an id; a 6-bit value indexes it.
const ALPHABET: &[u8; 64] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+";

/// The length of a generated id (skipper's default).
pub const LEN: usize = 16;

/// The shortest and longest id `flowId("reuse")` keeps.
const VALID_LEN: std::ops::RangeInclusive<usize> = 8..=64;

/// A new id of [`LEN`] characters.
pub fn generate() -> HeaderValue {
    let mut id = Vec::with_capacity(LEN);
    let mut bits = 0u64;
    for i in 0..LEN {
        if i % 10 == 0 {
            bits = rng::next();
        }
        id.push(ALPHABET[(bits & 63) as usize]);
        bits >>= 6;
    }
    HeaderValue::from_maybe_shared(Bytes::from(id)).expect("the alphabet is visible ASCII")
}

/// Whether `id` is one `flowId("reuse")` keeps: 8 to 64 letters of the alphabet.
pub fn is_valid(id: &[u8]) -> bool {
    VALID_LEN.contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-'))
}

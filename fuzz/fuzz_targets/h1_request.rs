//! Fuzz target `h1_request`: see `lb_control::fuzzing::h1_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::h1_request(data));

//! Fuzz target `h1_response`: see `lb_control::fuzzing::h1_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::h1_response(data));

//! Fuzz target `eskip`: see `lb_control::fuzzing::eskip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::eskip(data));

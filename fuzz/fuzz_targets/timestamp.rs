//! Fuzz target `timestamp`: see `lb_control::fuzzing::timestamp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::timestamp(data));

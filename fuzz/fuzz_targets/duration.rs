//! Fuzz target `duration`: see `lb_control::fuzzing::duration`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::duration(data));

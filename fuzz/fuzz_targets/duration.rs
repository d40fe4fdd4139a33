//! Fuzz target `duration`: see `lb_userspace::fuzzing::duration`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_userspace::fuzzing::duration(data));

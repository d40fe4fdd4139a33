//! Fuzz target `timestamp`: see `lb_userspace::fuzzing::timestamp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_userspace::fuzzing::timestamp(data));

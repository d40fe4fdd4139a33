//! Fuzz target `eskip`: see `lb_userspace::fuzzing::eskip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_userspace::fuzzing::eskip(data));

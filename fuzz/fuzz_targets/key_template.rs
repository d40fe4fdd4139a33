//! Fuzz target `key_template`: see `lb_control::fuzzing::key_template`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::key_template(data));

//! Fuzz target `key_template`: see `lb_userspace::fuzzing::key_template`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_userspace::fuzzing::key_template(data));

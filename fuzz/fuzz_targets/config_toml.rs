//! Fuzz target `config_toml`: see `lb_userspace::fuzzing::config_toml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_userspace::fuzzing::config_toml(data));

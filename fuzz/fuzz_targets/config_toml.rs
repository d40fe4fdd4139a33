//! Fuzz target `config_toml`: see `lb_control::fuzzing::config_toml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::config_toml(data));

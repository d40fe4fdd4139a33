//! Fuzz target `etcd_value`: see `lb_control::fuzzing::etcd_value`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::etcd_value(data));

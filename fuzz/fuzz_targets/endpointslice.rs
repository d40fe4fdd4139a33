//! Fuzz target `endpointslice`: see `lb_control::fuzzing::endpointslice`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_control::fuzzing::endpointslice(data));

//! Fuzz target `endpointslice`: see `lb_userspace::fuzzing::endpointslice`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lb_userspace::fuzzing::endpointslice(data));

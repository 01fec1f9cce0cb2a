//! libFuzzer's target `route_when`: [`jetrelay_fuzz::route_when`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::route_when(data));

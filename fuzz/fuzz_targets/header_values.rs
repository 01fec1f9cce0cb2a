//! libFuzzer's target `header_values`: [`jetrelay_fuzz::header_values`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::header_values(data));

//! libFuzzer's target `stored_records`: [`jetrelay_fuzz::stored_records`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::stored_records(data));

//! libFuzzer's target `config`: [`jetrelay_fuzz::config`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::config(data));

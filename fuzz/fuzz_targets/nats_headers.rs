//! libFuzzer's target `nats_headers`: [`jetrelay_fuzz::headers::nats_headers`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::headers::nats_headers(data));

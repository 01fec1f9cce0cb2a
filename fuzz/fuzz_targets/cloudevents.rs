//! libFuzzer's target `cloudevents`: [`jetrelay_fuzz::cloudevents`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::cloudevents(data));

//! libFuzzer's target `trace_context`: [`jetrelay_fuzz::trace_context`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::trace_context(data));

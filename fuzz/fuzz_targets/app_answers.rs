//! libFuzzer's target `app_answers`: [`jetrelay_fuzz::app_answers`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::app_answers(data));

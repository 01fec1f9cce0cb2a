//! libFuzzer's target `token_answers`: [`jetrelay_fuzz::token_answers`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jetrelay_fuzz::token_answers(data));

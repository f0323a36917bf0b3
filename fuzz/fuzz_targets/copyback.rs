#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| repro_fuzz::copyback(data, repro_fuzz::scratch_from_env()));

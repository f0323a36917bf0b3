#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| repro_fuzz::repair_counts(data, repro_fuzz::scratch_from_env()));

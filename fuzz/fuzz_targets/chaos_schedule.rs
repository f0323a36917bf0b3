#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| repro_fuzz::chaos_schedule(data, repro_fuzz::scratch_from_env()));

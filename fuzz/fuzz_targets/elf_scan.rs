#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| repro_fuzz::elf_scan(data, repro_fuzz::scratch_from_env()));

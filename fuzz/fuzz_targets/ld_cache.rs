#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hpcnode_exporter::fuzzing::ld_cache(data));

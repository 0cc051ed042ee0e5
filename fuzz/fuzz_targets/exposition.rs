#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hpcnode_exporter::fuzzing::exposition(data));

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hpcnode_exporter::fuzzing::module_file(data));

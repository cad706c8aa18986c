//! Fuzz target: the safetensors reader must never panic, hang or over-allocate on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferry_ckpt::fuzzing::safetensors(data);
});

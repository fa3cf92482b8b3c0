//! Fuzzes the whole checkpoint load path on the CPU reference backend:
//! `config.json` parse and validation, safetensors header and tensor parsing,
//! tensor lookup with shapes and dtypes, quantization on load, and upload.
//!
//! Input layout (so seeds stay readable and the fuzzer can mutate each part):
//! byte 0 picks the `--quant` mode; then the config text up to the first NUL
//! byte; everything after that NUL is the safetensors file. A load must
//! return `Ok` or a typed `Err` — never panic, hang or allocate absurdly —
//! and whatever it uploaded must be freed again once the model is dropped.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard_fuzz_support::split_loader_input;

fuzz_target!(|data: &[u8]| {
    let Some((quant, config, st)) = split_loader_input(data) else { return };
    switchyard_fuzz_support::load_once(quant, config, st);
});

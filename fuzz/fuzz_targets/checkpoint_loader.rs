//! Fuzzes the whole checkpoint load path on the CPU reference backend:
//! `config.json` parse and validation, safetensors header and tensor parsing,
//! tensor lookup with shapes and dtypes, quantization on load, and upload;
//! then, when the model loads, `generate`'s path with the input's flags:
//! the `--max-new-tokens` parser, the prompt and context checks of
//! `switchyard_cli::request`, and greedy generation.
//!
//! Input layout (so seeds stay readable and the fuzzer can mutate each part):
//! byte 0 picks `--quant`; byte 1 the flags (`--json`, `--ignore-eos`, no
//! `--prompt-ids`); then the `--prompt-ids` text, the `--max-new-tokens`
//! text and the config text, each ended by a NUL byte; everything after is
//! the safetensors file. A case must return `Ok` or a typed `Err` with a
//! clean message — never panic, hang or allocate absurdly — and whatever it
//! uploaded must be freed again. The body is `loader_case` in src/lib.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard_fuzz_support::split_loader_input;

fuzz_target!(|data: &[u8]| {
    let Some(input) = split_loader_input(data) else { return };
    switchyard_fuzz_support::loader_case(input);
});

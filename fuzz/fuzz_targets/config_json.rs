//! Fuzzes `config.json` parsing alone: the whole input is the file's bytes.
//! A refusal must be a short message with no raw control character; an
//! accepted config must satisfy what the loader and graph rely on (sizes
//! that compute without overflow, head sizes the kernels take, finite RoPE
//! tables). Cheap per case, so it explores the parser far faster than the
//! checkpoint_loader target can. The body is `config_once` in src/lib.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = switchyard_fuzz_support::config_once(data);
});

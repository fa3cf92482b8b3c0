//! Device-memory leaks over a long generation: 500 tokens on the tiny-dense
//! fixture, one decode step at a time through the same `Session` calls that
//! `generate` makes, on every backend available here.
//!
//! After warm-up every buffer a step needs already exists (the KV cache is
//! sized for the whole run up front), so `Backend::live_bytes()` must not
//! move between token 50 and token 500; a step that allocated a scratch
//! buffer and forgot it would grow it by at least 450 allocations. Dropping
//! the session and then the model must bring live bytes back to where they
//! started.
use std::path::Path;
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::graph::{Model, Session};
use switchyard_model::quant::Quant;
use switchyard_tests::per_backend;

/// Tokens to generate (the issue asks for 500).
const TOKENS: usize = 500;
/// Token after which the footprint is sampled (warm-up done).
const WARM: usize = 50;

/// Free device memory as the backend reports it (`info().details`), where it does.
fn device_free(be: &std::sync::Arc<dyn switchyard_core::Backend>) -> Option<u64> {
    be.info().details.iter().find(|(k, _)| k == "free memory bytes").and_then(|(_, v)| v.parse().ok())
}

/// The tiny-dense fixture with its context raised from 256 to 1024
/// positions: the 500-token run below goes past 256, which the loader now
/// refuses (the context is enforced), and the weights do not depend on it.
fn fixture() -> Checkpoint {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-dense");
    let mut cfg: switchyard_model::serde_json::Value =
        switchyard_model::serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    cfg["max_position_embeddings"] = 1024.into();
    let st = std::fs::read(dir.join("model.safetensors")).unwrap();
    Checkpoint::from_bytes("tiny-dense (context 1024)", cfg.to_string(), st).expect("open tiny-dense")
}

per_backend! {
    fn live_bytes_flat_over_500_tokens(be) {
        let start = be.live_bytes();
        let ck = fixture();
        let model = Model::load(&ck, be.clone(), Quant::None).expect("load tiny-dense");
        let after_load = be.live_bytes();
        assert!(after_load > start, "loading uploaded nothing? live {after_load}, start {start}");
        let prompt = [2u32, 17, 99, 5, 250, 31];
        {
            // Sized for the whole run, as generate() sizes it: prompt + every new token.
            let mut s = Session::new(&model, 1, prompt.len() + TOKENS, prompt.len()).expect("session");
            let mut row = s.prefill(0, &prompt, 0, false).expect("prefill");
            let mut at_warm = None;
            let mut free_at_warm = None;
            for t in 1..TOKENS {
                // EOS is ignored: the run is always TOKENS long.
                let pos = prompt.len() + t - 1;
                row = s.decode(&[row.token], &[pos], false).expect("decode").remove(0);
                if t == WARM {
                    be.synchronize().unwrap();
                    at_warm = Some(be.live_bytes());
                    free_at_warm = device_free(&be);
                }
            }
            be.synchronize().unwrap();
            let (warm, end) = (at_warm.unwrap(), be.live_bytes());
            assert_eq!(end, warm, "{}: live bytes grew from {warm} after token {WARM} to {end} after token {TOKENS}", be.name());
            // Where the driver reports it (CUDA), the device's own free memory
            // must not have moved either: this catches memory the backend's
            // accounting never saw.
            if let (Some(w), Some(e)) = (free_at_warm, device_free(&be)) {
                assert_eq!(e, w, "{}: device free memory went from {w} after token {WARM} to {e} after token {TOKENS}", be.name());
                println!("{}: device free memory {w} bytes after token {WARM} and {e} after token {TOKENS}", be.name());
            }
            assert!(row.token < 384, "a real token came out");
        }
        assert_eq!(be.live_bytes(), after_load, "{}: the dropped session left bytes behind", be.name());
        drop(model);
        assert_eq!(be.live_bytes(), start, "{}: the dropped model left bytes behind", be.name());
    }
}

per_backend! {
    /// `generate` itself (the CLI path) frees its session: repeated calls
    /// leave the footprint where one call left it.
    fn generate_calls_do_not_accumulate(be) {
        let start = be.live_bytes();
        let ck = fixture();
        let model = Model::load(&ck, be.clone(), Quant::None).expect("load tiny-dense");
        let loaded = be.live_bytes();
        let req = switchyard_model::generate::Request { prompt: vec![2, 17, 99], max_new_tokens: 20, want_logits: false, stop_at_eos: false };
        for _ in 0..3 {
            let g = switchyard_model::generate::generate(&model, &req).expect("generate");
            assert_eq!(g.tokens.len(), 20);
            assert_eq!(be.live_bytes(), loaded, "{}: a finished generate() left bytes allocated", be.name());
        }
        drop(model);
        assert_eq!(be.live_bytes(), start);
    }
}

switchyard_tests::main!();

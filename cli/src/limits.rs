//! Caps on the numeric flags whose values size allocations or loops.
//!
//! Each is far above what the flag is for, and low enough that the work it
//! allows fits in memory and ends; the README's "Limits" section lists them.
//! They are constants: raising one is an edit here and a rebuild.
//! (`generate --max-new-tokens` has no cap of its own: the model's context,
//! `max_position_embeddings` in its config.json, bounds it.)

/// `bench --iters`: timed runs per case. Each keeps one f64 timing.
pub const MAX_BENCH_ITERS: usize = 100_000;

/// `bench-model --hidden`: residual width (Gemma 4 is 2560..5376).
pub const MAX_BENCH_HIDDEN: usize = 65_536;

/// `bench-model --vocab`: vocabulary rows (Gemma's is 262,144).
pub const MAX_BENCH_VOCAB: usize = 1 << 24;

/// `bench-model --batch`: sequences decoded together.
pub const MAX_BENCH_BATCH: usize = 1024;

/// `bench-model`'s context (`max_position_embeddings` of the benchmark
/// model's config): `--prompt-len` + `--steps` + 4 positions must fit.
pub const BENCH_MODEL_CONTEXT: usize = 8192;

/// `bench-model --prefill-passes`: timed prefill passes. Each keeps one f64
/// timing; a pass of 8192 tokens of the 31b shape takes about a second.
pub const MAX_BENCH_PREFILL_PASSES: usize = 1000;

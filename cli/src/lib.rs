//! # switchyard-cli
//!
//! The tools around the model library, and the `switchyard` binary:
//! [`backends`] links the drivers that Cargo features select and picks one by
//! name, [`coverage`] prints the kernel × backend matrix, [`mod@bench`] is the
//! kernel benchmark harness, [`bench_model`] the decode benchmark of a
//! Gemma-4-shaped model with random device weights, and [`synthetic`] writes
//! random checkpoints for tests and fuzzing. [`request`] turns `generate`'s
//! flags into a checked request, [`text`] reads a checkpoint's tokenizer,
//! chat template and generation config and streams text back out,
//! [`generation`] wires them into a run, [`hf_cache`] finds a repo id in the
//! local Hugging Face cache, [`out`] is where output and messages go (a
//! closed pipe or a full disk is an error, never a panic), and [`limits`]
//! holds the caps on numeric flags.
pub mod backends;
pub mod bench;
pub mod bench_model;
pub mod coverage;
pub mod generation;
pub mod hf_cache;
pub mod limits;
pub mod out;
pub mod request;
pub mod synthetic;
pub mod text;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

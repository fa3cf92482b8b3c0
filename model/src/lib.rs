//! # switchyard-model
//!
//! The Gemma 4 text graph, written only against [`switchyard_kernels::Ops`]
//! and so the same on every backend. The tools around it (the `switchyard`
//! binary, the benchmark harnesses, the synthetic checkpoint writer, the
//! coverage printer) live in the `switchyard-cli` crate; backends are opened
//! through `switchyard_core::registry`.
//!
//! [`checkpoint`] reads HF safetensors, [`config`] validates `config.json`,
//! [`tensors`] lists the tensors a config calls for, [`weights`] uploads
//! (optionally [`quant`]ised) weights, [`graph`] runs passes over the paged
//! [`kv_cache`] with [`rope`] tables, [`generate`] drives generation and
//! [`sampling`] chooses tokens (greedy, or sampled as HF does); [`default_model`] is the tiny model built into the binary.
pub mod checkpoint;
pub mod config;
pub mod default_model;
pub mod error;
pub mod files;
pub mod generate;
pub mod graph;
pub mod json;
pub mod kv_cache;
pub mod quant;
pub mod rope;
pub mod sampling;
pub mod tensors;
pub mod text;
pub mod tp;
pub mod weights;

pub use error::{Error, Result};

/// Re-exported so that tools and tests can build and edit `config.json`
/// values with the same serde_json the loader uses.
pub use serde_json;

//! # switchyard-model
//!
//! The Gemma 4 text graph written only against [`switchyard_kernels::Ops`],
//! the backend factory ([`backends`]) that turns a name into a driver, and the
//! pieces of the `switchyard` binary: the coverage matrix ([`coverage`]) and
//! the benchmark harness ([`bench`]) and the decode benchmark ([`bench_model`]).
//!
//! The model path: [`checkpoint`] reads HF safetensors, [`config`] validates
//! `config.json`, [`weights`] uploads (optionally [`quant`]ised) weights,
//! [`graph`] runs passes over the paged [`kv_cache`] with [`rope`] tables,
//! and [`generate`] drives greedy generation. [`synthetic`] writes random
//! checkpoints; [`default_model`] is the one built into the binary.
pub mod backends;
pub mod bench;
pub mod bench_model;
pub mod checkpoint;
pub mod config;
pub mod coverage;
pub mod default_model;
pub mod error;
pub mod generate;
pub mod graph;
pub mod kv_cache;
pub mod quant;
pub mod rope;
pub mod synthetic;
pub mod tensors;
pub mod weights;

pub use error::{Error, Result};

/// Re-exported so that tools and tests can build and edit `config.json`
/// values (see [`synthetic`]) with the same serde_json the loader uses.
pub use serde_json;

//! # switchyard-cli
//!
//! The tools around the model library, and the `switchyard` binary:
//! [`backends`] links the drivers that Cargo features select and picks one by
//! name, [`coverage`] prints the kernel × backend matrix, [`bench`] is the
//! kernel benchmark harness, [`bench_model`] the decode benchmark of a
//! Gemma-4-shaped model with random device weights, and [`synthetic`] writes
//! random checkpoints for tests and fuzzing.
pub mod backends;
pub mod bench;
pub mod bench_model;
pub mod coverage;
pub mod synthetic;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

//! # switchyard-model
//!
//! The Gemma 4 text graph written only against [`switchyard_kernels::Ops`],
//! the backend factory ([`backends`]) that turns a name into a driver, and the
//! pieces of the `switchyard` binary: the coverage matrix ([`coverage`]) and
//! the benchmark harness ([`bench`]).
pub mod backends;
pub mod bench;
pub mod coverage;

//! # switchyard-kernels
//!
//! The kernel catalogue. Each kernel is declared once (module, symbol, argument
//! signature, numeric contract in its doc comment), launched through a typed
//! launcher on [`Ops`] that validates shapes and computes geometry, and tested
//! by a parity case that the harness in [`parity`] finds through the registry.
//!
//! GPU sources live beside the Rust declarations, one folder per family
//! (`src/<family>/<family>.cu`, `src/<family>/<symbol>.wgsl`); [`sources`]
//! embeds them.
#![warn(missing_docs)]

#[macro_use]
mod declare;
mod ops;
pub mod parity;
#[macro_use]
pub mod plan;
pub mod sources;

pub mod attn;
pub mod embed;
pub mod gemm;
pub mod gemv;
pub mod head;
pub mod moe;
pub mod norm;
pub mod rope_kv;
pub mod util;

pub use ops::Ops;
pub use switchyard_core as core;

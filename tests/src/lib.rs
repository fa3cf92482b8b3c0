//! Shared support for the cross-backend suites: which backends to test, and
//! when a missing one is a skip or a failure.
//!
//! The suites that run on GPU backends (`parity`, `determinism`, `leaks`,
//! `model_generate`, `model_fixtures`) are `harness = false` targets run by
//! [`harness`] (`switchyard-test-harness`): a test whose backend is missing
//! here is reported as ignored with the reason, not as passed, and
//! `SWITCHYARD_REQUIRE_WGPU=1` / `SWITCHYARD_REQUIRE_CUDA=1` make it a
//! failure instead. The crate docs of [`harness`] say why this is a harness
//! and not `#[ignore]`.
use std::sync::Arc;
use switchyard_core::Backend;

pub use switchyard_test_harness as harness;

/// Environment flag that turns "no wgpu adapter" into a test failure (CI sets it).
pub const REQUIRE_WGPU: &str = "SWITCHYARD_REQUIRE_WGPU";
/// Environment flag that turns "CUDA unavailable" into a test failure (GPU runs set it).
pub const REQUIRE_CUDA: &str = "SWITCHYARD_REQUIRE_CUDA";

/// Opens backend `name` and drops it: `Err` with the reason where it is
/// unavailable here (the harness's probe).
pub fn probe(name: &str) -> Result<(), String> {
    switchyard_cli::backends::open(name).map(drop).map_err(|e| e.to_string())
}

/// Backend `name` for a test the harness has let run (so it was available
/// when probed); any error opening it is a failure.
pub fn open(name: &str) -> Arc<dyn Backend> {
    switchyard_cli::backends::open(name).unwrap_or_else(|e| panic!("opening backend {name}: {e}"))
}

/// The `fn main` of a `harness = false` suite: runs its [`per_backend!`] and
/// [`harness::tests!`] tests, probing backends through [`probe`].
#[macro_export]
macro_rules! main {
    () => {
        $crate::harness::main!($crate::probe);
    };
}

/// Expands a test body, written once over `be: Arc<dyn Backend>`, into one
/// test per backend, `NAME::cpu`, `NAME::wgpu` and `NAME::cuda`, registered
/// with the harness (so the file must be a `harness = false` target ending in
/// [`main!`]). `gpu fn NAME(be) { … }` makes only the wgpu and cuda tests
/// (for bodies that compare a backend with the CPU reference).
#[macro_export]
macro_rules! per_backend {
    ($(#[$m:meta])* fn $name:ident($be:ident) $body:block) => {
        $crate::per_backend!(@mod $name $be $body [cpu: None, wgpu: Some("wgpu"), cuda: Some("cuda")]);
    };
    ($(#[$m:meta])* gpu fn $name:ident($be:ident) $body:block) => {
        $crate::per_backend!(@mod $name $be $body [wgpu: Some("wgpu"), cuda: Some("cuda")]);
    };
    (@mod $name:ident $be:ident $body:block [$($kind:ident: $needs:expr),+]) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($be: std::sync::Arc<dyn switchyard_core::Backend>) $body
            $(
                fn $kind() {
                    body($crate::open(stringify!($kind)))
                }
                $crate::harness::inventory::submit! {
                    $crate::harness::Test {
                        name: concat!(stringify!($name), "::", stringify!($kind)),
                        needs: $needs,
                        run: $kind,
                    }
                }
            )+
        }
    };
}

/// Independent f64 reference implementations of the kernel contracts.
pub mod reference;

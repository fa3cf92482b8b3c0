//! Shared support for the cross-backend suites: which backends to test, and
//! when a missing one is a skip or a failure.
use std::sync::Arc;
use switchyard_core::{Backend, Error};

/// Environment flag that turns "no wgpu adapter" into a test failure (CI sets it).
pub const REQUIRE_WGPU: &str = "SWITCHYARD_REQUIRE_WGPU";
/// Environment flag that turns "CUDA unavailable" into a test failure (GPU runs set it).
pub const REQUIRE_CUDA: &str = "SWITCHYARD_REQUIRE_CUDA";

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Opens backend `name` for a test. `None` (after printing the reason) when it
/// is unavailable here and its REQUIRE flag is not set; panics when the flag is
/// set, so CI cannot silently skip the backend it is meant to test.
pub fn backend_or_skip(name: &str) -> Option<Arc<dyn Backend>> {
    match switchyard_cli::backends::open(name) {
        Ok(be) => Some(be),
        Err(e @ Error::Unavailable { .. }) => {
            let required = match name {
                "wgpu" => flag(REQUIRE_WGPU),
                "cuda" => flag(REQUIRE_CUDA),
                _ => true,
            };
            assert!(!required, "backend {name} is required here but unavailable: {e}");
            eprintln!("SKIPPED: backend {name} unavailable: {e}");
            println!("SKIPPED: backend {name} unavailable: {e}");
            None
        }
        Err(e) => panic!("opening backend {name}: {e}"),
    }
}

/// Expands a test body, written once over `be: Arc<dyn Backend>`, into one
/// `#[test]` per backend (`cpu`, `wgpu`, `cuda`).
#[macro_export]
macro_rules! per_backend {
    ($(#[$m:meta])* fn $name:ident($be:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($be: std::sync::Arc<dyn switchyard_core::Backend>) $body
            #[test]
            fn cpu() {
                if let Some(be) = $crate::backend_or_skip("cpu") { body(be) }
            }
            #[test]
            fn wgpu() {
                if let Some(be) = $crate::backend_or_skip("wgpu") { body(be) }
            }
            #[test]
            fn cuda() {
                if let Some(be) = $crate::backend_or_skip("cuda") { body(be) }
            }
        }
    };
}

/// Independent f64 reference implementations of the kernel contracts.
pub mod reference;

//! The coverage matrix: declared kernels × backends, like ggml's ops table.
use std::fmt::Write as _;
use switchyard_core::{registry, BackendKind};

/// A markdown table with one row per declared kernel and one column per
/// backend kind in `backends`: `yes` where that backend implements it.
pub fn matrix(backends: &[BackendKind]) -> String {
    let mut s = String::from("| module | kernel |");
    for b in backends {
        let _ = write!(s, " {b} |");
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---|".repeat(backends.len()));
    s.push('\n');
    let kernels = registry::kernels();
    for k in &kernels {
        let _ = write!(s, "| {} | {} |", k.module, k.symbol);
        for b in backends {
            s.push_str(if registry::implements(*b, k) { " yes |" } else { " - |" });
        }
        s.push('\n');
    }
    let _ = write!(s, "\n{} kernels;", kernels.len());
    for b in backends {
        let n = kernels.iter().filter(|k| registry::implements(*b, k)).count();
        let _ = write!(s, " {b}: {n}/{}", kernels.len());
    }
    s.push('\n');
    s
}

//! Which kernels exist and which backend implements which.
//!
//! The catalogue (`switchyard-kernels`) submits one [`Declared`] per kernel;
//! each backend submits one [`Implemented`] per kernel it can run. Both are
//! collected with `inventory`, so a kernel added to the catalogue shows up in
//! `switchyard kernels` and in the parity suite without further code.
use crate::{Error, KernelSig, Result};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::OnceLock;

/// A kernel declaration in the catalogue.
pub struct Declared(pub &'static KernelSig);
inventory::collect!(Declared);

/// A backend's claim that it implements `module::symbol`.
pub struct Implemented {
    /// Backend name, as [`crate::Backend::name`] returns it.
    pub backend: &'static str,
    /// Kernel module.
    pub module: &'static str,
    /// Kernel symbol.
    pub symbol: &'static str,
}
inventory::collect!(Implemented);

fn declared() -> &'static HashMap<(&'static str, &'static str), &'static KernelSig> {
    static MAP: OnceLock<HashMap<(&'static str, &'static str), &'static KernelSig>> = OnceLock::new();
    MAP.get_or_init(|| inventory::iter::<Declared>.into_iter().map(|d| ((d.0.module, d.0.symbol), d.0)).collect())
}

fn implemented() -> &'static HashSet<(&'static str, &'static str, &'static str)> {
    static SET: OnceLock<HashSet<(&'static str, &'static str, &'static str)>> = OnceLock::new();
    SET.get_or_init(|| inventory::iter::<Implemented>.into_iter().map(|i| (i.backend, i.module, i.symbol)).collect())
}

/// The declaration of `module::symbol`, or [`Error::UnknownKernel`].
pub fn lookup(module: &str, symbol: &str) -> Result<&'static KernelSig> {
    declared().get(&(module, symbol)).copied().ok_or_else(|| Error::UnknownKernel {
        module: module.into(),
        symbol: symbol.into(),
        backend: None,
    })
}

/// Every declared kernel, sorted by module then symbol.
pub fn kernels() -> Vec<&'static KernelSig> {
    let mut v: Vec<_> = declared().values().copied().collect();
    v.sort_by_key(|s| (s.module, s.symbol));
    v
}

/// Every backend name that registered at least one kernel, sorted.
pub fn backends() -> Vec<&'static str> {
    implemented().iter().map(|i| i.0).collect::<BTreeSet<_>>().into_iter().collect()
}

/// Whether `backend` registered an implementation of `sig`.
pub fn implements(backend: &str, sig: &KernelSig) -> bool {
    implemented().contains(&(backend, sig.module, sig.symbol))
}

/// Registrations that name no declared kernel (a typo in a backend). Empty
/// when the registry is consistent; the test suite asserts that.
pub fn orphan_implementations() -> Vec<String> {
    implemented().iter().filter(|i| !declared().contains_key(&(i.1, i.2))).map(|i| format!("{}: {}::{}", i.0, i.1, i.2)).collect()
}

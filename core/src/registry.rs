//! Which kernels exist, which backend implements which, and which backend
//! drivers are linked into this program.
//!
//! The catalogue (`switchyard-kernels`) submits one [`Declared`] per kernel
//! and one [`Implemented`] per (kernel, backend kind) for which it has a
//! source and a launch plan; the CPU reference submits one [`Implemented`]
//! per kernel function. Each driver crate submits one [`BackendFactory`].
//! All are collected with `inventory`, so what is linked is what exists:
//! nothing restates these lists.
use crate::{Backend, BackendKind, Error, KernelSig, Result};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

/// A kernel declaration in the catalogue.
pub struct Declared(pub &'static KernelSig);
inventory::collect!(Declared);

/// A backend kind's implementation of a declared kernel.
pub struct Implemented {
    /// The backend kind that can run it.
    pub backend: BackendKind,
    /// The kernel.
    pub kernel: &'static KernelSig,
}
inventory::collect!(Implemented);

/// A linked backend driver: how to open it.
pub struct BackendFactory {
    /// Which backend it opens.
    pub kind: BackendKind,
    /// Opens the backend with its defaults (environment variables included);
    /// [`Error::Unavailable`] when the driver or device is missing.
    pub open: fn() -> Result<Arc<dyn Backend>>,
}
inventory::collect!(BackendFactory);

fn declared() -> &'static HashMap<(&'static str, &'static str), &'static KernelSig> {
    static MAP: OnceLock<HashMap<(&'static str, &'static str), &'static KernelSig>> = OnceLock::new();
    MAP.get_or_init(|| inventory::iter::<Declared>.into_iter().map(|d| ((d.0.module, d.0.symbol), d.0)).collect())
}

fn implemented() -> &'static HashSet<(BackendKind, usize)> {
    static SET: OnceLock<HashSet<(BackendKind, usize)>> = OnceLock::new();
    SET.get_or_init(|| inventory::iter::<Implemented>.into_iter().map(|i| (i.backend, sig_key(i.kernel))).collect())
}

fn sig_key(sig: &KernelSig) -> usize {
    sig as *const KernelSig as usize
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

/// Every backend kind that implements at least one kernel, in
/// [`BackendKind::ALL`] order.
pub fn implementing_backends() -> Vec<BackendKind> {
    let kinds: BTreeSet<BackendKind> = implemented().iter().map(|i| i.0).collect();
    kinds.into_iter().collect()
}

/// Whether `backend` implements `sig`.
pub fn implements(backend: BackendKind, sig: &KernelSig) -> bool {
    implemented().contains(&(backend, sig_key(sig)))
}

/// Implementations of kernels that are not declared (a kernel static that
/// escaped the `declare_kernel!` macro). Empty when the registry is
/// consistent; the test suite asserts that.
pub fn orphan_implementations() -> Vec<String> {
    let declared: HashSet<usize> = declared().values().map(|s| sig_key(s)).collect();
    inventory::iter::<Implemented>
        .into_iter()
        .filter(|i| !declared.contains(&sig_key(i.kernel)))
        .map(|i| format!("{}: {}::{}", i.backend, i.kernel.module, i.kernel.symbol))
        .collect()
}

/// The backend kinds whose driver is linked into this program, in
/// [`BackendKind::ALL`] order.
pub fn linked_backends() -> Vec<BackendKind> {
    let kinds: BTreeSet<BackendKind> = inventory::iter::<BackendFactory>.into_iter().map(|f| f.kind).collect();
    kinds.into_iter().collect()
}

/// Opens the backend `kind` through its linked driver. A driver that is not
/// linked (compiled out by Cargo features) is [`Error::Unavailable`] naming
/// the ones that are.
pub fn open(kind: BackendKind) -> Result<Arc<dyn Backend>> {
    match inventory::iter::<BackendFactory>.into_iter().find(|f| f.kind == kind) {
        Some(f) => (f.open)(),
        None => Err(Error::Unavailable {
            backend: kind.name().into(),
            reason: format!(
                "this build does not include the {kind} driver (linked: {}); enable its Cargo feature",
                linked_backends().iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

/// [`open`] by name (`cpu`, `wgpu`, `cuda`); an unknown name is
/// [`Error::InvalidArgument`] listing the known ones.
pub fn open_by_name(name: &str) -> Result<Arc<dyn Backend>> {
    open(name.parse()?)
}

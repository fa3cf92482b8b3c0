use crate::Ops;
use switchyard_core::compare::Tolerance;
use switchyard_core::{DType, KernelSig, Region, Result};

/// How the harness fills a buffer before the run.
pub enum Init {
    /// These bytes (inputs, in-out buffers).
    Data(Vec<u8>),
    /// This many poison bytes (outputs the kernel must fully write).
    Poison(usize),
}

/// How an output is compared with the reference.
#[derive(Clone, Debug)]
pub struct Check {
    /// Element type, for decoding and for the poison pattern.
    pub dtype: DType,
    /// The parity rule for this output (ARCHITECTURE.md).
    pub tol: Tolerance,
}

/// One buffer of a case.
pub struct Buffer {
    /// Argument name (as in the kernel signature).
    pub name: &'static str,
    /// Initial contents.
    pub init: Init,
    /// `Some` for outputs that are compared with the reference.
    pub check: Option<Check>,
}

impl Buffer {
    /// An input with these bytes.
    pub fn input(name: &'static str, data: Vec<u8>) -> Self {
        Buffer { name, init: Init::Data(data), check: None }
    }
    /// An output of `elems` elements, poisoned before the run.
    pub fn output(name: &'static str, dtype: DType, elems: usize, tol: Tolerance) -> Self {
        Buffer { name, init: Init::Poison(dtype.bytes_for(elems)), check: Some(Check { dtype, tol }) }
    }
    /// A buffer the kernel reads and writes, compared after the run.
    pub fn inout(name: &'static str, data: Vec<u8>, dtype: DType, tol: Tolerance) -> Self {
        Buffer { name, init: Init::Data(data), check: Some(Check { dtype, tol }) }
    }
    /// Bytes the buffer holds (without guard).
    pub fn len(&self) -> usize {
        match &self.init {
            Init::Data(d) => d.len(),
            Init::Poison(n) => *n,
        }
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A launch of one kernel at one shape with fresh random inputs.
pub struct Case {
    /// The kernel under test.
    pub kernel: &'static KernelSig,
    /// Shape description for the report.
    pub label: String,
    /// Buffers, in the order `run` receives their addresses.
    pub buffers: Vec<Buffer>,
    /// Calls the typed launcher with the buffers (each region covers the buffer without its guard bytes).
    pub run: Box<dyn Fn(&Ops, &[Region]) -> Result<()> + Send + Sync>,
}

/// A kernel's case generator, registered beside its declaration.
pub struct CaseSet {
    /// The kernel these cases exercise.
    pub kernel: &'static KernelSig,
    /// Makes the cases from a seeded generator.
    pub cases: fn(&mut super::Gen) -> Vec<Case>,
}
inventory::collect!(CaseSet);

use crate::{Error, Result};

/// One kernel argument as passed to [`crate::Backend::launch`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A device address (0 = null, allowed only where the signature says so).
    P(u64),
    /// A signed 32-bit scalar.
    I(i32),
    /// An unsigned 32-bit scalar.
    U(u32),
    /// A 32-bit float scalar.
    F(f32),
}

impl Arg {
    /// The kind of this argument.
    pub fn kind(&self) -> ArgKind {
        match self {
            Arg::P(_) => ArgKind::Ptr,
            Arg::I(_) => ArgKind::I32,
            Arg::U(_) => ArgKind::U32,
            Arg::F(_) => ArgKind::F32,
        }
    }
}

/// The kind of a declared argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// Device address.
    Ptr,
    /// i32 scalar.
    I32,
    /// u32 scalar.
    U32,
    /// f32 scalar.
    F32,
}

/// How a kernel uses a pointer argument. Scalars are [`Role::Value`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read only.
    In,
    /// Written (fully, by contract; the parity harness poisons it first).
    Out,
    /// Read and written (accumulators, cursors).
    InOut,
    /// A scalar passed by value.
    Value,
}

/// One declared argument: its name (used in every error message), its kind
/// and role, and whether a null address is meaningful.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    /// Argument name, e.g. `q_norm`.
    pub name: &'static str,
    /// Kind the launch must pass.
    pub kind: ArgKind,
    /// Read / write role for pointers.
    pub role: Role,
    /// A null pointer is allowed and means "absent" (documented per kernel).
    pub nullable: bool,
}

impl ArgSpec {
    /// A pointer the kernel reads.
    pub const fn input(name: &'static str) -> Self {
        ArgSpec { name, kind: ArgKind::Ptr, role: Role::In, nullable: false }
    }
    /// A pointer the kernel writes.
    pub const fn output(name: &'static str) -> Self {
        ArgSpec { name, kind: ArgKind::Ptr, role: Role::Out, nullable: false }
    }
    /// A pointer the kernel reads and writes.
    pub const fn inout(name: &'static str) -> Self {
        ArgSpec { name, kind: ArgKind::Ptr, role: Role::InOut, nullable: false }
    }
    /// An i32 scalar.
    pub const fn i32(name: &'static str) -> Self {
        ArgSpec { name, kind: ArgKind::I32, role: Role::Value, nullable: false }
    }
    /// A u32 scalar.
    pub const fn u32(name: &'static str) -> Self {
        ArgSpec { name, kind: ArgKind::U32, role: Role::Value, nullable: false }
    }
    /// An f32 scalar.
    pub const fn f32(name: &'static str) -> Self {
        ArgSpec { name, kind: ArgKind::F32, role: Role::Value, nullable: false }
    }
    /// The same pointer argument, but null is allowed.
    pub const fn or_null(self) -> Self {
        ArgSpec { nullable: true, ..self }
    }
}

/// A kernel's declaration: where it lives and what it takes. Declared once in
/// `switchyard-kernels` and submitted to [`crate::registry`].
#[derive(Debug)]
pub struct KernelSig {
    /// Module (kernel family, and the source file stem on GPU backends).
    pub module: &'static str,
    /// Entry-point symbol.
    pub symbol: &'static str,
    /// The argument list, in order.
    pub args: &'static [ArgSpec],
}

impl KernelSig {
    /// Checks count and kinds of `args` against the declaration, and that
    /// non-nullable pointers are not null.
    pub fn check(&self, args: &[Arg]) -> Result<()> {
        if args.len() != self.args.len() {
            return Err(Error::invalid(
                self.symbol,
                "<argument list>",
                format!("expected {} arguments ({}), got {}", self.args.len(), self.arg_names(), args.len()),
            ));
        }
        for (spec, arg) in self.args.iter().zip(args) {
            if arg.kind() != spec.kind {
                return Err(Error::invalid(self.symbol, spec.name, format!("expected {:?}, got {:?}", spec.kind, arg)));
            }
            if let Arg::P(0) = arg {
                if !spec.nullable {
                    return Err(Error::invalid(self.symbol, spec.name, "null address where a buffer is required"));
                }
            }
        }
        Ok(())
    }

    /// Comma-separated argument names, for messages.
    pub fn arg_names(&self) -> String {
        self.args.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
    }

    /// Index of the argument called `name`.
    pub fn arg_index(&self, name: &str) -> Option<usize> {
        self.args.iter().position(|a| a.name == name)
    }
}

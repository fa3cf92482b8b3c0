//! Utility kernels. `copy_u32` is the bandwidth yardstick: a plain kernel
//! copy, measured in the same run as every other kernel, so that a backend's
//! kernels are compared with what its own shaders can move (issue 3 asks for
//! "a plain WGSL copy of the same byte count" as the wgpu ceiling).
use crate::ops::{blocks, require, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Result};

/// 32-bit words each thread of [`COPY_U32`] moves (one 16-byte vector on GPUs).
pub const COPY_WORDS_PER_THREAD: usize = 4;

declare_kernel! {
    /// `out[i] = inp[i]` for `i < n` 32-bit words, bit-exact. Grid
    /// `(⌈n / 1024⌉)`, block 256, four words per thread. `out` and `inp` must not overlap.
    COPY_U32 = "util"::"copy_u32"(A::output("out"), A::input("inp"), A::u32("n"))
}

impl Ops {
    /// See [`COPY_U32`].
    pub fn copy_u32(&self, out: u64, inp: u64, n: usize) -> Result<()> {
        let k = COPY_U32.symbol;
        require(n > 0 && u32::try_from(n).is_ok(), k, "n", || format!("n = {n} words must be in 1..2^32"))?;
        let grid = blocks(k, n, 256 * COPY_WORDS_PER_THREAD)?;
        self.go(&COPY_U32, [grid, 1, 1], [256, 1, 1], &[(P(out), words(n)), (P(inp), words(n)), (U(n as u32), 0)])
    }
}

fn cases(g: &mut Gen) -> Vec<Case> {
    [1usize, 1027, 100_003]
        .into_iter()
        .map(|n| {
            let (_, data) = g.i32(n, i32::MIN, i32::MAX);
            Case {
                kernel: &COPY_U32,
                label: format!("n={n}"),
                buffers: vec![Buffer::output("out", DType::I32, n, Tolerance::Exact), Buffer::input("inp", data)],
                run: Box::new(move |o, a| o.copy_u32(a[0].addr(), a[1].addr(), n)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &COPY_U32, cases } }

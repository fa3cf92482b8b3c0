//! Utility kernels. `copy_u32` is the bandwidth yardstick: a plain kernel
//! copy, measured in the same run as every other kernel, so that a backend's
//! kernels are compared with what its own shaders can move (issue 3 asks for
//! "a plain WGSL copy of the same byte count" as the wgpu ceiling).
use crate::ops::{region, require, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{groups, CudaPlan, DeviceFacts, PlanArgs, WgslPlan};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Region, Result};

/// 32-bit words each CUDA thread of [`COPY_U32`] moves (one 16-byte vector).
pub const COPY_WORDS_PER_THREAD: usize = 4;

declare_kernel! {
    /// `out[i] = inp[i]` for `i < n` 32-bit words, bit-exact. `out` and `inp`
    /// must not overlap.
    COPY_U32 = "util"::"copy_u32"(A::output("out"), A::input("inp"), A::u32("n"))
}

/// Blocks of 256 threads, four words each.
fn cuda_copy_u32(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    let per_block = 256 * COPY_WORDS_PER_THREAD as u64;
    Ok(CudaPlan::single(a.kernel, [groups(a.kernel, a.u32("n")? as u64, per_block)?, 1, 1], [256, 1, 1]))
}

/// Words one `copy_u32` workgroup moves (`SPAN` in copy_u32.wgsl): four
/// 16-byte vectors per invocation.
const WGSL_COPY_WORDS_PER_GROUP: u64 = 4096;

fn wgsl_copy_u32(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [groups(a.kernel, a.u32("n")? as u64, WGSL_COPY_WORDS_PER_GROUP)?, 1, 1]))
}

cuda_plan!(COPY_U32 => cuda_copy_u32);
wgsl_plan!(COPY_U32, "util/copy_u32.wgsl" => wgsl_copy_u32);

impl Ops {
    /// See [`COPY_U32`].
    pub fn copy_u32(&self, out: Region, inp: Region, n: usize) -> Result<()> {
        let k = COPY_U32.symbol;
        require(n > 0 && u32::try_from(n).is_ok(), k, "n", || format!("n = {n} words must be in 1..2^32"))?;
        self.launch(&COPY_U32, &[region(out, words(n)), region(inp, words(n)), scalar(U(n as u32))])
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
                run: Box::new(move |o, a| o.copy_u32(a[0], a[1], n)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &COPY_U32, cases } }

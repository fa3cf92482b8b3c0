//! GEMM choice for a linear layer: by weight format, by M, and by what the
//! backend implements (the registry), so the graph itself never names a backend.
use crate::weights::Linear;
use switchyard_core::{registry, Region, Result};
use switchyard_kernels::gemm::w4a16::{Fp4Weight, DECODE_MAX_M, W4A16_GEMM_DECODE};
use switchyard_kernels::gemm::DENSE_GEMM_TC;
use switchyard_kernels::Ops;

/// `c[m, n] = a[m, k] · Wᵀ` for the layer's weight.
///
/// bf16: prefill-sized M goes to the prefill dispatcher (pipelined tensor-core
/// kernel where there is one); decode-sized M to the tensor-core kernel when
/// the backend has it, else the simple tiled kernel. NVFP4: the decode-only
/// W4A16 kernel for M ≤ 16 where implemented, else the base W4A16 kernel.
pub fn apply(ops: &Ops, w: &Linear, a: Region, c: Region, m: usize) -> Result<()> {
    let be = ops.be.kind();
    match w {
        Linear::Bf16 { w, n, k } => {
            if m > DECODE_MAX_M {
                ops.dense_gemm_prefill(a, w.region(), c, m, *n, *k)
            } else if registry::implements(be, &DENSE_GEMM_TC) && k % 8 == 0 {
                ops.dense_gemm_tc(a, w.region(), c, m, *n, *k)
            } else {
                ops.dense_gemm_bf16(a, w.region(), c, m, *n, *k)
            }
        }
        Linear::Nvfp4 { bq, bs, scale2, n, k } => {
            let fw = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2: *scale2, ldb: *n };
            if m <= DECODE_MAX_M && registry::implements(be, &W4A16_GEMM_DECODE) {
                ops.w4a16_gemm_decode(a, &fw, c, m, *n, *k)
            } else {
                ops.w4a16_gemm(a, &fw, c, m, *n, *k)
            }
        }
    }
}

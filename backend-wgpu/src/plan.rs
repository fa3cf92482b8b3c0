//! How each kernel maps onto dispatches. Most run the launcher's grid with
//! the workgroup size fixed in their WGSL; a few choose their own geometry
//! (lm_head: 256 vocab rows per workgroup and `M` as an override; the GEMMs:
//! 128 × 128 output tiles; argmax: a chunked first pass into scratch and a
//! per-row final pass).
use switchyard_core::{Arg, Error, KernelSig, Result};

/// One dispatch of a launch.
pub(crate) struct Pass {
    pub entry: &'static str,
    /// Logical grid, before folding.
    pub grid: [u32; 3],
    /// Pipeline-overridable constants (part of the pipeline cache key).
    pub consts: Vec<(&'static str, u32)>,
    /// `x0..x3` of the kernel's Params.
    pub extra: [u32; 4],
}

pub(crate) struct Plan {
    pub passes: Vec<Pass>,
    /// Bytes of backend scratch bound after the pointer arguments.
    pub scratch: u64,
}

/// Whether a kernel's layout has a scratch binding after its pointers.
pub(crate) fn has_scratch(symbol: &str) -> bool {
    symbol == "argmax_rows"
}

const ARGMAX_CHUNK: u32 = 256 * 16;
/// Vocab rows per lm_head workgroup (`NR` in lm_head_logits_*.wgsl).
const HEAD_ROWS_PER_GROUP: u32 = 32;

fn int(sig: &KernelSig, args: &[Arg], name: &str) -> Result<u32> {
    let i = sig.arg_index(name).ok_or_else(|| Error::invalid(sig.symbol, name, "no such argument (plan out of date)"))?;
    match args[i] {
        Arg::I(v) if v >= 0 => Ok(v as u32),
        Arg::U(v) => Ok(v),
        other => Err(Error::invalid(sig.symbol, name, format!("expected a non-negative integer, got {other:?}"))),
    }
}

fn single(sig: &KernelSig, grid: [u32; 3]) -> Plan {
    Plan { passes: vec![Pass { entry: sig.symbol, grid, consts: vec![], extra: [0; 4] }], scratch: 0 }
}

pub(crate) fn plan(sig: &'static KernelSig, grid: [u32; 3], args: &[Arg]) -> Result<Plan> {
    match sig.symbol {
        "lm_head_logits_fp8" | "lm_head_logits_bf16" => {
            let m = int(sig, args, "m")?;
            if !(1..=16).contains(&m) {
                return Err(Error::invalid(sig.symbol, "m", format!("m = {m} must be in 1..=16")));
            }
            let vocab = int(sig, args, "vocab")?;
            // One shader for every m (kernels/src/head/lm_head_logits_*.wgsl): 32 vocab rows per
            // workgroup, lanes striding over k with 16-byte loads; M unrolls the per-h-row loops.
            let groups = vocab.div_ceil(HEAD_ROWS_PER_GROUP);
            Ok(Plan { passes: vec![Pass { entry: sig.symbol, grid: [groups, 1, 1], consts: vec![("M", m)], extra: [0; 4] }], scratch: 0 })
        }
        "argmax_rows" => {
            let rows = grid[0];
            let chunks = int(sig, args, "vocab")?.div_ceil(ARGMAX_CHUNK);
            Ok(Plan {
                passes: vec![
                    Pass { entry: "argmax_rows", grid: [chunks, rows, 1], consts: vec![], extra: [chunks, 0, 0, 0] },
                    Pass { entry: "argmax_rows_final", grid: [rows, 1, 1], consts: vec![], extra: [chunks, 0, 0, 0] },
                ],
                scratch: rows as u64 * chunks as u64 * 8,
            })
        }
        // The GEMM family picks its own geometry (kernels/src/gemm/*.wgsl).
        s if GEMM_PLANNED.contains(&s) => gemm_plan(sig, args),
        // Several slots per workgroup: short rows still fill it, and long slot
        // lists need fewer workgroups (a 1-D grid folds only once).
        "moe_gather_bf16" => Ok(single(sig, [int(sig, args, "n")?.div_ceil(GATHER_SLOTS), 1, 1])),
        // Row tiles on x, the dimension that folds (n = tokens · top-k can be large).
        "moe_grouped_gemm_bf16" | "moe_grouped_w4a16" => Ok(single(sig, [grid[1], grid[0], 1])),
        // 4096 words per workgroup: four 16-byte vectors per invocation (copy_u32.wgsl).
        "copy_u32" => Ok(single(sig, [int(sig, args, "n")?.div_ceil(COPY_WORDS_PER_GROUP), 1, 1])),
        _ => Ok(single(sig, grid)),
    }
}

/// Words one `copy_u32` workgroup moves (`SPAN` in copy_u32.wgsl).
const COPY_WORDS_PER_GROUP: u32 = 4096;

/// The GEMM kernels [`gemm_plan`] lays out (scaled_add_bf16 runs the launcher's grid).
const GEMM_PLANNED: [&str; 13] = [
    "dense_gemm_bf16",
    "dense_gemm_router",
    "dense_gemm_tc",
    "dense_gemm_bf16_pipelined",
    "dense_gemm_tc_scaled_acc",
    "dense_gemm_splitk_partial",
    "dense_gemm_splitk_reduce",
    "w4a16_gemm",
    "w4a16_gemm_n128",
    "w4a16_gemm_n128_ldb",
    "w4a16_gemm_n128_m128",
    "w4a16_gemm_n128_m128_bf16",
    "w4a16_gemm_decode",
];
/// Output rows and columns per workgroup of the tiled GEMM shaders.
const GEMM_TILE: u32 = 128;
/// Largest M of the dense GEMMs' small path, and its columns per workgroup.
const DENSE_SMALL_M: u32 = 16;
const DENSE_SMALL_COLS: u32 = 32;
/// Output columns per workgroup of `w4a16_gemm_decode`.
const DECODE_COLS: u32 = 32;

/// Geometry of the GEMM family. Extras stay 0: the scaled-add shaders OR x3
/// into a product to keep the driver from fusing it into an FMA.
fn gemm_plan(sig: &'static KernelSig, args: &[Arg]) -> Result<Plan> {
    let (m, n) = (int(sig, args, "m")?, int(sig, args, "n")?);
    let tiles = [n.div_ceil(GEMM_TILE), m.div_ceil(GEMM_TILE)];
    // Dense M ≤ 16: the small path (32 columns per workgroup, M an override); the
    // same strict k order as the tiles, so the choice changes no result.
    let small = |entry: &'static str, gz: u32| Plan {
        passes: vec![Pass { entry, grid: [n.div_ceil(DENSE_SMALL_COLS), 1, gz], consts: vec![("M", m)], extra: [0; 4] }],
        scratch: 0,
    };
    match sig.symbol {
        "dense_gemm_bf16" | "dense_gemm_router" | "dense_gemm_tc" | "dense_gemm_bf16_pipelined" if m <= DENSE_SMALL_M => {
            Ok(small("dense_gemm_small", 1))
        }
        "dense_gemm_tc_scaled_acc" if m <= DENSE_SMALL_M => Ok(small("dense_gemm_tc_scaled_acc_small", 1)),
        "dense_gemm_splitk_partial" if m <= DENSE_SMALL_M => Ok(small("dense_gemm_splitk_partial_small", int(sig, args, "splits")?)),
        // A thread per output word; the shader indexes words with u32.
        "dense_gemm_splitk_reduce" => {
            let words = m as u64 * n as u64 / 2;
            let groups = u32::try_from(words.div_ceil(256))
                .map_err(|_| Error::invalid(sig.symbol, "m", format!("m · n = {} elements exceed the u32 index space", 2 * words)))?;
            Ok(single(sig, [groups, 1, 1]))
        }
        // The split is the z dimension (the shader reads wid.z, so the grid must not fold into z).
        "dense_gemm_splitk_partial" => Ok(single(sig, [tiles[0], tiles[1], int(sig, args, "splits")?])),
        // M is an override: the per-row accumulators unroll into registers.
        "w4a16_gemm_decode" => {
            if !(1..=16).contains(&m) {
                return Err(Error::invalid(sig.symbol, "m", format!("m = {m} must be in 1..=16")));
            }
            Ok(Plan {
                passes: vec![Pass { entry: sig.symbol, grid: [n.div_ceil(DECODE_COLS), 1, 1], consts: vec![("M", m)], extra: [0; 4] }],
                scratch: 0,
            })
        }
        _ => Ok(single(sig, [tiles[0], tiles[1], 1])),
    }
}

/// Slots per `moe_gather_bf16` workgroup.
const GATHER_SLOTS: u32 = 8;

/// Folds a logical grid into the per-dimension limit: x into y for 1-D
/// grids (fold = 1), into z for 2-D ones (fold = 2). Returns the dispatch
/// size and the fold code the shader's `group_x` undoes.
pub(crate) fn fold(kernel: &str, g: [u32; 3], max: u32) -> Result<([u32; 3], u32)> {
    let too_big =
        || Error::invalid(kernel, "<geometry>", format!("grid {g:?} exceeds {max} workgroups per dimension and cannot be folded"));
    if g[1] > max || g[2] > max {
        return Err(too_big());
    }
    if g[0] <= max {
        return Ok((g, 0));
    }
    let parts = g[0].div_ceil(max);
    let x = g[0].div_ceil(parts);
    if g[1] == 1 && g[2] == 1 && parts <= max {
        Ok(([x, parts, 1], 1))
    } else if g[2] == 1 && parts <= max {
        Ok(([x, g[1], parts], 2))
    } else {
        Err(too_big())
    }
}

#[cfg(test)]
mod tests {
    use super::fold;

    #[test]
    fn folding_covers_every_group() {
        for (g, max) in [([70000u32, 1, 1], 65535u32), ([200000, 3, 1], 65535), ([10, 1, 1], 65535), ([7, 1, 1], 3), ([9, 3, 1], 4)] {
            let (d, f) = fold("t", g, max).unwrap();
            assert!(d.iter().all(|&v| v <= max), "{g:?} -> {d:?}");
            let parts = match f {
                0 => 1,
                1 => d[1],
                _ => d[2],
            };
            let span = d[0] * parts;
            assert!(span >= g[0] && span - g[0] < parts, "{g:?} -> {d:?}");
            if f == 2 {
                assert_eq!(d[1], g[1]);
            }
        }
        assert!(fold("t", [9, 5, 2], 4).is_err());
        assert!(fold("t", [7, 1, 1], 2).is_err());
    }
}

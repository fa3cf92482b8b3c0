//! TRANSITION: geometry of kernels still launched through the legacy path
//! (the launcher's grid); removed once every family has WGSL plans.
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
        // Attention picks its own geometry (kernels/src/attn/*.wgsl).
        "attention_prefill" | "attention_decode_partial" => attn_plan(sig, grid, args),
        _ => Ok(single(sig, grid)),
    }
}

/// Query rows per attention workgroup: a power of two with rows · hd/2 <= 1024,
/// so that each of the 128 threads keeps at most 16 f32 accumulators and
/// the q block fits the shaders' 16 KiB of workgroup memory.
fn attn_rows(sig: &KernelSig, hd: u32) -> Result<u32> {
    if hd == 0 || !hd.is_multiple_of(8) || hd > 512 {
        return Err(Error::invalid(sig.symbol, "hd", format!("hd = {hd} must be a multiple of 8 in 8..=512")));
    }
    // Largest power of two not above min(32, 1024 / (hd/2)); hd <= 512 makes it >= 4.
    let most = (1024 / (hd / 2)).min(32);
    Ok(1 << (31 - most.leading_zeros()))
}

/// Prefill: `x0` query rows per workgroup, grid (row blocks, nh). Decode
/// partial: a workgroup takes up to `x0` query heads of one KV head (they
/// share each K/V row), `x1` workgroups per KV head, grid (splits, nkv · x1, batch).
fn attn_plan(sig: &'static KernelSig, grid: [u32; 3], args: &[Arg]) -> Result<Plan> {
    let rb = attn_rows(sig, int(sig, args, "hd")?)?;
    let (nh, nkv) = (int(sig, args, "nh")?, int(sig, args, "nkv")?);
    if nkv == 0 || nh == 0 || !nh.is_multiple_of(nkv) {
        return Err(Error::invalid(sig.symbol, "nh", format!("nh = {nh} must be a positive multiple of nkv = {nkv}")));
    }
    let (grid, extra) = if sig.symbol == "attention_prefill" {
        ([int(sig, args, "rows")?.div_ceil(rb), nh, 1], [rb, 0, 0, 0])
    } else {
        let group = nh / nkv;
        let per = group.min(rb);
        let chunks = group.div_ceil(per);
        ([grid[0], nkv * chunks, grid[2]], [per, chunks, 0, 0])
    };
    Ok(Plan { passes: vec![Pass { entry: sig.symbol, grid, consts: vec![], extra }], scratch: 0 })
}

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

//! Grid folding: a plan's logical grid may exceed the adapter's
//! workgroups-per-dimension limit in x; the dispatch folds x into y or z and
//! the shader's `group_x` undoes it.
use switchyard_core::{Error, Result};

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

//! GPU sources, embedded at build time. Kernel names are written once, in the
//! declarations; these tables map them to source text.
//!
//! - CUDA: one `.cu` per module (`src/<module>/<module>.cu`), with
//!   [`CUDA_PRELUDE`] prepended; each declared symbol is an `extern "C"` entry.
//! - WGSL: one `.wgsl` per kernel (`src/<module>/<symbol>.wgsl`), with
//!   [`WGSL_PRELUDE`] prepended. WGSL has no `#include`, so code shared by
//!   several kernels lives in fragments (`.wgsli`, listed in
//!   [`WGSL_FRAGMENTS`]) pulled in by a comment line
//!   `//! include "gemm/dense_tile_core.wgsli"` (path relative to `src/`);
//!   [`wgsl_expand`] composes the text a backend compiles and remembers where
//!   every line came from.

/// A source file: path relative to the kernels crate (for error messages) and text.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// Path, e.g. `src/norm/norm.cu`.
    pub path: &'static str,
    /// The file's text.
    pub text: &'static str,
}

/// Shared CUDA helpers (bf16/fp8 conversions, reductions), prepended to every module.
pub const CUDA_PRELUDE: Source = Source { path: "src/prelude.cuh", text: include_str!("prelude.cuh") };
/// Hopper helpers (mbarriers, TMA copies, wgmma), prepended after
/// [`CUDA_PRELUDE`] to the modules compiled for `sm_90a` (those whose source
/// has a `// nvrtc-arch: sm_90a` line).
pub const CUDA_PRELUDE_SM90: Source = Source { path: "src/prelude_sm90.cuh", text: include_str!("prelude_sm90.cuh") };
/// Shared WGSL helpers (bf16 packing with round-to-nearest-even, fp8 decode), prepended to every kernel.
pub const WGSL_PRELUDE: Source = Source { path: "src/prelude.wgsl", text: include_str!("prelude.wgsl") };

/// The subgroup lanes of WGSL kernels (`Lanes`, `row_sum`, `row_best` through
/// subgroup operations), composed after the prelude when the device has
/// `wgpu::Features::SUBGROUP`; see [`wgsl_expand_variant`].
pub const WGSL_SUBGROUPS: Source = Source { path: "src/prelude_subgroups.wgsl", text: include_str!("prelude_subgroups.wgsl") };
/// The fallback lanes (the same names through workgroup-memory reductions),
/// composed after the prelude otherwise.
pub const WGSL_LANES: Source = Source { path: "src/prelude_lanes.wgsl", text: include_str!("prelude_lanes.wgsl") };

/// The enables of the cooperative-matrix variant
/// ([`wgsl_expand_coopmat`]), leading the composed text of a kernel that has
/// a [`WGSL_COOPMAT_INCLUDE`] line.
pub const WGSL_COOPMAT: Source = Source { path: "src/prelude_coopmat.wgsl", text: include_str!("prelude_coopmat.wgsl") };

/// The marker of a cooperative-matrix include: `//! coopmat "<path>"`,
/// expanded like an include in the cooperative-matrix variant only (a plain
/// comment in the others), for code that needs `f16` and
/// `wgpu_cooperative_matrix` (`wgpu::Features::SHADER_F16` and
/// `EXPERIMENTAL_COOPERATIVE_MATRIX`).
pub const WGSL_COOPMAT_INCLUDE: &str = "//! coopmat";

/// CUDA sources by module: every `src/<family>/<module>.cu` (found by the build script).
pub static CUDA: &[(&str, Source)] = include!(concat!(env!("OUT_DIR"), "/cuda_sources.rs"));

/// WGSL fragments by path relative to `src/` (the name an include line
/// uses): every `src/<family>/<name>.wgsli` (found by the build script).
/// A fragment may only use names that every shader including it defines
/// (`p`, the `d_*` bindings it reads, prelude helpers).
pub static WGSL_FRAGMENTS: &[(&str, Source)] = include!(concat!(env!("OUT_DIR"), "/wgsl_fragments.rs"));

/// The CUDA source of `module`.
pub fn cuda(module: &str) -> Option<Source> {
    CUDA.iter().find(|(m, _)| *m == module).map(|(_, s)| *s)
}

/// The WGSL source of `kernel`: the file its `wgsl_plan!` registration names.
pub fn wgsl(kernel: &switchyard_core::KernelSig) -> Option<Source> {
    crate::plan::wgsl_kernel(kernel).map(|k| k.source)
}

/// Every WGSL implementation: (kernel, source).
pub fn wgsl_all() -> Vec<(&'static switchyard_core::KernelSig, Source)> {
    let mut v: Vec<_> = switchyard_core::registry::kernels().into_iter().filter_map(|k| wgsl(k).map(|s| (k, s))).collect();
    v.sort_by_key(|(k, _)| (k.module, k.symbol));
    v
}

/// The WGSL fragment at `path` (relative to `src/`, as an include line names it).
pub fn wgsl_fragment(path: &str) -> Option<Source> {
    WGSL_FRAGMENTS.iter().find(|(p, _)| *p == path).map(|(_, s)| *s)
}

/// The marker of an include line: `//! include "<path>"` (a WGSL comment, so
/// the text parses even where it is not expanded).
pub const WGSL_INCLUDE: &str = "//! include";

/// WGSL ready to compile: the prelude and a kernel with its includes expanded,
/// and, for every line of [`text`](Self::text), the file and line it came from.
#[derive(Clone, Debug)]
pub struct Expanded {
    /// The composed source.
    pub text: String,
    origins: Vec<(&'static str, u32)>,
}

impl Expanded {
    /// The file path and 1-based line of composed line `line` (1-based).
    pub fn origin(&self, line: u32) -> Option<(&'static str, u32)> {
        self.origins.get((line as usize).checked_sub(1)?).copied()
    }
}

/// [`WGSL_PRELUDE`] followed by `src`, with every include line replaced by the
/// fragment it names (recursively; a fragment is included once per kernel and
/// an include cycle is an error). An unknown include or a malformed include
/// line is an error naming the file and line.
pub fn wgsl_expand(src: &Source) -> Result<Expanded, String> {
    wgsl_expand_variant(src, false)
}

/// [`wgsl_expand`] with the lanes variant: [`WGSL_SUBGROUPS`] (`subgroups`)
/// or [`WGSL_LANES`] between the prelude and the kernel.
pub fn wgsl_expand_variant(src: &Source, subgroups: bool) -> Result<Expanded, String> {
    wgsl_expand_coopmat(src, subgroups, false)
}

/// [`wgsl_expand_variant`], and with `coopmat` the cooperative-matrix
/// variant: a kernel with a [`WGSL_COOPMAT_INCLUDE`] line gets
/// [`WGSL_COOPMAT`] (its enables) first and that line expanded like an
/// include; without `coopmat`, or for a kernel without such a line, the text
/// is exactly [`wgsl_expand_variant`]'s.
pub fn wgsl_expand_coopmat(src: &Source, subgroups: bool, coopmat: bool) -> Result<Expanded, String> {
    let coopmat = coopmat && has_coopmat(src);
    expand_with(src, &wgsl_fragment, if subgroups { &WGSL_SUBGROUPS } else { &WGSL_LANES }, coopmat)
}

/// Whether `src` itself has a [`WGSL_COOPMAT_INCLUDE`] line (fragments are
/// not searched: the kernel file names its cooperative-matrix code).
pub fn has_coopmat(src: &Source) -> bool {
    src.text.lines().any(|l| l.trim().starts_with(WGSL_COOPMAT_INCLUDE))
}

/// [`wgsl_expand`] of `kernel`'s source; `None` if it has none.
pub fn wgsl_expanded(kernel: &switchyard_core::KernelSig) -> Option<Result<Expanded, String>> {
    wgsl(kernel).map(|s| wgsl_expand(&s))
}

type Lookup<'a> = &'a dyn Fn(&str) -> Option<Source>;

fn expand_with(src: &Source, lookup: Lookup, lanes: &Source, coopmat: bool) -> Result<Expanded, String> {
    let mut out = Expanded { text: String::new(), origins: Vec::new() };
    let mut done = Vec::new();
    if coopmat {
        for (i, line) in WGSL_COOPMAT.text.trim_end().lines().enumerate() {
            out.text.push_str(line);
            out.text.push('\n');
            out.origins.push((WGSL_COOPMAT.path, i as u32 + 1));
        }
    }
    let ctx = Ctx { lookup, coopmat };
    let lookup = &ctx;
    let prelude = Source { path: WGSL_PRELUDE.path, text: WGSL_PRELUDE.text.trim_end() };
    expand_into(&prelude, lookup, &mut out, &mut vec![prelude.path], &mut done)?;
    let lanes = Source { path: lanes.path, text: lanes.text.trim_end() };
    expand_into(&lanes, lookup, &mut out, &mut vec![lanes.path], &mut done)?;
    expand_into(src, lookup, &mut out, &mut vec![src.path], &mut done)?;
    Ok(out)
}

/// What an expansion looks fragments up with, and whether
/// [`WGSL_COOPMAT_INCLUDE`] lines expand.
struct Ctx<'a> {
    lookup: Lookup<'a>,
    coopmat: bool,
}

fn expand_into(
    src: &Source,
    ctx: &Ctx,
    out: &mut Expanded,
    stack: &mut Vec<&'static str>,
    done: &mut Vec<&'static str>,
) -> Result<(), String> {
    let lookup = ctx.lookup;
    for (i, line) in src.text.lines().enumerate() {
        let at = || format!("{}:{}", src.path, i + 1);
        let t = line.trim();
        let rest = t.strip_prefix(WGSL_INCLUDE).or_else(|| t.strip_prefix(WGSL_COOPMAT_INCLUDE).filter(|_| ctx.coopmat));
        let Some(rest) = rest else {
            out.text.push_str(line);
            out.text.push('\n');
            out.origins.push((src.path, i as u32 + 1));
            continue;
        };
        let name = rest
            .trim()
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .ok_or_else(|| format!("{}: malformed include (want `{WGSL_INCLUDE} \"<path>\"`): `{}`", at(), line.trim()))?;
        let frag = lookup(name)
            .ok_or_else(|| format!("{}: unknown include \"{name}\" (fragments are the .wgsli files in the family folders)", at()))?;
        if stack.contains(&frag.path) {
            return Err(format!("{}: include cycle: {} -> {}", at(), stack.join(" -> "), frag.path));
        }
        if done.contains(&frag.path) {
            continue;
        }
        stack.push(frag.path);
        expand_into(&frag, ctx, out, stack, done)?;
        stack.pop();
        done.push(frag.path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "inline/k.wgsl";

    /// Fragments `a.wgsli` (two lines, includes b), `b.wgsli` (one line),
    /// `loop.wgsli` (includes itself through `loop2.wgsli`).
    fn lookup(name: &str) -> Option<Source> {
        let text = match name {
            "a.wgsli" => "a1\n//! include \"b.wgsli\"\na2",
            "b.wgsli" => "b1",
            "loop.wgsli" => "//! include \"loop2.wgsli\"",
            "loop2.wgsli" => "x\n  //! include \"loop.wgsli\"",
            _ => return None,
        };
        Some(Source { path: Box::leak(format!("src/{name}").into_boxed_str()), text })
    }

    fn expand(text: &'static str) -> Result<Expanded, String> {
        expand_with(&Source { path: K, text }, &lookup, &WGSL_LANES, false)
    }

    #[test]
    fn includes_expand_and_lines_map_back() {
        let e = expand("k1\n    //! include \"a.wgsli\"\nk3\n//! include \"b.wgsli\"\n").unwrap();
        let pl = WGSL_PRELUDE.text.trim_end().lines().count() + WGSL_LANES.text.trim_end().lines().count();
        let lines: Vec<&str> = e.text.lines().skip(pl).collect();
        assert_eq!(lines, ["k1", "a1", "b1", "a2", "k3"], "b.wgsli is included once");
        assert_eq!(e.origin(1), Some((WGSL_PRELUDE.path, 1)));
        let pl = pl as u32;
        let want = [(K, 1), ("src/a.wgsli", 1), ("src/b.wgsli", 1), ("src/a.wgsli", 3), (K, 3)];
        for (i, w) in want.into_iter().enumerate() {
            assert_eq!(e.origin(pl + 1 + i as u32), Some(w));
        }
        assert_eq!(e.origin(pl + 6), None);
        assert_eq!(e.origin(0), None);
    }

    #[test]
    fn coopmat_lines_expand_in_their_variant_only() {
        let src = Source { path: K, text: "k1\n//! coopmat \"b.wgsli\"\nk3\n" };
        let plain = expand_with(&src, &lookup, &WGSL_LANES, false).unwrap();
        let coop = expand_with(&src, &lookup, &WGSL_LANES, true).unwrap();
        let pl = WGSL_PRELUDE.text.trim_end().lines().count() + WGSL_LANES.text.trim_end().lines().count();
        let plain_lines: Vec<&str> = plain.text.lines().skip(pl).collect();
        assert_eq!(plain_lines, ["k1", "//! coopmat \"b.wgsli\"", "k3"]);
        let head = WGSL_COOPMAT.text.trim_end().lines().count();
        assert!(coop.text.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"), "{}", &coop.text[..80]);
        let coop_lines: Vec<&str> = coop.text.lines().skip(head + pl).collect();
        assert_eq!(coop_lines, ["k1", "b1", "k3"]);
        assert_eq!(coop.origin(1), Some((WGSL_COOPMAT.path, 1)));
        assert_eq!(coop.origin((head + pl + 2) as u32), Some(("src/b.wgsli", 1)));
        assert!(has_coopmat(&src));
        // The public entry composes the header only for kernels that have the line.
        let dense = wgsl(&crate::gemm::DENSE_GEMM_BF16_PIPELINED).unwrap();
        assert!(has_coopmat(&dense));
        assert!(wgsl_expand_coopmat(&dense, false, true).unwrap().text.contains("fn dense_gemm_coop("));
        assert!(!wgsl_expand_coopmat(&dense, false, false).unwrap().text.contains("fn dense_gemm_coop("));
        let norm = Source { path: K, text: "k1\n" };
        assert_eq!(wgsl_expand_coopmat(&norm, false, true).unwrap().text, wgsl_expand_variant(&norm, false).unwrap().text);
    }

    #[test]
    fn bad_includes_name_file_and_line() {
        let err = expand("a\n//! include \"nope/missing.wgsli\"\n").unwrap_err();
        assert!(err.starts_with("inline/k.wgsl:2: unknown include \"nope/missing.wgsli\""), "{err}");
        let err = expand("//! include nope\n").unwrap_err();
        assert!(err.starts_with("inline/k.wgsl:1: malformed include"), "{err}");
        let err = expand("//! include \"loop.wgsli\"\n").unwrap_err();
        assert!(err.starts_with("src/loop2.wgsli:2: include cycle"), "{err}");
    }

    #[test]
    fn every_kernel_and_fragment_expands() {
        for (kernel, src) in wgsl_all() {
            wgsl_expand(&src).unwrap_or_else(|e| panic!("{}: {e}", kernel.symbol));
        }
        for (name, src) in WGSL_FRAGMENTS {
            assert_eq!(src.path, format!("src/{name}"));
            wgsl_expand(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

//! NVRTC compilation of the kernel modules and the on-disk cubin cache.
//!
//! A module's program is `prelude.cuh` followed by `<module>.cu`, each behind
//! a `#line` directive so that NVRTC's diagnostics name the real file and
//! line. The output is a cubin for the device's exact architecture
//! (`sm_XY`), so the driver never JIT-compiles PTX at load time.
//!
//! A `.cu` file may ask for extra NVRTC options with a line of the form
//! `// nvrtc-options: --fmad=false` (for example a GEMM that must be
//! bit-identical to a scalar loop). Those options are part of the cache key.
//!
//! A `.cu` file that uses instructions of one architecture only (Hopper's
//! wgmma, TMA tensor copies, setmaxnreg) says so with a line
//! `// nvrtc-arch: sm_90a`: it is compiled for that arch-specific target on
//! a device of the matching compute capability (`sm_90`), and refused on
//! any other ([`module_arch`]); the plans pick its entries only where
//! `DeviceFacts::cuda_sm90a` says the device runs them.
use crate::raw;
use std::path::{Path, PathBuf};
use switchyard_core::{Error, Result};
use switchyard_kernels::sources::{self, Source};

/// Environment variable naming the cubin cache directory. Empty disables
/// the disk cache.
pub const CACHE_ENV: &str = "SWITCHYARD_CUDA_CACHE";

/// Bumped whenever the cache entry format or the key recipe changes.
const CACHE_FORMAT: &str = "switchyard-cubin-v1";
const MAGIC: &[u8; 8] = b"SYCUBIN1";

/// Options every module is compiled with. fmad stays on (the default): the
/// kernels here have ≤ 1 bf16 ulp or 1e-5·Σ|ab| tolerances, which contraction
/// stays well inside; modules that need IEEE-separate multiply and add say so
/// with an `nvrtc-options` line.
fn base_options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "-default-device".into(), "--std=c++17".into(), "-lineinfo".into()]
}

/// Extra options requested by the source itself (`// nvrtc-options: ...`).
fn source_options(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("// nvrtc-options:"))
        .flat_map(|rest| rest.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// The arch-specific target `text` asks for on an `// nvrtc-arch:` line.
fn source_arch(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.trim().strip_prefix("// nvrtc-arch:")).map(str::trim)
}

/// The target `module` is compiled for on a device of architecture
/// `device_arch` (`sm_90`): the device's own, or the arch-specific
/// variant its source asks for (`sm_90a`), which only a device of that
/// base architecture runs; `Unsupported` on any other device.
pub fn module_arch(module: &str, device_arch: &str) -> Result<String> {
    let wanted = sources::cuda(module).and_then(|src| source_arch(src.text).map(str::to_string));
    arch_for(module, wanted.as_deref(), device_arch)
}

fn arch_for(module: &str, wanted: Option<&str>, device_arch: &str) -> Result<String> {
    match wanted {
        None => Ok(device_arch.to_string()),
        Some(w) if w.strip_suffix('a') == Some(device_arch) => Ok(w.to_string()),
        Some(w) => Err(Error::Unsupported(format!(
            "CUDA module `{module}` is compiled for {w} only (arch-specific instructions); this device is {device_arch}"
        ))),
    }
}

/// The entry-point patterns of `module` that its source lists on a
/// `// dependent-launch: entry ...` line (`prefix*` matches every entry
/// starting with `prefix`, for macro-generated families): kernels that call
/// `griddepcontrol.wait` before touching anything an earlier launch wrote,
/// so they may launch as programmatic dependents and start (prefetching
/// weights, say) while the launch before them finishes.
pub(crate) fn dependent_entries(module: &str) -> Vec<String> {
    sources::cuda(module).map_or_else(Vec::new, |src| {
        src.text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("// dependent-launch:"))
            .flat_map(|rest| rest.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect()
    })
}

/// The grid axis along which `entry` of `module` launches as one cluster,
/// from its source's `// cluster-launch: <x|y|z> entry ...` line: the
/// whole grid extent on that axis is one cluster (the entry combines its
/// blocks' partial results through distributed shared memory), the other
/// axes are 1. `None` for a plain launch.
pub(crate) fn cluster_axis(module: &str, entry: &str) -> Option<usize> {
    let src = sources::cuda(module)?;
    src.text.lines().find_map(|l| {
        let mut words = l.trim().strip_prefix("// cluster-launch:")?.split_whitespace();
        let axis = match words.next()? {
            "x" => 0,
            "y" => 1,
            "z" => 2,
            _ => return None,
        };
        words.any(|w| w == entry).then_some(axis)
    })
}

/// The program text NVRTC compiles for `src`: the prelude, the Hopper
/// prelude when the source asks for `sm_90a`, then the source.
pub(crate) fn program_text(src: &Source) -> String {
    let mut text = String::new();
    let hopper = source_arch(src.text) == Some("sm_90a");
    for part in [Some(sources::CUDA_PRELUDE), hopper.then_some(sources::CUDA_PRELUDE_SM90), Some(*src)].into_iter().flatten() {
        text.push_str(&format!("#line 1 \"{}\"\n{}\n", part.path, part.text));
    }
    text
}

/// Everything that decides a module's cubin.
pub(crate) struct Job {
    pub module: String,
    pub source: Source,
    pub arch: String,
    pub options: Vec<String>,
    pub text: String,
}

impl Job {
    /// The job for `module` on a device of architecture `arch` (`sm_90`;
    /// the module may ask for its arch-specific variant, see
    /// [`module_arch`]), or `UnknownKernel` when there is no CUDA source for it.
    pub(crate) fn new(module: &str, arch: &str) -> Result<Job> {
        let source = sources::cuda(module).ok_or_else(|| Error::UnknownKernel {
            module: module.into(),
            symbol: "*".into(),
            backend: Some(switchyard_core::BackendKind::Cuda.name().into()),
        })?;
        let target = arch_for(module, source_arch(source.text), arch)?;
        Ok(Job::from_source(module, source, &target))
    }

    /// The job for an explicit source (the catalogue's, or a test's).
    pub(crate) fn from_source(module: &str, source: Source, arch: &str) -> Job {
        let mut options = base_options(arch);
        options.extend(source_options(source.text));
        Job { module: module.into(), source, arch: arch.into(), options, text: program_text(&source) }
    }

    /// Cache key: source text, architecture, NVRTC version and options.
    fn key(&self, nvrtc: (i32, i32)) -> u128 {
        let mut h = Fnv128::new();
        for part in [CACHE_FORMAT, &self.arch, &format!("nvrtc {}.{}", nvrtc.0, nvrtc.1), &self.options.join(" "), &self.text] {
            h.write(part.as_bytes());
            h.write(&[0xff]);
        }
        h.finish()
    }

    /// Compiles with NVRTC. A compile error names the `.cu` file and carries
    /// NVRTC's log.
    pub(crate) fn compile(&self) -> Result<Vec<u8>> {
        self.compile_with_log().map(|(cubin, _)| cubin)
    }

    /// As [`Job::compile`], also returning NVRTC's log (warnings, and
    /// ptxas statistics when asked for with `--ptxas-options=-v`).
    pub(crate) fn compile_with_log(&self) -> Result<(Vec<u8>, String)> {
        let name = self.source.path.to_string();
        match raw::guarded("nvrtc", || raw::nvrtc_compile(&self.text, &name, &self.options))? {
            raw::Compiled::Cubin(cubin, log) => Ok((cubin, log)),
            raw::Compiled::Failed(code, log) => Err(Error::driver(
                switchyard_core::BackendKind::Cuda.name(),
                format!(
                    "NVRTC failed to compile {} (module `{}`, {}, options {}): {:?}\n{}",
                    self.source.path,
                    self.module,
                    self.arch,
                    self.options.join(" "),
                    code,
                    log.trim_end()
                ),
            )),
        }
    }
}

/// Compiles `module`'s CUDA source for a device of architecture `arch`
/// (e.g. `sm_90`; a module asking for `sm_90a` gets it, see
/// [`module_arch`]) with NVRTC and returns the cubin. Needs libnvrtc only (no GPU, no driver): the NVRTC
/// compile test uses it on machines without a GPU.
pub fn compile_module(module: &str, arch: &str) -> Result<Vec<u8>> {
    raw::load_nvrtc()?;
    Job::new(module, arch)?.compile()
}

/// Compiles `module` with `extra` NVRTC options appended and returns the
/// cubin with NVRTC's log (e.g. `--ptxas-options=-v` for register and
/// spill counts).
pub fn compile_module_with_log(module: &str, arch: &str, extra: &[&str]) -> Result<(Vec<u8>, String)> {
    raw::load_nvrtc()?;
    let mut job = Job::new(module, arch)?;
    job.options.extend(extra.iter().map(|s| s.to_string()));
    job.compile_with_log()
}

/// Compiles an arbitrary source (with the prelude prepended, as for the
/// catalogue's modules) for `arch`; errors name `source.path`.
pub fn compile_source(module: &str, source: Source, arch: &str) -> Result<Vec<u8>> {
    raw::load_nvrtc()?;
    Job::from_source(module, source, arch).compile()
}

/// NVRTC's version when libnvrtc can be loaded, else `Unavailable` with the reason.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    raw::load_nvrtc()?;
    raw::guarded("nvrtc", raw::nvrtc_version)
}

/// On-disk cubin cache. Entries are written atomically (temp file, rename);
/// an entry that is unreadable, truncated or fails its checksum is treated as
/// a miss and rewritten.
pub(crate) struct DiskCache {
    dir: Option<PathBuf>,
    nvrtc: (i32, i32),
}

impl DiskCache {
    pub(crate) fn new(nvrtc: (i32, i32)) -> DiskCache {
        DiskCache { dir: cache_dir(), nvrtc }
    }

    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn path(&self, job: &Job) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{}-{}-{:032x}.cubin", job.module, job.arch, job.key(self.nvrtc))))
    }

    /// The cached cubin for `job`, if a valid entry exists.
    pub(crate) fn get(&self, job: &Job) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.path(job)?).ok()?;
        decode_entry(&bytes)
    }

    /// Stores `cubin`; failures (read-only disk, full disk) only cost a recompile later.
    pub(crate) fn put(&self, job: &Job, cubin: &[u8]) {
        let (Some(dir), Some(path)) = (self.dir.as_ref(), self.path(job)) else { return };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, encode_entry(cubin)).is_ok() && std::fs::rename(&tmp, &path).is_ok() {
            return;
        }
        let _ = std::fs::remove_file(&tmp);
    }

    /// Deletes `job`'s entry (used when the driver rejects a cached image).
    pub(crate) fn evict(&self, job: &Job) {
        if let Some(p) = self.path(job) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `$SWITCHYARD_CUDA_CACHE`, else `$XDG_CACHE_HOME/switchyard/cuda`, else
/// `$HOME/.cache/switchyard/cuda`, else the system temp dir. `None` when the
/// variable is set but empty (cache disabled).
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(CACHE_ENV) {
        return if v.is_empty() { None } else { Some(PathBuf::from(v)) };
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    Some(base.join("switchyard").join(switchyard_core::BackendKind::Cuda.name()))
}

fn encode_entry(payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 24);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    v.extend_from_slice(&fnv64(payload).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn decode_entry(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < 24 || &bytes[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let payload = &bytes[24..];
    (payload.len() == len && len > 0 && fnv64(payload) == sum).then(|| payload.to_vec())
}

fn fnv64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a, 128-bit: stable across Rust releases (unlike `DefaultHasher`),
/// which a key persisted on disk needs.
struct Fnv128(u128);

impl Fnv128 {
    fn new() -> Self {
        Fnv128(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
    fn write(&mut self, data: &[u8]) {
        for &b in data {
            self.0 ^= b as u128;
            self.0 = self.0.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
    }
    fn finish(&self) -> u128 {
        self.0
    }
}

/// Whether `entry` matches a `// dependent-launch:` pattern.
pub(crate) fn is_dependent(patterns: &[String], entry: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => entry.starts_with(prefix),
        None => p == entry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_entries_come_from_their_source_lines() {
        // attn.cu: `// cluster-launch: x attention_decode_cl`.
        assert_eq!(cluster_axis("attn", "attention_decode_cl"), Some(0));
        assert_eq!(cluster_axis("attn", "attention_decode"), None);
        assert_eq!(cluster_axis("gemv", "dense_gemv_bf16"), None);
        assert_eq!(cluster_axis("no_such_module", "attention_decode_cl"), None);
    }

    #[test]
    fn only_the_weight_streaming_decode_entries_launch_as_dependents() {
        // A dependent that loads nothing before its wait only holds SM slots
        // (ARCHITECTURE.md, programmatic dependent launch). The split-K
        // reduce is one too (its launch overlaps the main pass's tail); its
        // `_serial` twin, the measurement override's plain launch, is not.
        let gemv = dependent_entries("gemv");
        for entry in [
            "dense_gemv_bf16",
            "dense_gemv_bf16_m1",
            "dense_gemv_gelu_mul_bf16_m1",
            "dense_gemv_layer_out_rmsnorm_bf16_x2",
            "dense_gemv_sandwich_gelu_mul_bf16_whole",
            "dense_gemv_bf16_reduce",
        ] {
            assert!(is_dependent(&gemv, entry), "{entry}");
        }
        assert!(!is_dependent(&gemv, "dense_gemv_bf16_reduce_serial"));
        assert!(is_dependent(&dependent_entries("w4a16"), "w4a16_gemm_decode"));
        // The MoE decode routing loads its router rows before the wait; the
        // gather and the combine prefetch their norm weights. The expert
        // GEMMs' weight rows come from the routing: plain launches.
        let moe = dependent_entries("moe_expert");
        for entry in ["moe_route_decode", "moe_route_decode_regs"] {
            assert!(is_dependent(&moe, entry), "{entry}");
        }
        for entry in ["moe_grouped_gemm_bf16", "moe_grouped_gemm_bf16_seg", "moe_gate_up_gelu_bf16", "moe_grouped_w4a16", "moe_router_topk"]
        {
            assert!(!is_dependent(&moe, entry), "{entry}");
        }
        let rows = dependent_entries("moe_rows");
        assert!(is_dependent(&rows, "moe_norm_gather_bf16") && is_dependent(&rows, "moe_combine_post_norms_bf16"));
        assert!(!is_dependent(&rows, "moe_combine_bf16"));
        for module in ["norm", "attn", "rope_kv", "head", "embed"] {
            assert_eq!(dependent_entries(module), Vec::<String>::new(), "{module}");
        }
    }

    #[test]
    fn entries_round_trip_and_reject_corruption() {
        let e = encode_entry(b"cubin bytes");
        assert_eq!(decode_entry(&e).as_deref(), Some(&b"cubin bytes"[..]));
        let mut bad = e.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(decode_entry(&bad), None, "flipped payload bit must fail the checksum");
        assert_eq!(decode_entry(&e[..e.len() - 1]), None, "truncated entry");
        assert_eq!(decode_entry(b"garbage"), None);
    }

    #[test]
    fn source_options_are_read_from_the_file() {
        let t = "// nvrtc-options: --fmad=false -DX=1\n__global__ void k() {}\n";
        assert_eq!(source_options(t), vec!["--fmad=false".to_string(), "-DX=1".to_string()]);
        assert!(source_options("// plain comment").is_empty());
    }

    #[test]
    fn arch_specific_modules_compile_for_their_variant_only() {
        assert_eq!(source_arch("// x\n// nvrtc-arch: sm_90a\n"), Some("sm_90a"));
        assert_eq!(source_arch("// nvrtc-options: -DX=1\n"), None);
        assert_eq!(arch_for("m", None, "sm_89").unwrap(), "sm_89");
        assert_eq!(arch_for("m", Some("sm_90a"), "sm_90").unwrap(), "sm_90a");
        assert!(matches!(arch_for("m", Some("sm_90a"), "sm_89"), Err(Error::Unsupported(_))));
        assert!(matches!(arch_for("m", Some("sm_90a"), "sm_100"), Err(Error::Unsupported(_))));
        assert_eq!(module_arch("gemm_sm90", "sm_90").unwrap(), "sm_90a");
        assert_eq!(module_arch("gemm", "sm_90").unwrap(), "sm_90");
    }

    #[test]
    fn keys_depend_on_arch_version_and_options() {
        let src = Source { path: "src/x/x.cu", text: "x" };
        let job =
            |arch: &str, opts: Vec<String>| Job { module: "x".into(), source: src, arch: arch.into(), options: opts, text: "t".into() };
        let a = job("sm_90", vec!["-a".into()]);
        assert_ne!(a.key((13, 0)), a.key((13, 1)));
        assert_ne!(a.key((13, 0)), job("sm_80", vec!["-a".into()]).key((13, 0)));
        assert_ne!(a.key((13, 0)), job("sm_90", vec!["-b".into()]).key((13, 0)));
        assert_eq!(a.key((13, 0)), job("sm_90", vec!["-a".into()]).key((13, 0)));
    }
}

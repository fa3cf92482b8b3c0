//! Compiles every CUDA module with NVRTC for sm_90 (the H200), without a
//! GPU: only libnvrtc is needed. Skips, saying why, where libnvrtc cannot be
//! loaded (put e.g. the nvidia-cuda-nvrtc wheel's lib directory on
//! LD_LIBRARY_PATH to run it).
use switchyard_core::{registry, ArgKind, BackendKind, Role};
use switchyard_kernels::sources;

mod common;

/// NVRTC's version, which the harness has found loadable.
fn nvrtc() -> (i32, i32) {
    switchyard_cuda::nvrtc_version().unwrap_or_else(|e| panic!("NVRTC: {e}"))
}

fn every_cuda_module_compiles_for_sm90() {
    let (major, minor) = nvrtc();
    println!("NVRTC {major}.{minor}");
    assert!(!sources::CUDA.is_empty(), "no CUDA sources listed in cuda_sources.in");
    let mut failures = Vec::new();
    for (module, src) in sources::CUDA {
        // SWITCHYARD_NVRTC_VERBOSE=1 prints ptxas' register / spill report per kernel.
        let extra: &[&str] = if std::env::var_os("SWITCHYARD_NVRTC_VERBOSE").is_some() { &["--ptxas-options=-v"] } else { &[] };
        // A module that asks for sm_90a (`// nvrtc-arch:`) is compiled for it.
        let arch = switchyard_cuda::compile::module_arch(module, "sm_90").unwrap_or_else(|e| panic!("{}: {e}", src.path));
        match switchyard_cuda::compile::compile_module_with_log(module, "sm_90", extra) {
            Ok((cubin, log)) => {
                assert!(cubin.starts_with(b"\x7fELF"), "{}: NVRTC output is not a cubin (ELF)", src.path);
                println!("{}: {} bytes of {arch} cubin", src.path, cubin.len());
                // Entries that take tensor maps live behind arch guards: make
                // sure the guard let them through on this target.
                for t in inventory::iter::<switchyard_kernels::plan::CudaTensorMaps>.into_iter().filter(|t| t.module == *module) {
                    assert!(
                        cubin.windows(t.entry.len()).any(|w| w == t.entry.as_bytes()),
                        "{}: no entry `{}` in the {arch} cubin",
                        src.path,
                        t.entry
                    );
                }
                if !log.trim().is_empty() {
                    println!("{log}");
                }
            }
            Err(e) => failures.push(format!("{e}")),
        }
    }
    assert!(failures.is_empty(), "NVRTC compile errors:\n{}", failures.join("\n\n"));
}

/// The parameter list of `extern "C" __global__ ... symbol(...)` in `text`.
fn entry_params<'a>(text: &'a str, symbol: &str) -> Option<Vec<&'a str>> {
    for (i, _) in text.match_indices(symbol) {
        let line_start = text[..i].rfind('\n').map_or(0, |p| p + 1);
        if !text[line_start..].starts_with("extern \"C\" __global__") || !text[i + symbol.len()..].starts_with('(') {
            continue;
        }
        let open = i + symbol.len() + 1;
        let close = open + text[open..].find(')')?;
        return Some(text[open..close].split(',').map(str::trim).collect());
    }
    None
}

/// The name in a C parameter declaration (`const bf16* __restrict__ x` -> `x`).
fn param_name(p: &str) -> &str {
    p.rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("")
}

fn every_registered_cuda_kernel_matches_its_declared_signature() {
    // Needs no NVRTC: compares each entry point's C parameter list with the
    // declaration (count, names, kinds, const-ness of input pointers), which
    // the driver cannot check at launch.
    let mut checked = 0;
    for sig in registry::kernels() {
        if !registry::implements(BackendKind::Cuda, sig) {
            continue;
        }
        let src = sources::cuda(sig.module)
            .unwrap_or_else(|| panic!("{}::{} registered on cuda but the module has no .cu", sig.module, sig.symbol));
        let params = entry_params(src.text, sig.symbol)
            .unwrap_or_else(|| panic!("{}: no extern \"C\" __global__ entry point `{}`", src.path, sig.symbol));
        // A plan's workspace arrives as one trailing pointer after the declared arguments.
        let params = match params.split_last() {
            Some((last, rest)) if params.len() == sig.args.len() + 1 && param_name(last) == "workspace" => {
                let ty = last[..last.len() - "workspace".len()].replace("__restrict__", "");
                assert!(
                    ty.trim().ends_with('*') && !ty.trim().starts_with("const "),
                    "{}: `{}`'s trailing workspace parameter must be a mutable pointer, is `{last}`",
                    src.path,
                    sig.symbol
                );
                rest.to_vec()
            }
            _ => params,
        };
        assert_eq!(
            params.len(),
            sig.args.len(),
            "{}: `{}` takes {:?}, declared ({}) [+ a trailing `workspace` pointer where its plan asks for workspace]",
            src.path,
            sig.symbol,
            params,
            sig.arg_names()
        );
        for (p, spec) in params.iter().zip(sig.args) {
            let name = param_name(p);
            assert_eq!(name, spec.name, "{}: `{}` parameter `{p}` where `{}` is declared", src.path, sig.symbol, spec.name);
            let ty = p[..p.len() - name.len()].replace("__restrict__", "");
            let ty = ty.trim();
            match spec.kind {
                ArgKind::Ptr => {
                    assert!(ty.ends_with('*'), "{}: `{}`.{} must be a pointer, is `{ty}`", src.path, sig.symbol, spec.name);
                    let is_const = ty.starts_with("const ");
                    assert_eq!(
                        is_const,
                        spec.role == Role::In,
                        "{}: `{}`.{}: const-ness `{ty}` disagrees with role {:?}",
                        src.path,
                        sig.symbol,
                        spec.name,
                        spec.role
                    );
                }
                ArgKind::I32 => assert_eq!(ty, "int", "{}: `{}`.{}", src.path, sig.symbol, spec.name),
                ArgKind::U32 => assert!(ty == "unsigned" || ty == "unsigned int", "{}: `{}`.{} is `{ty}`", src.path, sig.symbol, spec.name),
                ArgKind::F32 => assert_eq!(ty, "float", "{}: `{}`.{}", src.path, sig.symbol, spec.name),
            }
        }
        checked += 1;
    }
    assert!(checked >= 14, "only {checked} CUDA kernels registered");
}

fn a_compile_error_names_the_file_and_carries_the_log() {
    nvrtc();
    let err = switchyard_cuda::compile::compile_source(
        "broken",
        sources::Source { path: "src/broken/broken.cu", text: "extern \"C\" __global__ void k() { undefined_thing(); }" },
        "sm_90",
    )
    .expect_err("broken source must not compile");
    let msg = err.to_string();
    assert!(msg.contains("src/broken/broken.cu"), "{msg}");
    assert!(msg.contains("undefined_thing"), "log missing from: {msg}");
}

switchyard_test_harness::tests!(needs "nvrtc": every_cuda_module_compiles_for_sm90, a_compile_error_names_the_file_and_carries_the_log);
switchyard_test_harness::tests!(every_registered_cuda_kernel_matches_its_declared_signature);
switchyard_test_harness::main!(common::probe);

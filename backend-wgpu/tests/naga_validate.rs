//! Every WGSL source parses and validates with naga (no GPU needed), and
//! its uniform `Params` and storage bindings follow the signature.
use switchyard_core::{registry, ArgKind, BackendKind};
use switchyard_kernels::sources::{self, Source};
use switchyard_wgpu::shader;

#[test]
fn every_wgsl_source_validates() {
    let mut failures = Vec::new();
    for (sig, src) in sources::wgsl_all() {
        match shader::validate(&src) {
            Ok(module) => {
                if !module.entry_points.iter().any(|e| e.name == sig.symbol) {
                    failures.push(format!("{}: no entry point named `{}`", src.path, sig.symbol));
                }
            }
            Err(e) => failures.push(e),
        }
    }
    if let Err(e) = shader::validate(&shader::BYTECOPY) {
        failures.push(e);
    }
    assert!(failures.is_empty(), "WGSL errors:\n{}", failures.join("\n"));
}

#[test]
fn params_and_bindings_follow_the_signature() {
    let mut failures = Vec::new();
    for (sig, src) in sources::wgsl_all() {
        let module = shader::validate(&src).unwrap_or_else(|e| panic!("{e}"));
        let mut want: Vec<String> = sig.args.iter().map(|a| a.name.to_string()).collect();
        want.extend(["gx", "gy", "gz", "fold", "x0", "x1", "x2", "x3"].map(String::from));
        let mut storage = Vec::new();
        // Words of extra windows (a split pass binding a second window of a
        // table) follow the tail as w1, w2, ..., each with a storage binding
        // after the declared pointers.
        let mut extra_windows = 0;
        for (_, g) in module.global_variables.iter() {
            let Some(b) = &g.binding else { continue };
            match g.space {
                naga::AddressSpace::Uniform => {
                    let naga::TypeInner::Struct { members, .. } = &module.types[g.ty].inner else {
                        failures.push(format!("{}: binding 0 is not a struct", src.path));
                        continue;
                    };
                    let mut got: Vec<String> = members.iter().map(|m| m.name.clone().unwrap_or_default()).collect();
                    while got.len() > want.len() && got.last().is_some_and(|n| *n == format!("w{}", got.len() - want.len())) {
                        got.pop();
                        extra_windows += 1;
                    }
                    if got != want || b.binding != 0 {
                        failures.push(format!("{}: Params fields {got:?}, signature wants {want:?}", src.path));
                    }
                }
                naga::AddressSpace::Storage { .. } => storage.push((b.binding, g.name.clone().unwrap_or_default())),
                _ => {}
            }
        }
        storage.sort();
        let ptrs: Vec<&str> = sig.args.iter().filter(|a| a.kind == ArgKind::Ptr).map(|a| a.name).collect();
        for (k, name) in ptrs.iter().enumerate() {
            if !storage.iter().any(|(b, n)| *b == k as u32 + 1 && *n == format!("d_{name}")) {
                failures.push(format!("{}: pointer `{name}` must be `d_{name}` at @binding({})", src.path, k + 1));
            }
        }
        for k in 1..=extra_windows {
            if !storage.iter().any(|(b, _)| *b == (ptrs.len() + k) as u32) {
                failures.push(format!("{}: Params word w{k} without a storage binding at @binding({})", src.path, ptrs.len() + k));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_wgpu_kernel_has_a_source() {
    for k in registry::kernels() {
        if registry::implements(BackendKind::Wgpu, k) {
            assert!(sources::wgsl(k).is_some(), "{} registered on wgpu without WGSL", k.symbol);
        }
    }
    assert_eq!(registry::orphan_implementations(), Vec::<String>::new());
}

#[test]
fn a_broken_shader_names_its_line() {
    let src = Source {
        path: "inline/broken.wgsl",
        text: "@compute @workgroup_size(1)\nfn main() {\n    let x: u32 = 1u;\n    let y = x + undefined_thing;\n}\n",
    };
    let err = shader::validate(&src).unwrap_err();
    assert!(err.starts_with("inline/broken.wgsl:4:"), "{err}");
    assert!(err.contains("undefined_thing"), "{err}");

    // A type error caught by the validator rather than the parser.
    let src = Source {
        path: "inline/invalid.wgsl",
        text: "@group(0) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1)\nfn main() {\n\n    d[0] = bitcast<u32>(1.0) + 1.5;\n}\n",
    };
    let err = shader::validate(&src).unwrap_err();
    assert!(err.starts_with("inline/invalid.wgsl:5:"), "{err}");

    // An error inside an included fragment names the fragment's line.
    let src = Source { path: "inline/uses_core.wgsl", text: "// no Params here\n//! include \"gemm/w4a16_tile_core.wgsli\"\n" };
    let err = shader::validate(&src).unwrap_err();
    assert!(err.starts_with("src/gemm/w4a16_tile_core.wgsli:"), "{err}");

    // An unknown include names the including file and line.
    let src = Source { path: "inline/missing.wgsl", text: "\n\n//! include \"gemm/nope.wgsli\"\n" };
    let err = shader::validate(&src).unwrap_err();
    assert!(err.starts_with("inline/missing.wgsl:3: unknown include"), "{err}");
}

//! The `harness = false` test targets of the workspace (the suites run by
//! `switchyard-test-harness`) hold no `#[test]` function: without the built-in
//! harness such a function is compiled out and would never run, silently.
use std::path::{Path, PathBuf};

/// `(crate dir, target name)` of every `[[test]]` with `harness = false` in `manifest`.
fn harness_false_targets(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    for block in manifest.split("[[test]]").skip(1) {
        let block = block.split("\n[").next().unwrap_or("");
        let field = |key: &str| {
            block.lines().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        if field("harness").as_deref() == Some("false") {
            out.push(field("name").unwrap_or_else(|| panic!("[[test]] without a name:{block}")));
        }
    }
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn harness_false_targets_have_no_test_attribute() {
    let root = workspace();
    let members = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = members.split("members = [").nth(1).and_then(|s| s.split(']').next()).expect("workspace members");
    let mut checked = Vec::new();
    for m in members.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()) {
        let manifest = std::fs::read_to_string(root.join(m).join("Cargo.toml")).unwrap();
        for name in harness_false_targets(&manifest) {
            let file = root.join(m).join("tests").join(format!("{name}.rs"));
            let src = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert!(
                !src.contains("#[test]"),
                "{}: `#[test]` in a harness = false target never runs; register it with tests!/per_backend!",
                file.display()
            );
            assert!(src.contains("main!"), "{}: a harness = false target must end in the harness's main!", file.display());
            checked.push(format!("{m}/{name}"));
        }
    }
    // The GPU suites of the three crates that have them.
    for expect in ["tests/parity", "backend-wgpu/parity", "backend-cuda/gpu"] {
        assert!(checked.iter().any(|c| c == expect), "{expect} is not a harness = false target (found {checked:?})");
    }
}

#[test]
fn the_manifest_reader_finds_harness_false_targets() {
    let m = "[package]\nname = \"x\"\n\n[[test]]\nname = \"a\"\nharness = false\n\n[[test]]\nname = \"b\"\n\n[dev-dependencies]\nharness = false\n";
    assert_eq!(harness_false_targets(m), vec!["a".to_string()]);
}

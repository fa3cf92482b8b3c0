//! The README's coverage matrix is what `switchyard kernels` prints now, so
//! that a kernel added or dropped without regenerating it fails here.
use std::process::Command;

#[test]
fn readme_coverage_matrix_is_the_kernels_output() {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard")).arg("kernels").output().expect("running switchyard kernels");
    assert!(out.status.success(), "switchyard kernels failed: {}", String::from_utf8_lossy(&out.stderr));
    let matrix = String::from_utf8(out.stdout).expect("utf-8");
    assert!(matrix.contains("| module | kernel |") && matrix.contains(" kernels;"), "unexpected output:\n{matrix}");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    assert!(
        readme.contains(matrix.trim_end()),
        "README.md's coverage matrix differs from `cargo run -- kernels`; paste its output under \"Coverage matrix\":\n{matrix}"
    );
}

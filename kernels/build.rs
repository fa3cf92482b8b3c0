//! Finds the GPU sources in the family folders (`src/<family>/`), so that no
//! list restates them: every `<module>.cu` is a CUDA module and every
//! `<name>.wgsli` a WGSL fragment. (Each `.wgsl` is named by the
//! `wgsl_plan!` registration that uses it.)
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = Path::new(&manifest).join("src");
    println!("cargo:rerun-if-changed=src");
    let mut families: Vec<_> = std::fs::read_dir(&src).expect("kernels/src is readable").flatten().filter(|e| e.path().is_dir()).collect();
    families.sort_by_key(|e| e.file_name());
    let (mut cuda, mut frags) = (String::from("&[\n"), String::from("&[\n"));
    for fam in families {
        let fam_name = fam.file_name().to_string_lossy().into_owned();
        println!("cargo:rerun-if-changed=src/{fam_name}");
        let mut files: Vec<_> = std::fs::read_dir(fam.path()).expect("family folder is readable").flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let abs = f.display().to_string();
            let rel = format!("src/{fam_name}/{name}");
            if let Some(stem) = name.strip_suffix(".cu") {
                writeln!(cuda, "    ({stem:?}, Source {{ path: {rel:?}, text: include_str!({abs:?}) }}),").unwrap();
            } else if name.ends_with(".wgsli") {
                let key = format!("{fam_name}/{name}");
                writeln!(frags, "    ({key:?}, Source {{ path: {rel:?}, text: include_str!({abs:?}) }}),").unwrap();
            }
        }
    }
    cuda.push(']');
    frags.push(']');
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&out).join("cuda_sources.rs"), cuda).expect("OUT_DIR is writable");
    std::fs::write(Path::new(&out).join("wgsl_fragments.rs"), frags).expect("OUT_DIR is writable");
}

//! Pieces the CLI's integration tests share.
use std::path::PathBuf;

/// A scratch directory under the system temp dir, named by suite and tag
/// (and the process id, so parallel runs do not meet), removed when dropped.
pub struct Tmp(pub PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Tmp {
    /// A fresh, empty `switchyard-{suite}-{tag}-{pid}`.
    pub fn new(suite: &str, tag: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("switchyard-{suite}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }
}

//! `--model google/gemma-4-E4B-it`: a Hugging Face repo id found offline in
//! the local HF hub cache, where `huggingface-cli download` (or any HF
//! library) left it. Nothing is downloaded.
//!
//! The cache root is HF's: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
//! `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`. Inside
//! it, repo `org/name` lives in `models--org--name/`: `refs/<branch or tag>`
//! holds a commit hash, and `snapshots/<hash>/` holds the files (links
//! into `blobs/`).
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use switchyard_model::files;
use switchyard_model::text;

/// Where the cache root comes from: the environment, captured once (tests
/// build their own).
#[derive(Clone, Debug, Default)]
pub struct CacheEnv {
    /// `HF_HUB_CACHE`.
    pub hf_hub_cache: Option<PathBuf>,
    /// `HF_HOME`.
    pub hf_home: Option<PathBuf>,
    /// `XDG_CACHE_HOME`.
    pub xdg_cache_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
}

impl CacheEnv {
    /// The process environment (empty values count as unset, as HF treats them).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        CacheEnv { hf_hub_cache: var("HF_HUB_CACHE"), hf_home: var("HF_HOME"), xdg_cache_home: var("XDG_CACHE_HOME"), home: var("HOME") }
    }

    /// The hub cache root and the setting that chose it.
    pub fn hub_dir(&self) -> Option<(PathBuf, &'static str)> {
        if let Some(p) = &self.hf_hub_cache {
            return Some((p.clone(), "HF_HUB_CACHE"));
        }
        if let Some(p) = &self.hf_home {
            return Some((p.join("hub"), "HF_HOME/hub"));
        }
        if let Some(p) = &self.xdg_cache_home {
            return Some((p.join("huggingface/hub"), "XDG_CACHE_HOME/huggingface/hub"));
        }
        self.home.as_ref().map(|h| (h.join(".cache/huggingface/hub"), "~/.cache/huggingface/hub"))
    }
}

/// Whether `s` has the shape of a repo id: `org/name`, exactly one `/`,
/// each part of letters, digits, `-`, `_` and `.` and not starting with `.`.
pub fn looks_like_repo_id(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty() && !p.starts_with('.') && p.len() <= 96 && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match s.split_once('/') {
        Some((org, name)) => part(org) && part(name) && !name.contains('/'),
        None => false,
    }
}

/// Whether `rev` is a full commit hash (40 hex digits).
fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The snapshot directory of `repo` at `revision` (default `main`): a
/// commit hash is looked up in `snapshots/` directly, a branch or tag name
/// through `refs/`. The error names every path it tried.
pub fn resolve(repo: &str, revision: Option<&str>, env: &CacheEnv) -> Result<PathBuf> {
    let rev = revision.unwrap_or("main");
    if rev.is_empty() || rev.split('/').any(|p| p.is_empty() || p == "." || p == "..") || rev.starts_with('/') {
        bail!("--revision `{}`: not a branch, tag or commit name", text::clip(rev));
    }
    let Some((root, source)) = env.hub_dir() else {
        bail!(
            "--model {}: no Hugging Face cache to look in (none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set)",
            text::clip(repo)
        );
    };
    let folder = root.join(format!("models--{}", repo.replace('/', "--")));
    let mut tried = vec![folder.clone()];
    let hint = format!("download it with `huggingface-cli download {repo}`, or give --model a checkpoint directory");
    let fail = |tried: &[PathBuf], why: String| -> anyhow::Error {
        let list: Vec<String> = tried.iter().map(|p| format!("  {}", text::path(p))).collect();
        anyhow::anyhow!(
            "--model {}: not in the Hugging Face cache ({source} = {}): {why}; {hint}. Tried:\n{}",
            text::clip(repo),
            text::path(&root),
            list.join("\n")
        )
    };
    if !files::present(&folder)? {
        return Err(fail(&tried, "the repo was never downloaded".into()));
    }
    let commit = if is_commit(rev) {
        rev.to_string()
    } else {
        let r = folder.join("refs").join(rev);
        tried.push(r.clone());
        if !files::present(&r)? {
            return Err(fail(&tried, format!("no ref `{}`", text::clip(rev))));
        }
        let raw = files::read_capped(&r, "a ref file", 4096)?;
        let hash = String::from_utf8_lossy(&raw).trim().to_string();
        if !is_commit(&hash) {
            return Err(fail(&tried, format!("{} does not hold a commit hash", text::path(&r))));
        }
        hash
    };
    let snap = folder.join("snapshots").join(&commit);
    tried.push(snap.clone());
    if !files::present(&snap)? {
        return Err(fail(&tried, format!("no snapshot of commit {commit}")));
    }
    files::expect_dir(&snap, "a snapshot directory")?;
    let config = snap.join("config.json");
    if !files::present(&config)? {
        tried.push(config);
        return Err(fail(&tried, format!("snapshot {commit} has no config.json (an interrupted or partial download?)")));
    }
    Ok(snap)
}

/// What `--model` names: an existing path as it is, else a repo id resolved
/// in the cache, else the path (for the loader to report missing).
pub fn model_dir(arg: &Path, revision: Option<&str>, env: &CacheEnv) -> Result<PathBuf> {
    if files::present(arg)? {
        if revision.is_some() {
            bail!("--revision applies to a repo id in the Hugging Face cache, and --model {} is a path", text::path(arg));
        }
        return Ok(arg.to_path_buf());
    }
    match arg.to_str() {
        Some(s) if looks_like_repo_id(s) => resolve(s, revision, env),
        _ if revision.is_some() => bail!("--revision needs --model to be a repo id (org/name), not {}", text::path(arg)),
        _ => Ok(arg.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tmp(tag: &str) -> Tmp {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("switchyard-hfcache-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }

    const HASH: &str = "0123456789abcdef0123456789abcdef01234567";
    const HASH2: &str = "fedcba9876543210fedcba9876543210fedcba98";

    /// A cache tree as the hub library leaves it: blobs, snapshot links to
    /// them, refs/main with the hash (and a newline, as written).
    fn fake_cache(root: &Path, repo: &str) -> PathBuf {
        let folder = root.join(format!("models--{}", repo.replace('/', "--")));
        std::fs::create_dir_all(folder.join("blobs")).unwrap();
        std::fs::create_dir_all(folder.join("refs")).unwrap();
        std::fs::write(folder.join("refs/main"), format!("{HASH}\n")).unwrap();
        for h in [HASH, HASH2] {
            let snap = folder.join("snapshots").join(h);
            std::fs::create_dir_all(&snap).unwrap();
            let blob = folder.join("blobs").join(format!("blob-{h}"));
            std::fs::write(&blob, format!("{{\"which\": \"{h}\"}}")).unwrap();
            #[cfg(unix)]
            std::os::unix::fs::symlink(&blob, snap.join("config.json")).unwrap();
            #[cfg(not(unix))]
            std::fs::copy(&blob, snap.join("config.json")).unwrap();
        }
        folder
    }

    fn env_with_hub(p: &Path) -> CacheEnv {
        CacheEnv { hf_hub_cache: Some(p.to_path_buf()), ..Default::default() }
    }

    #[test]
    fn repo_ids_have_one_slash_and_safe_parts() {
        for ok in ["google/gemma-4-E4B-it", "a/b", "org_1/model.v2"] {
            assert!(looks_like_repo_id(ok), "{ok}");
        }
        for bad in ["gemma", "/abs/path", "a/b/c", "./x", "../x", "a/", "/b", "a/.hidden", "a b/c", "a/b\u{1b}"] {
            assert!(!looks_like_repo_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_cache_root_follows_hf_precedence() {
        let e = CacheEnv {
            hf_hub_cache: Some("/h".into()),
            hf_home: Some("/home-hf".into()),
            xdg_cache_home: Some("/x".into()),
            home: Some("/u".into()),
        };
        assert_eq!(e.hub_dir().unwrap().0, Path::new("/h"));
        let e = CacheEnv { hf_hub_cache: None, ..e };
        assert_eq!(e.hub_dir().unwrap().0, Path::new("/home-hf/hub"));
        let e = CacheEnv { hf_home: None, ..e };
        assert_eq!(e.hub_dir().unwrap().0, Path::new("/x/huggingface/hub"));
        let e = CacheEnv { xdg_cache_home: None, ..e };
        assert_eq!(e.hub_dir().unwrap().0, Path::new("/u/.cache/huggingface/hub"));
        assert!(CacheEnv::default().hub_dir().is_none());
    }

    #[test]
    fn main_resolves_through_refs_and_a_hash_directly() {
        let t = tmp("resolve");
        let folder = fake_cache(&t.0, "google/gemma-4-E4B-it");
        let env = env_with_hub(&t.0);
        let snap = resolve("google/gemma-4-E4B-it", None, &env).unwrap();
        assert_eq!(snap, folder.join("snapshots").join(HASH));
        // The link into blobs/ is followed like any file.
        assert!(std::fs::read_to_string(snap.join("config.json")).unwrap().contains(HASH));
        assert_eq!(resolve("google/gemma-4-E4B-it", Some(HASH2), &env).unwrap(), folder.join("snapshots").join(HASH2));
        // HF_HOME/hub is searched the same way.
        let home = tmp("home");
        fake_cache(&home.0.join("hub"), "a/b");
        let env = CacheEnv { hf_home: Some(home.0.clone()), ..Default::default() };
        assert!(resolve("a/b", None, &env).unwrap().ends_with(format!("snapshots/{HASH}")));
        // model_dir: an existing path wins, a repo id goes to the cache.
        assert_eq!(model_dir(&t.0, None, &env_with_hub(&t.0)).unwrap(), t.0);
        assert_eq!(model_dir(Path::new("google/gemma-4-E4B-it"), None, &env_with_hub(&t.0)).unwrap(), folder.join("snapshots").join(HASH));
    }

    #[test]
    fn misses_name_every_path_tried() {
        let t = tmp("miss");
        let env = env_with_hub(&t.0);
        let e = resolve("google/absent", None, &env).unwrap_err().to_string();
        assert!(e.contains("HF_HUB_CACHE") && e.contains("never downloaded") && e.contains("models--google--absent"), "{e}");
        assert!(e.contains("huggingface-cli download google/absent"), "{e}");
        let folder = fake_cache(&t.0, "o/m");
        let e = resolve("o/m", Some("v2"), &env).unwrap_err().to_string();
        assert!(e.contains("no ref `v2`") && e.contains(&text::path(&folder.join("refs/v2"))), "{e}");
        let missing = "1111111111111111111111111111111111111111";
        let e = resolve("o/m", Some(missing), &env).unwrap_err().to_string();
        assert!(
            e.contains(&format!("no snapshot of commit {missing}")) && e.contains(&text::path(&folder.join("snapshots").join(missing)))
        );
        // A ref pointing at a missing snapshot lists the ref and the snapshot.
        std::fs::write(folder.join("refs/main"), missing).unwrap();
        let e = resolve("o/m", None, &env).unwrap_err().to_string();
        assert!(
            e.contains(&text::path(&folder.join("refs/main"))) && e.contains(&text::path(&folder.join("snapshots").join(missing))),
            "{e}"
        );
        std::fs::write(folder.join("refs/main"), "not a hash").unwrap();
        assert!(resolve("o/m", None, &env).unwrap_err().to_string().contains("does not hold a commit hash"));
        // A snapshot without config.json is a partial download.
        std::fs::remove_file(folder.join("snapshots").join(HASH2).join("config.json")).unwrap();
        let e = resolve("o/m", Some(HASH2), &env).unwrap_err().to_string();
        assert!(e.contains("has no config.json"), "{e}");
        for bad in ["../x", "a//b", ""] {
            assert!(resolve("o/m", Some(bad), &env).unwrap_err().to_string().contains("--revision"), "{bad}");
        }
        assert!(resolve("o/m", None, &CacheEnv::default()).unwrap_err().to_string().contains("no Hugging Face cache"));
        // --revision with a plain path is refused.
        assert!(model_dir(&t.0, Some("main"), &env).unwrap_err().to_string().contains("--revision applies to a repo id"));
    }
}

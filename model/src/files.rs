//! Opening the files of a checkpoint directory, whatever the paths turn out
//! to be.
//!
//! A path the user hands over may name a FIFO (reading it waits forever for
//! a writer), a device (`/dev/zero` never ends), a directory, a socket, a
//! dangling link or a link loop. Each file is opened without blocking and
//! its type checked on the open descriptor (so a path swapped between check
//! and open cannot slip through), and anything but a regular file is refused
//! with what it really is. The small JSON files are read only up to a size
//! cap, because they are parsed into memory whole.
use crate::error::{Error, Result};
use crate::text;
use std::fs::{File, FileType, Metadata};
use std::io::Read;
use std::path::Path;

/// Environment variable that raises (or lowers) [`Limits::json_bytes`].
pub const JSON_LIMIT_ENV: &str = "SWITCHYARD_MAX_JSON_BYTES";

/// Default cap on a JSON file: far above any real config or shard index
/// (a 300,000-tensor index is ~20 MB), small enough to parse in memory.
pub const DEFAULT_JSON_BYTES: u64 = 256 << 20;

/// Caps on what the loader reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest `config.json` or `model.safetensors.index.json`, in bytes.
    pub json_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { json_bytes: DEFAULT_JSON_BYTES }
    }
}

impl Limits {
    /// The defaults, with [`JSON_LIMIT_ENV`] applied when it is set. A value
    /// that is not a positive byte count is an error rather than ignored:
    /// the user set it to get a different cap.
    pub fn from_env() -> Result<Self> {
        let Some(v) = std::env::var_os(JSON_LIMIT_ENV) else { return Ok(Limits::default()) };
        let bad = |why: &str| Error::Env { name: JSON_LIMIT_ENV.into(), reason: why.into() };
        let s = v.to_str().ok_or_else(|| bad("is not UTF-8"))?;
        match s.trim().parse::<u64>() {
            Ok(0) => Err(bad("must be at least 1 (a byte count)")),
            Ok(n) => Ok(Limits { json_bytes: n }),
            Err(_) => Err(bad(&format!("`{s}` is not a byte count (a positive integer)"))),
        }
    }
}

/// What a file type is, in words, for "is X, not a regular file".
pub fn describe(ft: &FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Turns a failed open or stat into what the path really is: a link that
/// points nowhere, a link loop, or something that is not a file.
fn explain(path: &Path, e: std::io::Error) -> Error {
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ELOOP) {
        return Error::file(path, "is a symbolic link loop (too many levels of symbolic links)");
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_symlink() && e.kind() == std::io::ErrorKind::NotFound {
            let to = std::fs::read_link(path).map(|t| text::path(&t)).unwrap_or_else(|_| "?".into());
            return Error::file(path, format!("is a symbolic link to `{to}`, which does not exist"));
        }
        if let Ok(m) = std::fs::metadata(path) {
            if !m.is_file() && !m.is_dir() {
                return Error::file(path, format!("is {}, not a regular file ({e})", describe(&m.file_type())));
            }
        }
    }
    Error::Io { path: path.to_path_buf(), source: e }
}

/// Whether something (of any type, a dangling link included) is at `path`.
/// Unlike `Path::exists`, a link loop or a permission error is an error, not
/// "absent": the caller then opens the path and says what is wrong with it.
pub fn present(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(explain(path, e)),
    }
}

/// Checks that `path` is a directory (following links).
pub fn expect_dir(path: &Path, what: &str) -> Result<()> {
    let m = std::fs::metadata(path).map_err(|e| explain(path, e))?;
    if m.is_dir() {
        Ok(())
    } else {
        Err(Error::file(path, format!("is {}, not {what}", describe(&m.file_type()))))
    }
}

/// Opens `path` for reading if, and only if, it is a regular file.
pub fn open_regular(path: &Path) -> Result<(File, Metadata)> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    // Non-blocking, so that opening a FIFO returns at once instead of
    // waiting for a writer; it changes nothing for a regular file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let f = o.open(path).map_err(|e| explain(path, e))?;
    let m = f.metadata().map_err(io(path))?;
    if !m.is_file() {
        return Err(Error::file(path, format!("is {}, not a regular file", describe(&m.file_type()))));
    }
    Ok((f, m))
}

/// Reads a regular file of at most `cap` bytes (`what` names it in the
/// message, e.g. "config.json").
pub fn read_capped(path: &Path, what: &str, cap: u64) -> Result<Vec<u8>> {
    let (f, m) = open_regular(path)?;
    let too_big = |n: u64| {
        Error::file(
            path,
            format!("is {n} bytes, over the {cap}-byte cap on {what} (set {JSON_LIMIT_ENV} to a larger byte count to raise it)"),
        )
    };
    if m.len() > cap {
        return Err(too_big(m.len()));
    }
    let mut v = Vec::new();
    let want = usize::try_from(m.len()).map_err(|_| too_big(m.len()))?;
    v.try_reserve_exact(want).map_err(|e| Error::file(path, format!("cannot hold its {want} bytes in memory ({e})")))?;
    // `take` bounds the read even if the file grows after the size check.
    f.take(cap.saturating_add(1)).read_to_end(&mut v).map_err(io(path))?;
    if v.len() as u64 > cap {
        return Err(too_big(v.len() as u64));
    }
    Ok(v)
}

/// Memory-maps a regular file read-only (an empty one maps to no bytes,
/// for the parser to refuse).
pub fn map(path: &Path) -> Result<memmap2::Mmap> {
    let (f, m) = open_regular(path)?;
    // SAFETY: the map is read-only; a checkpoint changed underneath a running
    // load is outside what any loader can defend against (as with HF's).
    unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::file(path, format!("cannot map its {} bytes into memory: {e}", m.len())))
}

/// A fresh directory under the system temp dir, removed on drop (unit tests).
#[cfg(test)]
pub(crate) mod test_dir {
    use std::path::PathBuf;

    pub(crate) struct Dir(pub PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn tmp(tag: &str) -> Dir {
        // Unique per call: tests in several modules may pick the same tag.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("switchyard-unit-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::files::test_dir::tmp;
    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let d = tmp("fifo");
        let p = d.0.join("config.json");
        mkfifo(&p);
        let t0 = std::time::Instant::now();
        let e = read_capped(&p, "config.json", 1 << 20).unwrap_err().to_string();
        assert!(e.contains("is a FIFO (named pipe), not a regular file"), "{e}");
        assert!(t0.elapsed().as_secs() < 5);
        assert!(map(&p).unwrap_err().to_string().contains("FIFO"));
    }

    #[test]
    fn devices_directories_and_links_say_what_they_are() {
        let e = read_capped(Path::new("/dev/zero"), "config.json", 1 << 20).unwrap_err().to_string();
        assert!(e.contains("/dev/zero: is a character device"), "{e}");
        let d = tmp("kinds");
        let e = map(&d.0).unwrap_err().to_string();
        assert!(e.contains("is a directory, not a regular file"), "{e}");
        let (a, b) = (d.0.join("a"), d.0.join("b"));
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let e = map(&a).unwrap_err().to_string();
        assert!(e.contains("symbolic link loop"), "{e}");
        assert!(present(&a).unwrap(), "a link loop is there, not absent");
        let dangling = d.0.join("dangling");
        std::os::unix::fs::symlink(d.0.join("nowhere"), &dangling).unwrap();
        let e = map(&dangling).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link to") && e.contains("which does not exist"), "{e}");
        let file = d.0.join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = expect_dir(&file, "a checkpoint directory").unwrap_err().to_string();
        assert!(e.contains("is a regular file, not a checkpoint directory"), "{e}");
        let e = map(&d.0.join("empty").with_extension("st")).unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
        std::fs::write(d.0.join("empty"), b"").unwrap();
        assert!(map(&d.0.join("empty")).unwrap().is_empty());
    }

    #[test]
    fn the_size_cap_holds_and_names_the_variable() {
        let d = tmp("cap");
        let p = d.0.join("config.json");
        std::fs::write(&p, vec![b' '; 4096]).unwrap();
        let e = read_capped(&p, "config.json", 4095).unwrap_err().to_string();
        assert!(e.contains("4096 bytes, over the 4095-byte cap on config.json") && e.contains(JSON_LIMIT_ENV), "{e}");
        assert_eq!(read_capped(&p, "config.json", 4096).unwrap().len(), 4096);
    }
}

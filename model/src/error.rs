//! The model crate's error type. Loading a checkpoint fails in ways a user can
//! act on (a config field, a tensor name and shape, a damaged file), so each
//! has its own variant and a message that names the culprit; kernel failures
//! keep the typed [`switchyard_core::Error`] underneath.
use std::fmt;
use std::path::PathBuf;

/// Result alias for the model crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything loading and running a model can report.
#[derive(Debug)]
pub enum Error {
    /// `config.json` is malformed, incomplete, or asks for a feature this
    /// graph does not implement. `field` is the JSON key (dotted for nested
    /// keys, e.g. `rope_parameters.full_attention.rope_type`).
    Config {
        /// The offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A path is not something the loader can read: a directory where a
    /// file belongs, a FIFO or device, a dangling link, a file over its size
    /// cap. `reason` says what the path really is.
    File {
        /// The path as the loader was given it.
        path: PathBuf,
        /// What it is, and why that will not do.
        reason: String,
    },
    /// A file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A safetensors file or the shard index is truncated or corrupt.
    Checkpoint {
        /// The file (or embedded blob) name.
        file: String,
        /// What the parser found.
        reason: String,
    },
    /// A tensor the graph needs is not in the checkpoint.
    MissingTensor {
        /// Name without the `model.` / `model.language_model.` prefix.
        name: String,
        /// The shape the graph expects.
        expected: Vec<usize>,
    },
    /// A tensor has the wrong shape.
    WrongShape {
        /// Tensor name as found in the checkpoint.
        name: String,
        /// The shape the graph expects.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor has a dtype the loader cannot convert to bf16.
    WrongDtype {
        /// Tensor name as found in the checkpoint.
        name: String,
        /// Its dtype.
        dtype: String,
    },
    /// An environment variable this crate reads has a value it cannot use.
    Env {
        /// The variable.
        name: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// The request itself is invalid (empty prompt, token id out of range, ...).
    Request(String),
    /// The computation produced something unusable (all-NaN logits).
    Numeric(String),
    /// A kernel launch or device operation failed.
    Kernel(switchyard_core::Error),
}

impl Error {
    /// Shorthand for [`Error::Config`].
    pub fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Config { field: field.into(), reason: reason.into() }
    }

    /// Shorthand for [`Error::Checkpoint`].
    pub fn checkpoint(file: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Checkpoint { file: file.into(), reason: reason.into() }
    }

    /// Shorthand for [`Error::File`].
    pub fn file(path: &std::path::Path, reason: impl Into<String>) -> Self {
        Error::File { path: path.to_path_buf(), reason: reason.into() }
    }

    /// The message before escaping.
    fn raw(&self, f: &mut dyn fmt::Write) -> fmt::Result {
        match self {
            Error::Config { field, reason } => write!(f, "config.json: field `{field}`: {reason}"),
            Error::File { path, reason } => write!(f, "{}: {reason}", path.display()),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Checkpoint { file, reason } => write!(f, "checkpoint {file}: {reason}"),
            Error::MissingTensor { name, expected } => {
                write!(f, "checkpoint: missing tensor `{name}` (expected shape {expected:?})")
            }
            Error::WrongShape { name, expected, found } => {
                write!(f, "checkpoint: tensor `{name}` has shape {found:?}, expected {expected:?}")
            }
            Error::WrongDtype { name, dtype } => {
                write!(f, "checkpoint: tensor `{name}` has dtype {dtype}; expected BF16, F16 or F32")
            }
            Error::Env { name, reason } => write!(f, "environment variable {name}: {reason}"),
            Error::Request(m) => write!(f, "invalid request: {m}"),
            Error::Numeric(m) => write!(f, "numeric failure: {m}"),
            Error::Kernel(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for Error {
    // Field names, values, tensor and file names in these messages come from
    // the checkpoint or the command line: escaped as a whole, so no variant
    // can forget to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.raw(&mut s)?;
        f.write_str(&crate::text::escape(&s))
    }
}

impl std::error::Error for Error {
    // The Display text already includes the underlying I/O or kernel error;
    // reporting it again as a source would print it twice in error chains.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        None
    }
}

impl From<switchyard_core::Error> for Error {
    fn from(e: switchyard_core::Error) -> Self {
        Error::Kernel(e)
    }
}

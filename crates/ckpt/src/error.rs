//! The crate's one error type: every variant names the file or field at fault and, where
//! there is one, what would fix it.

use std::path::PathBuf;

/// Everything that can go wrong while reading, mapping or writing a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CkptError {
    /// An operating-system I/O call failed on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a zip archive this reader accepts (only stored entries, as `torch.save` writes).
    #[error("zip archive: {0}")]
    Zip(String),
    /// The pickle stream is malformed, hostile or uses something this machine refuses.
    #[error("pickle stream, byte {pos}: {reason}")]
    Pickle {
        /// Offset of the offending opcode in the pickle stream.
        pos: usize,
        /// What was wrong.
        reason: String,
    },
    /// A safetensors file's header or data is inconsistent.
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// A reader error, with the file it happened in.
    #[error("{file}: {source}")]
    InFile {
        /// The file being parsed.
        file: PathBuf,
        /// What went wrong inside it.
        #[source]
        source: Box<CkptError>,
    },
    /// The checkpoint's content does not match what its format promises (missing key, wrong shape…).
    #[error("{file}: {reason}")]
    Format {
        /// The file or directory whose content is wrong.
        file: PathBuf,
        /// What is wrong and, where possible, what would fix it.
        reason: String,
    },
    /// The source directory is not a checkpoint format this crate recognises.
    #[error("{path}: cannot detect the checkpoint format: {reason}")]
    Detect {
        /// The directory that was inspected.
        path: PathBuf,
        /// What was looked for.
        reason: String,
    },
    /// A conversion option is invalid for this model.
    #[error("option `{field}`: {reason}")]
    Option {
        /// The option's name (as the CLI flag spells it).
        field: &'static str,
        /// Why the value does not fit and what would.
        reason: String,
    },
}

impl CkptError {
    /// Attaches the file being parsed to a reader error.
    pub fn in_file(self, file: impl Into<PathBuf>) -> CkptError {
        match self {
            CkptError::Io { .. } | CkptError::InFile { .. } | CkptError::Format { .. } => self,
            other => CkptError::InFile {
                file: file.into(),
                source: Box::new(other),
            },
        }
    }

    /// Builds a [`CkptError::Format`] error.
    pub fn format(file: impl Into<PathBuf>, reason: impl Into<String>) -> CkptError {
        CkptError::Format {
            file: file.into(),
            reason: reason.into(),
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = CkptError> = std::result::Result<T, E>;

/// Wraps an `std::io::Error` with the path it happened on.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CkptError {
    let path = path.into();
    move |source| CkptError::Io { path, source }
}

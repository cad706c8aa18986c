//! Bounded random access to bytes: a window on a file (read with positioned reads, never
//! loaded whole) or on an in-memory buffer (tests, fuzzing). Every read is bounds-checked.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{CkptError, Result, io_err};

#[derive(Debug)]
enum Backing {
    File { file: File, path: PathBuf },
    Bytes(Vec<u8>),
}

/// A cheap-to-clone window `[base, base+len)` on a file or buffer.
#[derive(Debug, Clone)]
pub struct Blob {
    backing: Arc<Backing>,
    base: u64,
    len: u64,
}

impl Blob {
    /// Opens a file for positioned reads (nothing is read yet).
    pub fn open(path: &Path) -> Result<Blob> {
        let file = File::open(path).map_err(io_err(path))?;
        let len = file.metadata().map_err(io_err(path))?.len();
        Ok(Blob {
            backing: Arc::new(Backing::File {
                file,
                path: path.to_path_buf(),
            }),
            base: 0,
            len,
        })
    }

    /// Wraps bytes already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Blob {
        let len = bytes.len() as u64;
        Blob {
            backing: Arc::new(Backing::Bytes(bytes)),
            base: 0,
            len,
        }
    }

    /// Length of the window in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file behind this window, for error messages (`<memory>` for buffers).
    pub fn path(&self) -> PathBuf {
        match &*self.backing {
            Backing::File { path, .. } => path.clone(),
            Backing::Bytes(_) => PathBuf::from("<memory>"),
        }
    }

    /// A sub-window `[off, off+len)` of this one; fails when it would reach past the end.
    pub fn slice(&self, off: u64, len: u64) -> Result<Blob> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(CkptError::format(
                self.path(),
                format!(
                    "range {off}+{len} reaches past the end ({} bytes); the file is truncated or corrupt",
                    self.len
                ),
            ));
        }
        Ok(Blob {
            backing: self.backing.clone(),
            base: self.base + off,
            len,
        })
    }

    /// Fills `buf` from offset `off` of the window; fails when the range is out of bounds.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64;
        if off.checked_add(n).is_none_or(|e| e > self.len) {
            return Err(CkptError::format(
                self.path(),
                format!(
                    "read of {n} bytes at {off} reaches past the end ({} bytes); the file is truncated or corrupt",
                    self.len
                ),
            ));
        }
        let abs = self.base + off;
        match &*self.backing {
            Backing::File { file, path } => file.read_exact_at(buf, abs).map_err(io_err(path)),
            Backing::Bytes(b) => {
                let s = abs as usize;
                buf.copy_from_slice(&b[s..s + buf.len()]);
                Ok(())
            }
        }
    }

    /// Reads `[off, off+len)` into a new buffer (callers bound `len` by what the input justifies).
    pub fn read_vec(&self, off: u64, len: u64) -> Result<Vec<u8>> {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(CkptError::format(
                self.path(),
                format!(
                    "read of {len} bytes at {off} reaches past the end ({} bytes); the file is truncated or corrupt",
                    self.len
                ),
            ));
        }
        let mut v = vec![0u8; len as usize];
        self.read_at(off, &mut v)?;
        Ok(v)
    }

    /// Reads the whole window (only for small entries such as a pickle).
    pub fn read_all(&self) -> Result<Vec<u8>> {
        self.read_vec(0, self.len)
    }
}

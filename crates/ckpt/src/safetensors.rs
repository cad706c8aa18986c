//! safetensors: a bounded header reader (tensors are read later with positioned reads) and
//! a streaming writer that emits the header first and then each tensor in order, so a
//! shard is never held in memory.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};

use crate::blob::Blob;
use crate::dtype::DType;
use crate::error::{CkptError, Result, io_err};

/// Largest header accepted (the format's own limit is 100 MB).
pub const MAX_HEADER: u64 = 100 * 1024 * 1024;

/// One tensor's entry in a safetensors header.
#[derive(Debug, Clone)]
pub struct StEntry {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Window on its bytes.
    data: Blob,
}

impl StEntry {
    /// Reads `len` bytes at byte offset `off` of the tensor.
    pub fn read_at(&self, off: u64, out: &mut [u8]) -> Result<()> {
        self.data.read_at(off, out)
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.data.len()
    }

    /// Reads the whole tensor.
    pub fn read_all(&self) -> Result<Vec<u8>> {
        self.data.read_all()
    }
}

/// An opened safetensors file: its entries and `__metadata__`.
#[derive(Debug, Clone)]
pub struct StFile {
    /// Tensors in header order.
    pub entries: Vec<StEntry>,
    /// The free-form string metadata.
    pub metadata: BTreeMap<String, String>,
}

impl StFile {
    /// Opens a file and validates its header against the file size.
    pub fn open(path: &Path) -> Result<StFile> {
        StFile::from_blob(Blob::open(path)?).map_err(|e| e.in_file(path))
    }

    /// Parses a safetensors image from a window.
    pub fn from_blob(blob: Blob) -> Result<StFile> {
        let bad = |m: String| CkptError::Safetensors(m);
        if blob.len() < 8 {
            return Err(bad("shorter than the 8-byte header length".into()));
        }
        let mut n = [0u8; 8];
        blob.read_at(0, &mut n)?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || n > blob.len() - 8 {
            return Err(bad(format!(
                "header length {n} exceeds the file ({} bytes) or the 100 MB limit",
                blob.len()
            )));
        }
        let header = blob.read_vec(8, n)?;
        let json: Map<String, Json> = serde_json::from_slice(&header)
            .map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
        let data_start = 8 + n;
        let data_len = blob.len() - data_start;
        let mut entries = Vec::new();
        let mut metadata = BTreeMap::new();
        for (name, v) in json {
            if name == "__metadata__" {
                if let Some(m) = v.as_object() {
                    for (k, x) in m {
                        if let Some(s) = x.as_str() {
                            metadata.insert(k.clone(), s.to_string());
                        }
                    }
                }
                continue;
            }
            let dtype = v
                .get("dtype")
                .and_then(Json::as_str)
                .and_then(DType::from_safetensors)
                .ok_or_else(|| bad(format!("`{name}`: missing or unsupported dtype")))?;
            let shape: Vec<usize> = v
                .get("shape")
                .and_then(Json::as_array)
                .and_then(|a| {
                    a.iter()
                        .map(|x| x.as_u64().and_then(|u| usize::try_from(u).ok()))
                        .collect()
                })
                .ok_or_else(|| bad(format!("`{name}`: missing or invalid shape")))?;
            let offs: Vec<u64> = v
                .get("data_offsets")
                .and_then(Json::as_array)
                .and_then(|a| a.iter().map(Json::as_u64).collect())
                .filter(|o: &Vec<u64>| o.len() == 2)
                .ok_or_else(|| bad(format!("`{name}`: missing data_offsets")))?;
            let (b, e) = (offs[0], offs[1]);
            let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
            let want = numel.and_then(|x| x.checked_mul(dtype.size() as u64));
            if b > e || e > data_len || want != Some(e - b) {
                return Err(bad(format!(
                    "`{name}`: data_offsets [{b}, {e}) do not fit shape {shape:?} or the file"
                )));
            }
            entries.push(StEntry {
                name,
                dtype,
                shape,
                data: blob.slice(data_start + b, e - b)?,
            });
        }
        Ok(StFile { entries, metadata })
    }

    /// Finds a tensor by name.
    pub fn get(&self, name: &str) -> Option<&StEntry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// Writes one safetensors file tensor by tensor, in the order declared up front.
pub struct StWriter {
    out: BufWriter<File>,
    path: PathBuf,
    plan: Vec<(String, usize)>,
    next: usize,
}

impl StWriter {
    /// Creates `path` and writes the header for `tensors` (name, dtype, shape) in that order.
    pub fn create(
        path: &Path,
        tensors: &[(String, DType, Vec<usize>)],
        metadata: &BTreeMap<String, String>,
    ) -> Result<StWriter> {
        let mut header = Map::new();
        if !metadata.is_empty() {
            header.insert(
                "__metadata__".into(),
                serde_json::to_value(metadata).unwrap_or(Json::Null),
            );
        }
        let mut off = 0usize;
        let mut plan = Vec::new();
        for (name, dtype, shape) in tensors {
            let n = shape.iter().product::<usize>() * dtype.size();
            let mut m = Map::new();
            m.insert("dtype".into(), Json::from(dtype.safetensors_name()));
            m.insert("shape".into(), Json::from(shape.clone()));
            m.insert("data_offsets".into(), Json::from(vec![off, off + n]));
            header.insert(name.clone(), Json::Object(m));
            plan.push((name.clone(), n));
            off += n;
        }
        let mut h =
            serde_json::to_vec(&header).map_err(|e| CkptError::Safetensors(e.to_string()))?;
        while h.len() % 8 != 0 {
            h.push(b' ');
        }
        let f = File::create(path).map_err(io_err(path))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        out.write_all(&(h.len() as u64).to_le_bytes())
            .map_err(io_err(path))?;
        out.write_all(&h).map_err(io_err(path))?;
        Ok(StWriter {
            out,
            path: path.to_path_buf(),
            plan,
            next: 0,
        })
    }

    /// Writes the next tensor's bytes; its name and size must match the declared order.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let Some((want, n)) = self.plan.get(self.next) else {
            return Err(CkptError::Safetensors(format!(
                "{}: `{name}` written after the last declared tensor",
                self.path.display()
            )));
        };
        if want != name || *n != bytes.len() {
            return Err(CkptError::Safetensors(format!(
                "{}: expected `{want}` ({n} bytes) next, got `{name}` ({} bytes)",
                self.path.display(),
                bytes.len()
            )));
        }
        self.out.write_all(bytes).map_err(io_err(&self.path))?;
        self.next += 1;
        Ok(())
    }

    /// Flushes the file; fails if a declared tensor was not written.
    pub fn finish(mut self) -> Result<()> {
        if self.next != self.plan.len() {
            return Err(CkptError::Safetensors(format!(
                "{}: {} of {} tensors written",
                self.path.display(),
                self.next,
                self.plan.len()
            )));
        }
        self.out.flush().map_err(io_err(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.safetensors");
        let t = vec![
            ("x".to_string(), DType::F32, vec![2, 2]),
            ("y".to_string(), DType::U8, vec![3]),
        ];
        let mut w =
            StWriter::create(&p, &t, &BTreeMap::from([("format".into(), "pt".into())])).unwrap();
        assert!(w.write("y", &[1, 2, 3]).is_err(), "out of order must fail");
        w.write("x", &[0u8; 16]).unwrap();
        w.write("y", &[1, 2, 3]).unwrap();
        w.finish().unwrap();
        let f = StFile::open(&p).unwrap();
        assert_eq!(f.get("y").unwrap().read_all().unwrap(), vec![1, 2, 3]);
        assert_eq!(f.get("x").unwrap().shape, vec![2, 2]);
        assert_eq!(f.metadata["format"], "pt");
    }

    #[test]
    fn rejects_offsets_past_the_end() {
        let h = br#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(h);
        b.extend_from_slice(&[0u8; 8]);
        assert!(StFile::from_blob(Blob::from_bytes(b)).is_err());
    }
}

//! `torch.save` archives: the zip container plus its `data.pkl`, with tensors resolved to
//! bounded windows on their storages. Tensor bytes are read on request with positioned
//! reads, straight into the caller's buffer when the view is contiguous.

use std::path::Path;

use crate::blob::Blob;
use crate::dtype::DType;
use crate::error::{CkptError, Result};
use crate::pickle::{self, Pickle, TensorRef, Value};
use crate::zip::ZipArchive;

/// Largest number of dimensions accepted for a tensor.
pub const MAX_DIMS: usize = 16;

/// An opened `torch.save` archive with its pickle parsed (tensor data not read).
#[derive(Debug, Clone)]
pub struct TorchFile {
    zip: ZipArchive,
    prefix: String,
    /// The parsed `data.pkl`.
    pub pickle: Pickle,
    blob: Blob,
}

/// A tensor checked against its storage: element type, shape, and where its elements live.
#[derive(Debug, Clone)]
pub struct TensorView {
    /// Element type.
    pub dtype: DType,
    /// Logical shape.
    pub shape: Vec<usize>,
    stride: Vec<u64>,
    offset: u64,
    data: Blob,
}

impl TorchFile {
    /// Opens a `torch.save` file from disk.
    pub fn open(path: &Path) -> Result<TorchFile> {
        let blob = Blob::open(path)?;
        TorchFile::from_blob(blob).map_err(|e| e.in_file(path))
    }

    /// Opens a `torch.save` archive held in a window (a file, a DCP item, or memory).
    pub fn from_blob(blob: Blob) -> Result<TorchFile> {
        let zip = ZipArchive::open(blob.clone())?;
        let pkl = zip
            .entries()
            .iter()
            .find(|e| e.name.ends_with("data.pkl") && e.name.matches('/').count() == 1)
            .ok_or_else(|| {
                CkptError::Zip("no `<archive>/data.pkl` entry; not a torch.save file".into())
            })?
            .clone();
        let prefix = pkl.name[..pkl.name.len() - "data.pkl".len()].to_string();
        let bytes = zip.data(&pkl)?.read_all()?;
        let pickle = pickle::parse(&bytes)?;
        Ok(TorchFile {
            zip,
            prefix,
            pickle,
            blob,
        })
    }

    /// The pickled root object.
    pub fn root(&self) -> &Value {
        &self.pickle.root
    }

    /// The file this archive lives in (for messages).
    pub fn path(&self) -> std::path::PathBuf {
        self.blob.path()
    }

    /// Resolves a tensor reference to a view on its storage, checking every index is in bounds.
    pub fn view(&self, t: &TensorRef) -> Result<TensorView> {
        let dtype = DType::from_torch_storage(&t.storage.type_name).ok_or_else(|| {
            CkptError::Zip(format!(
                "storage type `{}` is not supported",
                t.storage.type_name
            ))
        })?;
        if t.shape.len() > MAX_DIMS {
            return Err(CkptError::Zip(format!(
                "tensor with {} dimensions (max {MAX_DIMS})",
                t.shape.len()
            )));
        }
        let entry = format!("{}data/{}", self.prefix, t.storage.key);
        let data = self.zip.data_by_name(&entry)?;
        let es = dtype.size() as u64;
        let storage_bytes = t
            .storage
            .numel
            .checked_mul(es)
            .ok_or_else(|| CkptError::Zip("storage size overflows".into()))?;
        if storage_bytes > data.len() {
            return Err(CkptError::Zip(format!(
                "storage `{}` declares {} elements ({storage_bytes} bytes) but its entry holds {} bytes",
                t.storage.key,
                t.storage.numel,
                data.len()
            )));
        }
        let mut numel: u64 = 1;
        let mut reach: u64 = t.offset;
        for (&d, &s) in t.shape.iter().zip(&t.stride) {
            numel = numel
                .checked_mul(d)
                .ok_or_else(|| CkptError::Zip("tensor size overflows".into()))?;
            if d > 0 {
                reach = (d - 1)
                    .checked_mul(s)
                    .and_then(|x| x.checked_add(reach))
                    .ok_or_else(|| CkptError::Zip("tensor extent overflows".into()))?;
            }
        }
        if numel > t.storage.numel {
            return Err(CkptError::Zip(format!(
                "tensor of {numel} elements views a {}-element storage (broadcast views are not supported)",
                t.storage.numel
            )));
        }
        if numel > 0 && reach >= t.storage.numel {
            return Err(CkptError::Zip(format!(
                "tensor view (offset {}, shape {:?}, stride {:?}) reaches element {reach} of a {}-element storage",
                t.offset, t.shape, t.stride, t.storage.numel
            )));
        }
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| CkptError::Zip("dimension too large".into()))?;
        Ok(TensorView {
            dtype,
            shape,
            stride: t.stride.clone(),
            offset: t.offset,
            data,
        })
    }

    /// Finds and resolves the tensor held by a pickled value.
    pub fn tensor_of(&self, v: &Value) -> Option<Result<TensorView>> {
        self.pickle.tensor(v).map(|t| self.view(t))
    }
}

impl TensorView {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size in bytes of the (contiguous) tensor.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    fn contiguous(&self) -> bool {
        let mut expect = 1u64;
        for (&d, &s) in self.shape.iter().zip(&self.stride).rev() {
            if d != 1 && s != expect {
                return false;
            }
            expect *= d as u64;
        }
        true
    }

    /// Copies logical (row-major) elements `[start, start + out.len()/esize)` into `out`.
    pub fn read_flat(&self, start: usize, out: &mut [u8]) -> Result<()> {
        let es = self.dtype.size();
        if !out.len().is_multiple_of(es) || start + out.len() / es > self.numel() {
            return Err(CkptError::Zip(format!(
                "read of {} bytes at element {start} is outside a tensor of shape {:?}",
                out.len(),
                self.shape
            )));
        }
        if self.contiguous() {
            return self
                .data
                .read_at((self.offset + start as u64) * es as u64, out);
        }
        // General strided view: copy the longest contiguous inner run at a time.
        let nd = self.shape.len();
        let mut run = 1usize;
        let mut k = nd;
        while k > 0 && self.stride[k - 1] == run as u64 {
            run *= self.shape[k - 1];
            k -= 1;
        }
        let run = run.max(1);
        let count = out.len() / es;
        let mut i = 0;
        while i < count {
            let flat = start + i;
            let within = flat % run;
            let n = (run - within).min(count - i);
            // storage index of element `flat`
            let mut rem = flat;
            let mut idx = self.offset;
            for d in (0..nd).rev() {
                let dim = self.shape[d].max(1);
                idx += (rem % dim) as u64 * self.stride[d];
                rem /= dim;
            }
            self.data
                .read_at(idx * es as u64, &mut out[i * es..(i + n) * es])?;
            i += n;
        }
        Ok(())
    }

    /// Reads the whole tensor into a new contiguous buffer.
    pub fn read_all(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.nbytes()];
        self.read_flat(0, &mut v)?;
        Ok(v)
    }
}

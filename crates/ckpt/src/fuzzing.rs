//! Entry points shared by the `cargo fuzz` targets (`fuzz/`) and the hostile-input tests:
//! each takes arbitrary bytes, drives one reader end to end, and must return — `Ok` or
//! `Err` — without panicking, hanging or allocating more than the input justifies.

use crate::blob::Blob;
use crate::error::Result;
use crate::pickle;
use crate::safetensors::StFile;
use crate::torch::TorchFile;
use crate::zip::ZipArchive;

/// Parses a zip archive and touches up to 4 KiB of every entry's data.
pub fn zip(data: &[u8]) -> Result<usize> {
    let z = ZipArchive::open(Blob::from_bytes(data.to_vec()))?;
    let mut n = 0;
    for e in z.entries() {
        let d = z.data(e)?;
        let take = d.len().min(4096);
        n += d.read_vec(0, take)?.len();
    }
    Ok(n)
}

/// Runs the pickle machine and walks the result as a state dict would be walked.
pub fn pickle(data: &[u8]) -> Result<usize> {
    let p = pickle::parse(data)?;
    let mut flat = Vec::new();
    p.flatten_dict(&p.root, "", &mut flat);
    Ok(flat.len() + p.objs.len())
}

/// Opens a `torch.save` archive, resolves every tensor it holds and reads it.
pub fn torch(data: &[u8]) -> Result<usize> {
    let tf = TorchFile::from_blob(Blob::from_bytes(data.to_vec()))?;
    let mut n = 0;
    for o in &tf.pickle.objs {
        if let pickle::Obj::Tensor(t) = o {
            let v = tf.view(t)?;
            n += v.read_all()?.len();
        }
    }
    Ok(n)
}

/// Parses a safetensors image and reads every tensor.
pub fn safetensors(data: &[u8]) -> Result<usize> {
    let f = StFile::from_blob(Blob::from_bytes(data.to_vec()))?;
    let mut n = 0;
    for e in &f.entries {
        n += e.read_all()?.len();
    }
    Ok(n)
}

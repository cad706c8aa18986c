//! Writing `torch.save`-compatible files: a small protocol-2 pickle emitter and the archive
//! layout torch uses (`<name>/data.pkl`, `<name>/data/<key>` storages aligned to 64 bytes,
//! `byteorder`, `version`). Storages are added one at a time, so only one is in memory.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Result, io_err};
use crate::zip::ZipWriter;

/// Emits pickle opcodes (protocol 2) into a buffer; callers build values bottom-up.
#[derive(Debug, Default)]
pub struct PickleWriter {
    buf: Vec<u8>,
}

impl PickleWriter {
    /// Starts a protocol-2 stream.
    pub fn new() -> PickleWriter {
        PickleWriter { buf: vec![0x80, 2] }
    }
    /// `None`.
    pub fn none(&mut self) {
        self.buf.push(b'N');
    }
    /// A bool.
    pub fn bool(&mut self, b: bool) {
        self.buf.push(if b { 0x88 } else { 0x89 });
    }
    /// An int, in the smallest opcode that holds it.
    pub fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.buf.extend([b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.buf.push(b'M');
            self.buf.extend((v as u16).to_le_bytes());
        } else if i32::try_from(v).is_ok() {
            self.buf.push(b'J');
            self.buf.extend((v as i32).to_le_bytes());
        } else {
            self.buf.extend([0x8a, 8]);
            self.buf.extend(v.to_le_bytes());
        }
    }
    /// A float.
    pub fn float(&mut self, f: f64) {
        self.buf.push(b'G');
        self.buf.extend(f.to_be_bytes());
    }
    /// A str.
    pub fn str(&mut self, s: &str) {
        self.buf.push(b'X');
        self.buf.extend((s.len() as u32).to_le_bytes());
        self.buf.extend(s.as_bytes());
    }
    /// A global reference `module.name`.
    pub fn global(&mut self, module: &str, name: &str) {
        self.buf.push(b'c');
        self.buf.extend(module.as_bytes());
        self.buf.push(b'\n');
        self.buf.extend(name.as_bytes());
        self.buf.push(b'\n');
    }
    /// MARK.
    pub fn mark(&mut self) {
        self.buf.push(b'(');
    }
    /// TUPLE from the last MARK.
    pub fn tuple(&mut self) {
        self.buf.push(b't');
    }
    /// `()`.
    pub fn empty_tuple(&mut self) {
        self.buf.push(b')');
    }
    /// `{}`.
    pub fn empty_dict(&mut self) {
        self.buf.push(b'}');
    }
    /// SETITEMS from the last MARK into the dict below it.
    pub fn setitems(&mut self) {
        self.buf.push(b'u');
    }
    /// REDUCE: call the callable below the args tuple.
    pub fn reduce(&mut self) {
        self.buf.push(b'R');
    }
    /// NEWOBJ: `cls.__new__(cls, *args)`.
    pub fn newobj(&mut self) {
        self.buf.push(0x81);
    }
    /// BUILD: set state on the object below.
    pub fn build(&mut self) {
        self.buf.push(b'b');
    }
    /// A tuple of ints (sizes, strides).
    pub fn int_tuple(&mut self, v: &[usize]) {
        self.mark();
        for &x in v {
            self.int(x as i64);
        }
        self.tuple();
    }
    /// `collections.OrderedDict()`, left on the stack for SETITEMS.
    pub fn ordered_dict(&mut self) {
        self.global("collections", "OrderedDict");
        self.empty_tuple();
        self.reduce();
    }
    /// A contiguous tensor over storage `key` (persistent id), as `torch.save` pickles it.
    pub fn tensor(&mut self, key: &str, dtype: DType, shape: &[usize]) {
        let numel: usize = shape.iter().product();
        let mut stride = vec![1usize; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1] * shape[i + 1];
        }
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.mark();
        self.mark();
        self.str("storage");
        self.global("torch", dtype.torch_storage());
        self.str(key);
        self.str("cpu");
        self.int(numel as i64);
        self.tuple();
        self.buf.push(b'Q');
        self.int(0);
        self.int_tuple(shape);
        self.int_tuple(&stride);
        self.bool(false);
        self.ordered_dict();
        self.tuple();
        self.reduce();
    }
    /// STOP and return the stream.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(b'.');
        self.buf
    }
}

/// A `torch.save` archive being written storage by storage.
pub struct TorchSaveWriter {
    zip: ZipWriter<BufWriter<File>>,
    prefix: String,
    path: PathBuf,
}

impl TorchSaveWriter {
    /// Creates `path`, writing the pickle (`data.pkl`) and torch's format records first.
    pub fn create(path: &Path, archive: &str, pickle: &[u8]) -> Result<TorchSaveWriter> {
        let f = File::create(path).map_err(io_err(path))?;
        let mut zip = ZipWriter::new(BufWriter::with_capacity(1 << 20, f));
        let prefix = format!("{archive}/");
        let e = io_err(path);
        zip.add(&format!("{prefix}data.pkl"), pickle)
            .and_then(|_| zip.add(&format!("{prefix}.format_version"), b"1"))
            .and_then(|_| zip.add(&format!("{prefix}.storage_alignment"), b"64"))
            .and_then(|_| zip.add(&format!("{prefix}byteorder"), b"little"))
            .map_err(e)?;
        Ok(TorchSaveWriter {
            zip,
            prefix,
            path: path.to_path_buf(),
        })
    }

    /// Adds storage `key`'s bytes.
    pub fn storage(&mut self, key: &str, bytes: &[u8]) -> Result<()> {
        self.zip
            .add(&format!("{}data/{key}", self.prefix), bytes)
            .map_err(io_err(&self.path))
    }

    /// Writes the trailing records and the central directory.
    pub fn finish(mut self) -> Result<()> {
        let e = io_err(&self.path);
        self.zip
            .add(&format!("{}version", self.prefix), b"3\n")
            .map_err(io_err(&self.path))?;
        self.zip.finish().map_err(e)?;
        Ok(())
    }
}

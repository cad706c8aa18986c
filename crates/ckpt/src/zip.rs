//! The zip container `torch.save` writes: stored (uncompressed) entries, data aligned to 64
//! bytes, ZIP64 when large. The reader parses only the central directory and each entry's
//! local header on demand, and hands back windows on the entry data; it never inflates and
//! never reads an entry it is not asked for. The writer streams entries to any `Write`.

use std::io::Write;

use crate::blob::Blob;
use crate::error::{CkptError, Result};

const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_LEN: usize = 46;
const LOCAL_LEN: u64 = 30;

fn zerr(msg: impl Into<String>) -> CkptError {
    CkptError::Zip(msg.into())
}

fn u16_at(b: &[u8], i: usize) -> Result<u16> {
    b.get(i..i + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| zerr("record cut short"))
}

fn u32_at(b: &[u8], i: usize) -> Result<u32> {
    b.get(i..i + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| zerr("record cut short"))
}

fn u64_at(b: &[u8], i: usize) -> Result<u64> {
    b.get(i..i + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
        .ok_or_else(|| zerr("record cut short"))
}

/// One entry of the central directory.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    /// Path inside the archive.
    pub name: String,
    /// Uncompressed (= stored) size in bytes.
    pub size: u64,
    /// Offset of the entry's local header in the archive.
    local_offset: u64,
}

/// A parsed central directory over a window of bytes.
#[derive(Debug, Clone)]
pub struct ZipArchive {
    blob: Blob,
    entries: Vec<ZipEntry>,
}

impl ZipArchive {
    /// Parses the end record and central directory of the archive in `blob`.
    pub fn open(blob: Blob) -> Result<ZipArchive> {
        let len = blob.len();
        if len < 22 {
            return Err(zerr(format!(
                "{len} bytes is too short for a zip archive (end record is 22 bytes)"
            )));
        }
        let tail_len = len.min(22 + 65535);
        let tail = blob.read_vec(len - tail_len, tail_len)?;
        let mut eocd = None;
        let mut i = tail.len() - 22;
        loop {
            if u32_at(&tail, i)? == EOCD_SIG {
                let comment = u16_at(&tail, i + 20)? as usize;
                if i + 22 + comment <= tail.len() {
                    eocd = Some(i);
                    break;
                }
            }
            if i == 0 {
                break;
            }
            i -= 1;
        }
        let e = eocd.ok_or_else(|| {
            zerr("no end-of-central-directory record; not a zip archive or truncated")
        })?;
        let eocd_pos = len - tail_len + e as u64;
        let mut count = u16_at(&tail, e + 10)? as u64;
        let mut cd_size = u32_at(&tail, e + 12)? as u64;
        let mut cd_off = u32_at(&tail, e + 16)? as u64;
        if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_off == 0xFFFF_FFFF {
            if eocd_pos < 20 {
                return Err(zerr("ZIP64 markers without a ZIP64 locator"));
            }
            let loc = blob.read_vec(eocd_pos - 20, 20)?;
            if u32_at(&loc, 0)? != ZIP64_LOCATOR_SIG {
                return Err(zerr("ZIP64 markers without a ZIP64 locator"));
            }
            let z64 = u64_at(&loc, 8)?;
            if z64.checked_add(56).is_none_or(|end| end > eocd_pos) {
                return Err(zerr(format!(
                    "ZIP64 end record offset {z64} is past the end record"
                )));
            }
            let rec = blob.read_vec(z64, 56)?;
            if u32_at(&rec, 0)? != ZIP64_EOCD_SIG {
                return Err(zerr("ZIP64 end record signature missing"));
            }
            count = u64_at(&rec, 32)?;
            cd_size = u64_at(&rec, 40)?;
            cd_off = u64_at(&rec, 48)?;
        }
        if cd_off.checked_add(cd_size).is_none_or(|end| end > eocd_pos) {
            return Err(zerr(format!(
                "central directory ({cd_size} bytes at {cd_off}) reaches past its end record at {eocd_pos}"
            )));
        }
        if count > cd_size / CENTRAL_LEN as u64 {
            return Err(zerr(format!(
                "{count} entries declared but the central directory holds {cd_size} bytes"
            )));
        }
        let cd = blob.read_vec(cd_off, cd_size)?;
        let mut entries = Vec::with_capacity(count as usize);
        let mut p = 0usize;
        for _ in 0..count {
            if u32_at(&cd, p)? != CENTRAL_SIG {
                return Err(zerr(format!(
                    "central directory entry at {} has a bad signature",
                    cd_off + p as u64
                )));
            }
            let method = u16_at(&cd, p + 10)?;
            let mut csize = u32_at(&cd, p + 20)? as u64;
            let mut usize_ = u32_at(&cd, p + 24)? as u64;
            let name_len = u16_at(&cd, p + 28)? as usize;
            let extra_len = u16_at(&cd, p + 30)? as usize;
            let comment_len = u16_at(&cd, p + 32)? as usize;
            let mut local = u32_at(&cd, p + 42)? as u64;
            let name_bytes = cd
                .get(p + 46..p + 46 + name_len)
                .ok_or_else(|| zerr("entry name cut short"))?;
            let name = String::from_utf8_lossy(name_bytes).into_owned();
            let extra = cd
                .get(p + 46 + name_len..p + 46 + name_len + extra_len)
                .ok_or_else(|| zerr("entry extra field cut short"))?;
            // ZIP64 extended information: present fields follow in a fixed order.
            let mut q = 0;
            while q + 4 <= extra.len() {
                let id = u16_at(extra, q)?;
                let n = u16_at(extra, q + 2)? as usize;
                let body = extra
                    .get(q + 4..q + 4 + n)
                    .ok_or_else(|| zerr("extra field cut short"))?;
                if id == 1 {
                    let mut r = 0;
                    for field in [&mut usize_, &mut csize, &mut local] {
                        if *field == 0xFFFF_FFFF {
                            *field = u64_at(body, r)?;
                            r += 8;
                        }
                    }
                }
                q += 4 + n;
            }
            if method != 0 {
                return Err(zerr(format!(
                    "entry `{name}` is compressed (method {method}); only stored entries (torch.save's) are read"
                )));
            }
            if csize != usize_ {
                return Err(zerr(format!(
                    "stored entry `{name}` has compressed size {csize} != size {usize_}"
                )));
            }
            if local
                .checked_add(LOCAL_LEN + usize_)
                .is_none_or(|end| end > cd_off)
            {
                return Err(zerr(format!(
                    "entry `{name}` ({usize_} bytes at {local}) reaches past the central directory"
                )));
            }
            entries.push(ZipEntry {
                name,
                size: usize_,
                local_offset: local,
            });
            p += CENTRAL_LEN + name_len + extra_len + comment_len;
        }
        Ok(ZipArchive { blob, entries })
    }

    /// The entries in central-directory order.
    pub fn entries(&self) -> &[ZipEntry] {
        &self.entries
    }

    /// Finds an entry by exact name.
    pub fn entry(&self, name: &str) -> Option<&ZipEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// A window on an entry's stored bytes (reads its local header to find them).
    pub fn data(&self, entry: &ZipEntry) -> Result<Blob> {
        let hdr = self.blob.read_vec(entry.local_offset, LOCAL_LEN)?;
        if u32_at(&hdr, 0)? != LOCAL_SIG {
            return Err(zerr(format!(
                "entry `{}`: local header signature missing",
                entry.name
            )));
        }
        let n = u16_at(&hdr, 26)? as u64;
        let x = u16_at(&hdr, 28)? as u64;
        let start = entry.local_offset + LOCAL_LEN + n + x;
        self.blob.slice(start, entry.size).map_err(|_| {
            zerr(format!(
                "entry `{}` ({} bytes at {start}) reaches past the end of the archive",
                entry.name, entry.size
            ))
        })
    }

    /// A window on the named entry's bytes.
    pub fn data_by_name(&self, name: &str) -> Result<Blob> {
        let e = self
            .entry(name)
            .ok_or_else(|| zerr(format!("entry `{name}` is missing")))?;
        self.data(e)
    }
}

struct Written {
    name: String,
    crc: u32,
    size: u64,
    offset: u64,
}

/// Streams stored entries into a zip archive, each entry's data aligned to 64 bytes (as
/// `torch.save` does, so readers may memory-map tensors). ZIP64 records are added only when
/// sizes or offsets need them.
pub struct ZipWriter<W: Write> {
    out: W,
    pos: u64,
    done: Vec<Written>,
}

const ALIGN: u64 = 64;

impl<W: Write> ZipWriter<W> {
    /// Starts an archive at the current position of `out` (taken as offset 0).
    pub fn new(out: W) -> ZipWriter<W> {
        ZipWriter {
            out,
            pos: 0,
            done: Vec::new(),
        }
    }

    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.out.write_all(b)?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Writes one stored entry holding `data`.
    pub fn add(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let crc = crc32fast::hash(data);
        let size = data.len() as u64;
        let offset = self.pos;
        let zip64 = size >= 0xFFFF_FFFF;
        let mut extra = Vec::new();
        if zip64 {
            extra.extend_from_slice(&1u16.to_le_bytes());
            extra.extend_from_slice(&16u16.to_le_bytes());
            extra.extend_from_slice(&size.to_le_bytes());
            extra.extend_from_slice(&size.to_le_bytes());
        }
        let unpadded = offset + LOCAL_LEN + name.len() as u64 + extra.len() as u64 + 4;
        let pad = (ALIGN - unpadded % ALIGN) % ALIGN;
        extra.extend_from_slice(&0x4246u16.to_le_bytes()); // "FB" padding record, as torch writes
        extra.extend_from_slice(&(pad as u16).to_le_bytes());
        extra.resize(extra.len() + pad as usize, 0);
        let small = if zip64 { 0xFFFF_FFFF } else { size as u32 };
        let mut h = Vec::with_capacity(30 + name.len() + extra.len());
        h.extend_from_slice(&LOCAL_SIG.to_le_bytes());
        h.extend_from_slice(&(if zip64 { 45u16 } else { 20u16 }).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes()); // flags
        h.extend_from_slice(&0u16.to_le_bytes()); // method: stored
        h.extend_from_slice(&0u32.to_le_bytes()); // time, date
        h.extend_from_slice(&crc.to_le_bytes());
        h.extend_from_slice(&small.to_le_bytes());
        h.extend_from_slice(&small.to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(&extra);
        self.put(&h)?;
        self.put(data)?;
        self.done.push(Written {
            name: name.to_string(),
            crc,
            size,
            offset,
        });
        Ok(())
    }

    /// Writes the central directory and end records; returns the sink.
    pub fn finish(mut self) -> std::io::Result<W> {
        let cd_off = self.pos;
        let mut cd = Vec::new();
        for w in &self.done {
            let big_size = w.size >= 0xFFFF_FFFF;
            let big_off = w.offset >= 0xFFFF_FFFF;
            let mut extra = Vec::new();
            if big_size || big_off {
                let mut body = Vec::new();
                if big_size {
                    body.extend_from_slice(&w.size.to_le_bytes());
                    body.extend_from_slice(&w.size.to_le_bytes());
                }
                if big_off {
                    body.extend_from_slice(&w.offset.to_le_bytes());
                }
                extra.extend_from_slice(&1u16.to_le_bytes());
                extra.extend_from_slice(&(body.len() as u16).to_le_bytes());
                extra.extend_from_slice(&body);
            }
            let s = if big_size { 0xFFFF_FFFF } else { w.size as u32 };
            let o = if big_off {
                0xFFFF_FFFF
            } else {
                w.offset as u32
            };
            let v: u16 = if big_size || big_off { 45 } else { 20 };
            cd.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
            cd.extend_from_slice(&v.to_le_bytes());
            cd.extend_from_slice(&v.to_le_bytes());
            cd.extend_from_slice(&[0u8; 8]); // flags, method, time, date
            cd.extend_from_slice(&w.crc.to_le_bytes());
            cd.extend_from_slice(&s.to_le_bytes());
            cd.extend_from_slice(&s.to_le_bytes());
            cd.extend_from_slice(&(w.name.len() as u16).to_le_bytes());
            cd.extend_from_slice(&(extra.len() as u16).to_le_bytes());
            cd.extend_from_slice(&[0u8; 6]); // comment len, disk, internal attrs
            cd.extend_from_slice(&0u32.to_le_bytes()); // external attrs
            cd.extend_from_slice(&o.to_le_bytes());
            cd.extend_from_slice(w.name.as_bytes());
            cd.extend_from_slice(&extra);
        }
        self.put(&cd)?;
        let cd_size = cd.len() as u64;
        let n = self.done.len() as u64;
        let need64 = n >= 0xFFFF || cd_off >= 0xFFFF_FFFF || cd_size >= 0xFFFF_FFFF;
        let mut tail = Vec::new();
        if need64 {
            let z64 = self.pos;
            tail.extend_from_slice(&ZIP64_EOCD_SIG.to_le_bytes());
            tail.extend_from_slice(&44u64.to_le_bytes());
            tail.extend_from_slice(&45u16.to_le_bytes());
            tail.extend_from_slice(&45u16.to_le_bytes());
            tail.extend_from_slice(&[0u8; 8]);
            tail.extend_from_slice(&n.to_le_bytes());
            tail.extend_from_slice(&n.to_le_bytes());
            tail.extend_from_slice(&cd_size.to_le_bytes());
            tail.extend_from_slice(&cd_off.to_le_bytes());
            tail.extend_from_slice(&ZIP64_LOCATOR_SIG.to_le_bytes());
            tail.extend_from_slice(&0u32.to_le_bytes());
            tail.extend_from_slice(&z64.to_le_bytes());
            tail.extend_from_slice(&1u32.to_le_bytes());
        }
        let n16 = if need64 { 0xFFFF } else { n as u16 };
        let s32 = if need64 { 0xFFFF_FFFF } else { cd_size as u32 };
        let o32 = if need64 { 0xFFFF_FFFF } else { cd_off as u32 };
        tail.extend_from_slice(&EOCD_SIG.to_le_bytes());
        tail.extend_from_slice(&[0u8; 4]);
        tail.extend_from_slice(&n16.to_le_bytes());
        tail.extend_from_slice(&n16.to_le_bytes());
        tail.extend_from_slice(&s32.to_le_bytes());
        tail.extend_from_slice(&o32.to_le_bytes());
        tail.extend_from_slice(&0u16.to_le_bytes());
        self.put(&tail)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = ZipWriter::new(Vec::new());
        for (n, d) in entries {
            w.add(n, d).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn round_trips_entries_with_64_byte_alignment() {
        let bytes = archive(&[("a/data.pkl", b"hello"), ("a/data/0", &[7u8; 100])]);
        let z = ZipArchive::open(Blob::from_bytes(bytes)).unwrap();
        assert_eq!(z.entries().len(), 2);
        let d = z.data_by_name("a/data/0").unwrap();
        assert_eq!(d.read_all().unwrap(), vec![7u8; 100]);
        let p = z.data_by_name("a/data.pkl").unwrap();
        assert_eq!(p.read_all().unwrap(), b"hello");
        assert!(z.data_by_name("missing").is_err());
    }

    #[test]
    fn data_offsets_are_aligned() {
        let bytes = archive(&[("x/y", b"1"), ("x/zz", b"22")]);
        let z = ZipArchive::open(Blob::from_bytes(bytes.clone())).unwrap();
        for e in z.entries() {
            let hdr = &bytes[e.local_offset as usize..];
            let n = u16::from_le_bytes([hdr[26], hdr[27]]) as u64;
            let x = u16::from_le_bytes([hdr[28], hdr[29]]) as u64;
            assert_eq!((e.local_offset + 30 + n + x) % 64, 0, "{}", e.name);
        }
    }

    #[test]
    fn truncated_archive_is_an_error() {
        let bytes = archive(&[("a", b"hello")]);
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                ZipArchive::open(Blob::from_bytes(bytes[..cut].to_vec())).is_err(),
                "cut {cut}"
            );
        }
    }
}

//! Bar 4: truncated, malformed and hostile inputs give errors — never a panic, a hang or an
//! unbounded allocation. Runs the same entry points as the `cargo fuzz` targets over a
//! generated corpus, plus the seed corpus checked in under `fuzz/corpus/`.

use crate::common;

use std::path::Path;

use ferry_ckpt::fuzzing;
use ferry_ckpt::torch_write::{PickleWriter, TorchSaveWriter};
use ferry_ckpt::zip::ZipWriter;
use ferry_ckpt::{DType, pickle};

/// A small valid torch.save file: {"w": f32 tensor [4, 3], "b": view on the same storage}.
fn valid_torch() -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("t.pt");
    let mut w = PickleWriter::new();
    w.empty_dict();
    w.mark();
    w.str("w");
    w.tensor("0", DType::F32, &[4, 3]);
    w.str("n");
    w.int(7);
    w.setitems();
    let mut t = TorchSaveWriter::create(&p, "archive", &w.finish()).unwrap();
    t.storage("0", &[1u8; 48]).unwrap();
    t.finish().unwrap();
    std::fs::read(p).unwrap()
}

fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

#[test]
fn valid_seed_parses() {
    let v = valid_torch();
    assert_eq!(fuzzing::torch(&v).unwrap(), 48);
    assert!(fuzzing::zip(&v).unwrap() > 48);
}

#[test]
fn every_truncation_is_an_error() {
    let v = valid_torch();
    for cut in 0..v.len() {
        assert!(fuzzing::torch(&v[..cut]).is_err(), "cut at {cut} parsed");
    }
}

#[test]
fn random_mutations_never_panic() {
    let v = valid_torch();
    let mut rng = xorshift(0x5eed);
    for _ in 0..3000 {
        let mut m = v.clone();
        for _ in 0..(rng() % 8 + 1) {
            let i = (rng() as usize) % m.len();
            m[i] = rng() as u8;
        }
        let _ = fuzzing::torch(&m);
        let _ = fuzzing::zip(&m);
    }
    // and the pickle alone
    let tf =
        ferry_ckpt::torch::TorchFile::from_blob(ferry_ckpt::blob::Blob::from_bytes(v)).unwrap();
    let _ = tf;
}

fn storage_tensor_pickle(numel: i64, offset: i64, shape: &[i64], stride: &[i64]) -> Vec<u8> {
    let mut w = PickleWriter::new();
    w.global("torch._utils", "_rebuild_tensor_v2");
    w.mark();
    w.mark();
    w.str("storage");
    w.global("torch", "FloatStorage");
    w.str("0");
    w.str("cpu");
    w.int(numel);
    w.tuple();
    let mut b = w.finish();
    b.pop(); // drop STOP, continue by hand
    b.push(b'Q');
    let mut w2 = PickleWriter::new();
    w2.int(offset);
    w2.mark();
    for &d in shape {
        w2.int(d);
    }
    w2.tuple();
    w2.mark();
    for &s in stride {
        w2.int(s);
    }
    w2.tuple();
    w2.bool(false);
    w2.ordered_dict();
    w2.tuple();
    w2.reduce();
    let tail = w2.finish();
    b.extend_from_slice(&tail[2..]);
    b
}

fn torch_with_pickle(pkl: &[u8], storage: &[u8]) -> Vec<u8> {
    let mut z = ZipWriter::new(Vec::new());
    z.add("a/data.pkl", pkl).unwrap();
    z.add("a/data/0", storage).unwrap();
    z.finish().unwrap()
}

#[test]
fn tensor_views_out_of_bounds_are_errors() {
    let cases: Vec<(i64, i64, Vec<i64>, Vec<i64>)> = vec![
        (1 << 40, 0, vec![4], vec![1]), // storage declares far more than its entry holds
        (12, 10, vec![4], vec![1]),     // offset + size past the storage
        (12, 0, vec![3, 4], vec![5, 1]), // strides reach past the storage
        (12, 0, vec![1 << 40], vec![0]), // broadcast view: huge logical size over 1 element
        (12, 0, vec![i64::MAX / 2, 4], vec![4, 1]), // size overflow
        (12, 0, vec![4, 3], vec![1 << 62, 1 << 62]), // stride overflow
    ];
    for (numel, off, shape, stride) in cases {
        let f = torch_with_pickle(
            &storage_tensor_pickle(numel, off, &shape, &stride),
            &[0u8; 48],
        );
        assert!(
            fuzzing::torch(&f).is_err(),
            "numel {numel} off {off} shape {shape:?} stride {stride:?}"
        );
    }
    // and a valid strided (transposed) view reads the right elements
    let mut st = Vec::new();
    for i in 0..12u32 {
        st.extend_from_slice(&(i as f32).to_le_bytes());
    }
    let f = torch_with_pickle(&storage_tensor_pickle(12, 0, &[3, 4], &[1, 3]), &st);
    let tf =
        ferry_ckpt::torch::TorchFile::from_blob(ferry_ckpt::blob::Blob::from_bytes(f)).unwrap();
    let v = tf.tensor_of(tf.root()).unwrap().unwrap();
    let got: Vec<f32> = v
        .read_all()
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![0., 3., 6., 9., 1., 4., 7., 10., 2., 5., 8., 11.]);
}

#[test]
fn zip_with_huge_declared_sizes_is_an_error() {
    let v = valid_torch();
    // find the central directory record of data/0 and set its size fields to 2^32-2
    let name = b"archive/data/0";
    let cd = v
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == [0x50, 0x4b, 0x01, 0x02])
        .map(|(i, _)| i);
    let mut hit = false;
    for at in cd {
        if v[at + 46..].starts_with(name) {
            let mut m = v.clone();
            m[at + 20..at + 28].copy_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff]);
            assert!(fuzzing::zip(&m).is_err());
            let mut m = v.clone();
            m[at + 42..at + 46].copy_from_slice(&[0xf0, 0xff, 0xff, 0x7f]); // local header far past the end
            assert!(fuzzing::zip(&m).is_err());
            hit = true;
        }
    }
    assert!(hit);
    // an end record claiming 65535 entries in a tiny directory
    let mut m = v.clone();
    let e = m.len() - 22;
    m[e + 8..e + 12].copy_from_slice(&[0xff, 0xfe, 0xff, 0xfe]);
    assert!(fuzzing::zip(&m).is_err());
    // ZIP64 markers without a locator
    let mut m = v;
    let e = m.len() - 22;
    m[e + 16..e + 20].copy_from_slice(&[0xff; 4]);
    assert!(fuzzing::zip(&m).is_err());
}

#[test]
fn hostile_pickles() {
    let mut deep = vec![0x80, 2];
    deep.extend(std::iter::repeat_n(b'(', 200_000));
    deep.push(b'.');
    assert!(fuzzing::pickle(&deep).is_err());

    // 100k nested dicts: {"a": {"a": {...}}} built with SETITEM; walking must stop at MAX_DEPTH
    let mut nested = vec![0x80, 2];
    for _ in 0..100_000 {
        nested.extend_from_slice(b"}X\x01\x00\x00\x00a");
    }
    nested.push(b'N');
    nested.extend(std::iter::repeat_n(b's', 100_000));
    nested.push(b'.');
    let n = fuzzing::pickle(&nested).unwrap();
    assert!(
        n <= nested.len(),
        "objects {n} must stay linear in the input {}",
        nested.len()
    );

    // billion laughs: one big string memoized and fetched 200k times → O(1) per fetch
    let mut laughs = vec![0x80, 2, b'X'];
    laughs.extend_from_slice(&(1u32 << 20).to_le_bytes());
    laughs.extend(std::iter::repeat_n(b'x', 1 << 20));
    laughs.extend_from_slice(b"q\x00]q\x01(");
    for _ in 0..200_000 {
        laughs.extend_from_slice(b"h\x00");
    }
    laughs.extend_from_slice(b"e.");
    assert!(fuzzing::pickle(&laughs).is_ok());

    // a list appended to itself: walking terminates
    let cyc = b"\x80\x02]q\x00h\x00a.";
    assert!(fuzzing::pickle(cyc).is_ok());
    let p = pickle::parse(cyc).unwrap();
    assert_eq!(p.objs.len(), 1);

    for bad in [
        &b"\x80\x02X\xff\xff\xff\xff"[..],               // huge BINUNICODE
        b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7f", // huge BINBYTES8
        b"\x80\x02\x8b\xff\xff\xff\x7f",                 // huge LONG4
        b"\x80\x02j\xff\xff\xff\xff.",                   // memo key never stored
        b"\x80\x02cos\nsystem",                          // truncated GLOBAL
        b"\x80\x02\x82\x01.",                            // EXT1
        b"\x80\x05\x97.",                                // NEXT_BUFFER
        b"\x80\x02}K\x01u.",                             // SETITEMS without MARK
        b"\x80\x02t.",                                   // TUPLE without MARK
    ] {
        assert!(fuzzing::pickle(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn hostile_safetensors() {
    let mk = |h: &str, data: usize| {
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(h.as_bytes());
        b.extend(std::iter::repeat_n(0u8, data));
        b
    };
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(fuzzing::safetensors(&huge).is_err());
    assert!(
        fuzzing::safetensors(&mk(
            r#"{"x":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4]}}"#,
            4
        ))
        .is_err()
    );
    assert!(
        fuzzing::safetensors(&mk(
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
            8
        ))
        .is_err()
    );
    assert!(
        fuzzing::safetensors(&mk(
            r#"{"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}}"#,
            4
        ))
        .is_err()
    );
    assert!(fuzzing::safetensors(&mk("[1,2", 0)).is_err());
    assert_eq!(
        fuzzing::safetensors(&mk(
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            8
        ))
        .unwrap(),
        8
    );
}

/// The fuzzers' checked-in seed corpus: `ok_*` files parse, `err_*` files are rejected, none panics.
#[test]
fn seed_corpus_never_panics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut n = 0;
    for (target, f) in [
        ("zip", fuzzing::zip as fn(&[u8]) -> _),
        ("pickle", fuzzing::pickle),
        ("torch", fuzzing::torch),
        ("safetensors", fuzzing::safetensors),
    ] {
        let Ok(rd) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        for e in rd {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let r = f(&std::fs::read(&path).unwrap());
            if name.starts_with("ok_") {
                assert!(r.is_ok(), "{target}/{name}: {r:?}");
            } else if name.starts_with("err_") {
                assert!(r.is_err(), "{target}/{name} parsed");
            }
            n += 1;
        }
    }
    assert!(n > 0, "no seed corpus under {}", root.display());
}

#[test]
fn real_fixture_truncations_are_errors() {
    let f = common::fixtures()
        .join("megatron/llama-tp1-pp1/legacy/iter_0000010/mp_rank_00/model_optim_rng.pt");
    let v = std::fs::read(f).unwrap();
    assert!(fuzzing::torch(&v).is_ok());
    for cut in [0, 100, v.len() / 3, v.len() / 2, v.len() - 23, v.len() - 1] {
        assert!(fuzzing::torch(&v[..cut]).is_err(), "cut {cut}");
    }
}

//! Benchmark driver for `bench/convert/run.sh`.
//!
//! `convert_bench gen DIR [LAYERS]` writes a synthetic Megatron legacy checkpoint (TP=4, PP=2,
//! bf16, Llama-7B-wide layers) with the crate's own writer, from a source that generates
//! pseudo-random rows on the fly. `convert_bench convert SRC DST` converts it to HF and
//! prints bytes, seconds and this process's peak RSS (VmHWM) for the script to compare.

use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use ferry_ckpt::megatron::CanonicalSource;
use ferry_ckpt::megatron::writer::{MegatronWriteOptions, write_legacy};
use ferry_ckpt::model::{Param, hf_tensors, pad_vocab};
use ferry_ckpt::{Arch, ConvertOptions, DType, ModelSpec, convert};

struct Synthetic {
    spec: ModelSpec,
}

impl CanonicalSource for Synthetic {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn read_rows(
        &self,
        p: Param,
        rows: Range<usize>,
        out: &mut [u8],
    ) -> Result<(), ferry_ckpt::CkptError> {
        let tag = match p {
            Param::Embedding => 1,
            Param::Output => 2,
            Param::FinalNorm => 3,
            Param::Layer(l, lp) => 16 + l as u64 * 64 + lp as u64,
        };
        let mut s = (tag << 32) ^ rows.start as u64 ^ 0x9E37_79B9_7F4A_7C15;
        for chunk in out.chunks_mut(8) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let b = s.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        Ok(())
    }
}

fn peak_rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(0, |k| k * 1024)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("gen") => {
            let dir = Path::new(&args[2]);
            let layers: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(12);
            let (tp, pp) = (4, 2);
            let spec = ModelSpec {
                arch: Arch::Llama,
                num_layers: layers,
                hidden: 4096,
                ffn: 11008,
                heads: 32,
                groups: 8,
                head_dim: 128,
                vocab: 32000,
                padded_vocab: pad_vocab(32000, 128, tp),
                tied: false,
                qkv_bias: false,
                qk_norm: false,
                rope_theta: 10000.0,
                norm_eps: 1e-5,
                max_position: 4096,
                dtype: DType::BF16,
                initializer_range: 0.02,
            };
            let t = Instant::now();
            let opts = MegatronWriteOptions {
                tp,
                pp,
                vpp: 1,
                iteration: Some(1000),
                make_vocab_size_divisible_by: 128,
            };
            let bytes = write_legacy(&Synthetic { spec }, dir, &opts, &|_| {})
                .expect("write synthetic checkpoint");
            println!(
                "gen_bytes={bytes} gen_seconds={:.2}",
                t.elapsed().as_secs_f64()
            );
        }
        Some("convert") => {
            let (src, dst) = (Path::new(&args[2]), Path::new(&args[3]));
            let workers = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(2);
            let t = Instant::now();
            let opts = ConvertOptions {
                workers,
                ..ConvertOptions::default()
            };
            let rep = convert(src, dst, &opts, &|_| {}).expect("convert");
            let secs = t.elapsed().as_secs_f64();
            let largest = hf_tensors(&rep.spec)
                .iter()
                .map(|t| t.nbytes(rep.spec.dtype))
                .max()
                .unwrap_or(0);
            println!(
                "bytes={} seconds={secs:.3} peak_rss={} largest_tensor={largest}",
                rep.bytes,
                peak_rss_bytes()
            );
        }
        _ => {
            eprintln!("usage: convert_bench gen DIR [LAYERS] | convert SRC DST [WORKERS]");
            std::process::exit(2);
        }
    }
}

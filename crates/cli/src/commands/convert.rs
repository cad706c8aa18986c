//! `ferry convert SRC DST`: Megatron (legacy or torch_dist, any TP/PP/VPP) ⇄ Hugging
//! Face safetensors, streaming with bounded memory; `--inspect` shows what SRC holds.

use std::path::PathBuf;

use anyhow::bail;
use ferry_ckpt::{ConvertOptions, Target};

use crate::args::Output;
use crate::output;

/// Options of `ferry convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Checkpoint to read (format detected automatically).
    pub src: PathBuf,
    /// Directory to write; omit with --inspect.
    pub dst: Option<PathBuf>,
    /// Only describe SRC: format, layout, tensors.
    #[arg(long)]
    pub inspect: bool,
    /// Target format: hf or megatron.
    #[arg(long, default_value = "hf")]
    pub to: String,
    /// Tensor-parallel size of a Megatron target.
    #[arg(long, default_value_t = 1)]
    pub tp: usize,
    /// Pipeline-parallel size of a Megatron target.
    #[arg(long, default_value_t = 1)]
    pub pp: usize,
    /// Iteration to read (latest when omitted).
    #[arg(long)]
    pub iteration: Option<u64>,
    /// Tokenizer directory copied next to an HF output.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Replace DST if it exists.
    #[arg(long)]
    pub overwrite: bool,
    /// Output format of the report.
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
}

pub fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let to = match args.to.as_str() {
        "hf" => Target::Hf,
        "megatron" => Target::Megatron {
            tp: args.tp,
            pp: args.pp,
        },
        other => bail!("--to: unknown format {other:?}; use hf or megatron"),
    };
    let opts = ConvertOptions {
        to,
        iteration: args.iteration,
        tokenizer_dir: args.tokenizer,
        overwrite: args.overwrite,
        ..ConvertOptions::default()
    };
    if args.inspect {
        let inspection = ferry_ckpt::inspect(&args.src, &opts)?;
        if !output::structured(&inspection, args.output)? {
            print!("{}", inspection.render_table());
        }
        return Ok(());
    }
    let Some(dst) = args.dst else {
        bail!("give the output directory: `ferry convert SRC DST` (or --inspect to only look)");
    };
    let report = ferry_ckpt::convert(&args.src, &dst, &opts, &|p| {
        if p.bytes_total > 0 {
            eprint!(
                "\r{:>5.1}%  {}/{} tensors",
                100.0 * p.bytes_done as f64 / p.bytes_total as f64,
                p.tensors_done,
                p.tensors_total
            );
        }
    })?;
    eprintln!();
    if !output::structured(&report, args.output)? {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

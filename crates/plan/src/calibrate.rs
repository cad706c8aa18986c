//! Comparison of predictions with measured training steps (the fixture's `calibration.csv`, or
//! rows measured by `scripts/measure.py` and `scripts/gpu/`): peak memory error, fits/OOM
//! verdicts, step time ratio.
//!
//! Single-GPU rows are predicted term by term for the row's recipe. Multi-GPU rows (optional
//! columns `engine`, `tp`, `pp`, `dp`, `zero`, `micro_batches`) go through [`plan`] with the
//! row's layout fixed and its engine pinned — exactly what `ferry plan` reports for that layout.
//!
//! Parsing takes text and model configs come from a caller-supplied lookup, so this stays free
//! of I/O; `tests/it/calibration.rs` and `examples/calibrate.rs` do the reading.

use serde::Serialize;

use crate::error::{PlanError, Result};
use crate::gpu::GpuKind;
use crate::memory::{Recipe, TrainSetup, training_memory, with_overheads};
use crate::model::ModelShape;
use crate::request::{Engine, Layout, Method, Parallelism, PlanRequest, Recompute, Task};
use crate::search::plan;
use crate::throughput::{StepShape, estimate};

/// One measured configuration: one GPU (the fixture's procedure) or one GPU of a parallel
/// layout (the per-GPU maximum over ranks).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredRow {
    /// Model name (config file stem or catalogue id).
    pub model: String,
    /// `full-mixed`, `full-bf16`, `lora` or `qlora`.
    pub mode: String,
    /// Sequences per step.
    pub micro_batch: u64,
    /// Tokens per sequence.
    pub seq_len: u64,
    /// Gradient checkpointing on.
    pub grad_ckpt: bool,
    /// LoRA rank (16 when the column is absent).
    pub lora_rank: u64,
    /// `torch.cuda.max_memory_allocated()`, None for OOM rows.
    pub peak_allocated_bytes: Option<u64>,
    /// Wall-clock of the second step, when measured.
    pub step_time_s: Option<f64>,
    /// Launcher whose recipe was measured (`torchrun`: HF model under DDP/FSDP; `megatron`).
    pub engine: Engine,
    /// Tensor-parallel size (1 when the column is absent).
    pub tp: u64,
    /// Pipeline-parallel size (1 when absent).
    pub pp: u64,
    /// Data-parallel size (1 when absent).
    pub dp: u64,
    /// ZeRO stage: 3 = FSDP full shard (torchrun), 1 = Megatron's distributed optimizer.
    pub zero: u8,
    /// Micro-batches per optimizer step per data-parallel rank (1 when absent).
    pub micro_batches: u64,
}

impl MeasuredRow {
    /// GPUs of the measured layout.
    pub fn gpus(&self) -> u64 {
        self.tp * self.pp * self.dp
    }

    /// Short layout text for tables: `1 GPU`, `ddp dp4`, `fsdp dp4`, `mcore tp2 pp2 dp1`.
    pub fn layout_text(&self) -> String {
        match (self.engine, self.zero) {
            _ if self.gpus() == 1 && self.engine != Engine::Megatron => "1 GPU".to_string(),
            (Engine::Megatron, _) => format!("mcore tp{} pp{} dp{}", self.tp, self.pp, self.dp),
            (_, 3) => format!("fsdp dp{}", self.dp),
            (_, z) if z > 0 => format!("zero{z} dp{}", self.dp),
            _ => format!("ddp dp{}", self.dp),
        }
    }
}

/// Parses a calibration CSV (columns found by header name; `lora_rank` optional).
pub fn parse_csv(text: &str, file: &str) -> Result<Vec<MeasuredRow>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| PlanError::ConfigSyntax {
            file: file.to_string(),
            reason: "empty file".to_string(),
        })?
        .split(',')
        .map(str::trim)
        .collect();
    let col = |name: &str| -> Result<usize> {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| PlanError::MissingField {
                file: file.to_string(),
                field: name.to_string(),
                hint: "calibration CSV column".to_string(),
            })
    };
    let (cm, cmode, cb, cs, cc, cp, cst) = (
        col("model")?,
        col("mode")?,
        col("micro_batch")?,
        col("seq_len")?,
        col("grad_ckpt")?,
        col("peak_allocated_bytes")?,
        col("status")?,
    );
    let crank = header.iter().position(|h| *h == "lora_rank");
    let ctime = header.iter().position(|h| *h == "step_time_s");
    let optional = |name: &str| header.iter().position(|h| *h == name);
    let (cengine, ctp, cpp, cdp, czero, cmicro) = (
        optional("engine"),
        optional("tp"),
        optional("pp"),
        optional("dp"),
        optional("zero"),
        optional("micro_batches"),
    );
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = |field: &str| PlanError::InvalidRequest {
            field: format!("{file}: line {} column {field}", i + 2),
            reason: format!("cannot read {line:?}"),
        };
        let get = |c: usize, name: &str| f.get(c).copied().ok_or_else(|| bad(name));
        let num =
            |c: usize, name: &str| -> Result<u64> { get(c, name)?.parse().map_err(|_| bad(name)) };
        let ok = get(cst, "status")? == "ok";
        let count = |c: Option<usize>, name: &str| -> Result<u64> {
            match c {
                Some(c) => {
                    let n = num(c, name)?;
                    if n == 0 { Err(bad(name)) } else { Ok(n) }
                }
                None => Ok(1),
            }
        };
        let engine = match cengine.map(|c| get(c, "engine")).transpose()? {
            None | Some("torchrun") => Engine::Torchrun,
            Some("megatron") => Engine::Megatron,
            Some(_) => return Err(bad("engine (torchrun or megatron)")),
        };
        let zero = match czero {
            Some(c) => u8::try_from(num(c, "zero")?)
                .ok()
                .filter(|z| *z <= 3)
                .ok_or_else(|| bad("zero (0-3)"))?,
            None => 0,
        };
        rows.push(MeasuredRow {
            model: get(cm, "model")?.to_string(),
            mode: get(cmode, "mode")?.to_string(),
            micro_batch: num(cb, "micro_batch")?,
            seq_len: num(cs, "seq_len")?,
            grad_ckpt: get(cc, "grad_ckpt")? == "true",
            lora_rank: match crank {
                Some(c) => num(c, "lora_rank")?,
                None => 16,
            },
            peak_allocated_bytes: if ok {
                Some(num(cp, "peak_allocated_bytes")?)
            } else {
                None
            },
            step_time_s: ctime
                .and_then(|c| f.get(c))
                .and_then(|t| t.parse::<f64>().ok()),
            engine,
            tp: count(ctp, "tp")?,
            pp: count(cpp, "pp")?,
            dp: count(cdp, "dp")?,
            zero,
            micro_batches: count(cmicro, "micro_batches")?,
        });
    }
    Ok(rows)
}

/// A row with its prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowCheck {
    /// The measurement.
    pub row: MeasuredRow,
    /// Predicted `max_memory_allocated()`.
    pub predicted_peak: u64,
    /// Predicted requirement with margin and context.
    pub required: u64,
    /// Planner verdict on this GPU.
    pub fits: bool,
    /// (predicted − measured) / measured, for measured rows.
    pub error: Option<f64>,
    /// Predicted step time (single GPU, eager HF), seconds.
    pub predicted_step_s: f64,
    /// Part of `predicted_peak` that a rank may or may not hold at its peak (DDP's second
    /// bucket copy during the iteration-2 rebuild); 0 for other recipes.
    pub timing_dependent: u64,
}

/// Recipe of a fixture mode.
pub fn recipe_of_mode(mode: &str) -> Result<Recipe> {
    Ok(match mode {
        "full-mixed" => Recipe::HfAmp,
        "full-bf16" => Recipe::PureBf16,
        "lora" => Recipe::Lora,
        "qlora" => Recipe::Qlora,
        other => {
            return Err(PlanError::InvalidRequest {
                field: "mode".to_string(),
                reason: format!("{other:?} is not full-mixed, full-bf16, lora or qlora"),
            });
        }
    })
}

/// Predicts every row on `gpu` with the default 10% margin; `shape_of` maps a row's model name
/// to its shape.
pub fn check_rows(
    rows: &[MeasuredRow],
    gpu: GpuKind,
    shape_of: impl Fn(&str) -> Result<ModelShape>,
) -> Result<Vec<RowCheck>> {
    let capacity = gpu.spec().memory_bytes;
    rows.iter()
        .map(|row| {
            let shape = shape_of(&row.model)?;
            if row.gpus() > 1 || row.engine == Engine::Megatron {
                return check_parallel_row(row, shape, gpu);
            }
            let recipe = recipe_of_mode(&row.mode)?;
            let layout = Layout {
                tp: 1,
                pp: 1,
                cp: 1,
                ep: 1,
                zero: 0,
                recompute: if row.grad_ckpt {
                    Recompute::Full
                } else {
                    Recompute::None
                },
                micro_batch: row.micro_batch,
            };
            let memory = with_overheads(
                training_memory(&TrainSetup {
                    model: &shape,
                    recipe,
                    lora_rank: row.lora_rank,
                    layout,
                    dp: 1,
                    micro_batches: 1,
                    seq_len: row.seq_len,
                    task: Task::Sft,
                    gpu,
                    engine: Engine::Torchrun,
                }),
                gpu,
                1,
                0.10,
            );
            let step = estimate(&StepShape {
                model: &shape,
                recipe,
                engine: Engine::Torchrun,
                layout,
                dp: 1,
                micro_batches: 1,
                seq_len: row.seq_len,
                global_batch: row.micro_batch,
                gpu,
                gpus_per_node: 1,
                inter_node_share: 1.0,
                train_sequences: 0,
            });
            Ok(RowCheck {
                row: row.clone(),
                predicted_peak: memory.peak_bytes,
                required: memory.required_bytes,
                fits: memory.required_bytes <= capacity,
                error: row
                    .peak_allocated_bytes
                    .map(|m| (memory.peak_bytes as f64 - m as f64) / m as f64),
                predicted_step_s: step.step_s,
                timing_dependent: 0,
            })
        })
        .collect()
}

/// A multi-GPU row, predicted by [`plan`] with the row's layout fixed and engine pinned.
fn check_parallel_row(row: &MeasuredRow, shape: ModelShape, gpu: GpuKind) -> Result<RowCheck> {
    let mut req = PlanRequest::new(shape, &row.model, gpu, row.gpus(), row.seq_len);
    req.engine = row.engine;
    req.method = Method::from_mode(&row.mode, row.lora_rank)?;
    req.global_batch = row.micro_batch * row.dp * row.micro_batches;
    req.parallelism = Parallelism::Fixed(Layout {
        tp: row.tp,
        pp: row.pp,
        cp: 1,
        ep: 1,
        zero: row.zero,
        recompute: if row.grad_ckpt {
            Recompute::Full
        } else {
            Recompute::None
        },
        micro_batch: row.micro_batch,
    });
    let chosen = plan(&req)?.chosen;
    Ok(RowCheck {
        row: row.clone(),
        predicted_peak: chosen.memory.peak_bytes,
        required: chosen.memory.required_bytes,
        fits: chosen.fits(),
        error: row
            .peak_allocated_bytes
            .map(|m| (chosen.memory.peak_bytes as f64 - m as f64) / m as f64),
        predicted_step_s: chosen.throughput.step_s,
        timing_dependent: chosen.memory.ddp_rebuild,
    })
}

/// The bars over a set of checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Rows with a measurement.
    pub measured: usize,
    /// Median |error|.
    pub median_abs_error: f64,
    /// Max |error|.
    pub max_abs_error: f64,
    /// OOM rows the planner says fit (must be 0).
    pub fits_but_oom: usize,
    /// Rows with > 15% headroom the planner rejects (must be 0).
    pub rejected_with_headroom: usize,
}

/// Computes the bars; `capacity` is the GPU's memory in bytes.
pub fn summarize(checks: &[RowCheck], capacity: u64) -> Summary {
    let mut errors: Vec<f64> = checks
        .iter()
        .filter_map(|c| c.error.map(f64::abs))
        .collect();
    errors.sort_by(f64::total_cmp);
    let median = if errors.is_empty() {
        0.0
    } else {
        let n = errors.len();
        if n % 2 == 1 {
            errors[n / 2]
        } else {
            (errors[n / 2 - 1] + errors[n / 2]) / 2.0
        }
    };
    Summary {
        measured: errors.len(),
        median_abs_error: median,
        max_abs_error: errors.last().copied().unwrap_or(0.0),
        fits_but_oom: checks
            .iter()
            .filter(|c| c.row.peak_allocated_bytes.is_none() && c.fits)
            .count(),
        rejected_with_headroom: checks
            .iter()
            .filter(|c| {
                c.row
                    .peak_allocated_bytes
                    .is_some_and(|m| (m as f64) < 0.85 * capacity as f64)
                    && !c.fits
            })
            .count(),
    }
}

/// The error table, one row per configuration, then the summary line.
pub fn render_table(checks: &[RowCheck], summary: &Summary) -> String {
    let wide = checks.iter().any(|c| c.row.gpus() > 1);
    let layout = |r: &MeasuredRow| {
        if wide {
            format!("{:<18} ", r.layout_text())
        } else {
            String::new()
        }
    };
    let mut out = format!(
        "{:<16} {}{:<10} {:>2} {:>5} {:>4} {:>3} {:>15} {:>15} {:>7} {:>9}  verdict\n",
        "model",
        if wide {
            format!("{:<18} ", "layout")
        } else {
            String::new()
        },
        "mode",
        "b",
        "s",
        "ckpt",
        "r",
        "measured",
        "predicted",
        "err%",
        "step×"
    );
    for c in checks {
        let r = &c.row;
        let measured = r
            .peak_allocated_bytes
            .map_or("OOM".to_string(), |m| m.to_string());
        let err = c
            .error
            .map_or(String::new(), |e| format!("{:+.2}", 100.0 * e));
        let step = r
            .step_time_s
            .map_or(String::new(), |t| format!("{:.2}", c.predicted_step_s / t));
        out.push_str(&format!(
            "{:<16} {}{:<10} {:>2} {:>5} {:>4} {:>3} {:>15} {:>15} {:>7} {:>9}  {}\n",
            r.model,
            layout(r),
            r.mode,
            r.micro_batch,
            r.seq_len,
            if r.grad_ckpt { "on" } else { "off" },
            r.lora_rank,
            measured,
            c.predicted_peak,
            err,
            step,
            if c.fits { "fits" } else { "rejected" }
        ));
    }
    out.push_str(&format!(
        "rows {}  median |err| {:.2}%  max |err| {:.2}%  fits-but-OOM {}  rejected-with-headroom {}\n\
         (step× = predicted / measured step time)\n",
        summary.measured,
        100.0 * summary.median_abs_error,
        100.0 * summary.max_abs_error,
        summary.fits_but_oom,
        summary.rejected_with_headroom
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_errors_name_line_and_column() {
        let text = "model,mode,micro_batch,seq_len,grad_ckpt,peak_allocated_bytes,status\n\
                    Qwen2.5-0.5B,lora,x,512,false,1,ok\n";
        let err = parse_csv(text, "rows.csv").unwrap_err().to_string();
        assert!(err.contains("rows.csv: line 2 column micro_batch"), "{err}");
        let err = parse_csv("model,mode\n", "rows.csv")
            .unwrap_err()
            .to_string();
        assert!(err.contains("micro_batch"), "{err}");
    }

    #[test]
    fn lora_rank_column_is_optional_and_used() {
        let text = "model,mode,micro_batch,seq_len,grad_ckpt,lora_rank,peak_allocated_bytes,status\n\
                    Qwen2.5-0.5B,lora,1,512,false,64,3200000000,ok\n\
                    Qwen2.5-0.5B,lora,1,512,false,16,,OOM\n";
        let rows = parse_csv(text, "x.csv").unwrap();
        assert_eq!(rows[0].lora_rank, 64);
        assert_eq!(rows[1].peak_allocated_bytes, None);
        let checks = check_rows(&rows, GpuKind::H200, crate::catalog::shape_of).unwrap();
        assert!(checks[0].predicted_peak > checks[1].predicted_peak);
        let s = summarize(&checks, GpuKind::H200.spec().memory_bytes);
        assert_eq!(s.fits_but_oom, 1);
        assert!(render_table(&checks, &s).contains("fits-but-OOM 1"));
    }
}

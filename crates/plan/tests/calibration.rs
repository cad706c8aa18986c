//! Bar 1 and 2 of the planner: predicted `peak_bytes` against `peak_allocated_bytes` measured on
//! an H200 (`shared/fixtures/planner/calibration.csv`), and fits/OOM verdicts.

use std::path::PathBuf;

use ferry_plan::{
    GpuKind, Layout, ModelShape, Recipe, Recompute, Task, TrainSetup, training_memory,
    with_overheads,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/planner")
}

struct Row {
    model: String,
    mode: String,
    b: u64,
    s: u64,
    ckpt: bool,
    measured: Option<u64>,
}

fn rows() -> Vec<Row> {
    let text = std::fs::read_to_string(fixtures().join("calibration.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (cm, cmode, cb, cs, cc, cp, cst) = (
        col("model"),
        col("mode"),
        col("micro_batch"),
        col("seq_len"),
        col("grad_ckpt"),
        col("peak_allocated_bytes"),
        col("status"),
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Row {
                model: f[cm].to_string(),
                mode: f[cmode].to_string(),
                b: f[cb].parse().unwrap(),
                s: f[cs].parse().unwrap(),
                ckpt: f[cc] == "true",
                measured: (f[cst] == "ok").then(|| f[cp].parse().unwrap()),
            }
        })
        .collect()
}

fn predict(row: &Row) -> (u64, u64) {
    let text = std::fs::read_to_string(
        fixtures()
            .join("configs")
            .join(format!("{}.json", row.model)),
    )
    .unwrap();
    let shape = ModelShape::from_config_json(&text, &row.model).unwrap();
    let recipe = match row.mode.as_str() {
        "full-mixed" => Recipe::HfAmp,
        "full-bf16" => Recipe::PureBf16,
        "lora" => Recipe::Lora,
        other => panic!("unknown mode {other}"),
    };
    let setup = TrainSetup {
        model: &shape,
        recipe,
        lora_rank: 16,
        layout: Layout {
            tp: 1,
            pp: 1,
            cp: 1,
            ep: 1,
            zero: 0,
            recompute: if row.ckpt {
                Recompute::Full
            } else {
                Recompute::None
            },
            micro_batch: row.b,
        },
        dp: 1,
        micro_batches: 1,
        seq_len: row.s,
        task: Task::Sft,
        gpu: GpuKind::H200,
    };
    let m = with_overheads(training_memory(&setup), GpuKind::H200, 1, 0.10);
    (m.peak_bytes, m.required_bytes)
}

#[test]
fn calibration_bars() {
    let capacity = GpuKind::H200.spec().memory_bytes;
    let mut errors = Vec::new();
    println!(
        "{:<13} {:<10} {:>2} {:>5} {:>5} {:>15} {:>15} {:>7}  verdict",
        "model", "mode", "b", "s", "ckpt", "measured", "predicted", "err%"
    );
    for row in rows() {
        let (peak, required) = predict(&row);
        let fits = required <= capacity;
        match row.measured {
            Some(measured) => {
                let err = (peak as f64 - measured as f64) / measured as f64;
                errors.push(err.abs());
                println!(
                    "{:<13} {:<10} {:>2} {:>5} {:>5} {:>15} {:>15} {:>+7.2}  {}",
                    row.model,
                    row.mode,
                    row.b,
                    row.s,
                    row.ckpt,
                    measured,
                    peak,
                    100.0 * err,
                    if fits { "fits" } else { "rejected" }
                );
                let headroom = 1.0 - measured as f64 / capacity as f64;
                assert!(
                    fits || headroom <= 0.15,
                    "bar 2: rejected a configuration measured with {:.0}% headroom",
                    headroom * 100.0
                );
            }
            None => {
                println!(
                    "{:<13} {:<10} {:>2} {:>5} {:>5} {:>15} {:>15} {:>7}  {}",
                    row.model,
                    row.mode,
                    row.b,
                    row.s,
                    row.ckpt,
                    "OOM",
                    peak,
                    "",
                    if fits { "fits" } else { "rejected" }
                );
                assert!(!fits, "bar 2: predicted fits for a measured OOM");
            }
        }
    }
    errors.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = errors[errors.len() / 2];
    let max = *errors.last().unwrap();
    println!(
        "rows {}  median |err| {:.2}%  max |err| {:.2}%",
        errors.len(),
        100.0 * median,
        100.0 * max
    );
    assert!(median <= 0.05, "bar 1: median error {median}");
    assert!(max <= 0.10, "bar 1: max error {max}");
}

//! Compares measured rows with the planner's predictions, for use on the GPU machine after
//! `scripts/measure.py rows` (carry this binary; the machine needs no Rust):
//!
//! `calibrate ROWS.csv [CONFIG_DIR] [GPU]` — configs are `CONFIG_DIR/<model>.json` when present,
//! else the built-in catalogue; GPU defaults to H200. Exit code 1 when a bar is missed.

use std::path::Path;

use ferry_plan::calibrate::{check_rows, parse_csv, render_table, summarize};
use ferry_plan::{GpuKind, ModelShape, shape_of};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(csv) = args.first() else {
        eprintln!("usage: calibrate ROWS.csv [CONFIG_DIR] [GPU]");
        std::process::exit(2);
    };
    let dir = args.get(1).map(Path::new);
    let gpu = args
        .get(2)
        .and_then(|g| GpuKind::parse(g))
        .unwrap_or(GpuKind::H200);
    let text = match std::fs::read_to_string(csv) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{csv}: {e}");
            std::process::exit(2);
        }
    };
    let lookup = |name: &str| {
        if let Some(d) = dir {
            let path = d.join(format!("{name}.json"));
            if let Ok(text) = std::fs::read_to_string(&path) {
                return ModelShape::from_config_json(&text, &path.display().to_string());
            }
        }
        shape_of(name)
    };
    let result = parse_csv(&text, csv).and_then(|rows| check_rows(&rows, gpu, lookup));
    match result {
        Ok(checks) => {
            let summary = summarize(&checks, gpu.spec().memory_bytes);
            print!("{}", render_table(&checks, &summary));
            let ok = summary.median_abs_error <= 0.05
                && summary.max_abs_error <= 0.10
                && summary.fits_but_oom == 0
                && summary.rejected_with_headroom == 0;
            std::process::exit(if ok { 0 } else { 1 });
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}

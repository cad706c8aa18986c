//! A rank process for the built-in trainer: `ferry-engine-train CONFIG.json`.
//!
//! Reads a `TrainConfig` (JSON), resumes from `FERRY_RESUME_FROM` when set, prints one metrics
//! JSON object per step on stdout and a summary JSON on stderr. SIGTERM ends the run after the
//! current step with a checkpoint and exit status 0. `ferry engine train` does the same inside
//! the main binary; this one lets the engine be tested and used on its own.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: ferry-engine-train CONFIG.json");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let cfg: ferry_engine::TrainConfig = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: invalid training config: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let resume = std::env::var_os("FERRY_RESUME_FROM").map(PathBuf::from);
    match ferry_engine::train(&cfg, resume.as_deref(), &mut std::io::stdout()) {
        Ok(summary) => {
            eprintln!("{}", serde_json::to_string(&summary).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

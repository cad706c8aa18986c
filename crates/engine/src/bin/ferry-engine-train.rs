//! A rank process for the built-in trainer: `ferry-engine-train CONFIG.json`, the same as
//! `ferry engine train` in the main binary; this one lets the engine be tested and used on
//! its own. The summary JSON goes to stderr so stdout stays one metrics object per line.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: ferry-engine-train CONFIG.json");
        return ExitCode::from(2);
    };
    match ferry_engine::train_rank(&path) {
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

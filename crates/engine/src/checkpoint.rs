//! Crash-safe checkpoints: everything is written into a temporary directory beside the
//! target and renamed into place, so `checkpoint-N/` either exists complete or not at all.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::rng::Rng;

/// Name of the file holding the trainer's position inside a checkpoint.
pub const TRAINER_STATE: &str = "trainer_state.json";
/// Name of the file holding AdamW's moments inside a checkpoint.
pub const OPTIMIZER_STATE: &str = "optimizer.safetensors";

/// Where a run stands: enough, with the weights and optimizer moments, to continue exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainerState {
    /// Optimizer steps completed.
    pub step: usize,
    /// Steps the run was planned for (the cosine schedule depends on it).
    pub total_steps: usize,
    /// Data position: examples consumed so far.
    pub samples_seen: usize,
    /// Training generator (dropout) state.
    pub rng: Rng,
    /// Loss of the last step.
    pub loss: f64,
    /// `full` or `lora`.
    pub method: String,
}

/// Directory name of the checkpoint after `step` steps.
pub fn checkpoint_name(step: usize) -> String {
    format!("checkpoint-{step}")
}

/// Writes a checkpoint for `step` under `root` by calling `fill` on a fresh temporary
/// directory and renaming it to `root/checkpoint-{step}`; then keeps only the newest `keep`.
pub(crate) fn write_atomically(
    root: &Path,
    step: usize,
    keep: usize,
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    std::fs::create_dir_all(root).map_err(|e| EngineError::io(root, e))?;
    let tmp = root.join(format!(
        ".tmp-{}-{}",
        checkpoint_name(step),
        std::process::id()
    ));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| EngineError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| EngineError::io(&tmp, e))?;
    if let Err(e) = fill(&tmp) {
        std::fs::remove_dir_all(&tmp).ok();
        return Err(e);
    }
    let dst = root.join(checkpoint_name(step));
    if dst.exists() {
        std::fs::remove_dir_all(&dst).map_err(|e| EngineError::io(&dst, e))?;
    }
    std::fs::rename(&tmp, &dst).map_err(|e| EngineError::io(&dst, e))?;
    prune(root, keep.max(1))?;
    Ok(dst)
}

/// Checkpoint directories under `root`, oldest first.
pub fn list_checkpoints(root: &Path) -> Result<Vec<(usize, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(EngineError::io(root, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io(root, e))?;
        let name = entry.file_name();
        if let Some(step) = name
            .to_str()
            .and_then(|n| n.strip_prefix("checkpoint-"))
            .and_then(|s| s.parse::<usize>().ok())
            && entry.path().join(TRAINER_STATE).exists()
        {
            out.push((step, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The newest complete checkpoint under `root`, if any.
pub fn latest_checkpoint(root: &Path) -> Result<Option<PathBuf>> {
    Ok(list_checkpoints(root)?.pop().map(|(_, p)| p))
}

fn prune(root: &Path, keep: usize) -> Result<()> {
    let all = list_checkpoints(root)?;
    if all.len() > keep {
        for (_, p) in &all[..all.len() - keep] {
            std::fs::remove_dir_all(p).map_err(|e| EngineError::io(p, e))?;
        }
    }
    Ok(())
}

/// Resolves `FERRY_RESUME_FROM`: a checkpoint directory itself, or a root holding `checkpoint-N/`s.
pub fn resolve_resume(path: &Path) -> Result<PathBuf> {
    if path.join(TRAINER_STATE).exists() {
        return Ok(path.to_path_buf());
    }
    latest_checkpoint(path)?.ok_or_else(|| EngineError::Weights {
        path: path.to_path_buf(),
        message: format!("no {TRAINER_STATE} here nor any checkpoint-N/ below; point FERRY_RESUME_FROM at a checkpoint"),
    })
}

/// Reads a checkpoint's trainer state.
pub fn read_state(dir: &Path) -> Result<TrainerState> {
    let p = dir.join(TRAINER_STATE);
    let text = std::fs::read_to_string(&p).map_err(|e| EngineError::io(&p, e))?;
    serde_json::from_str(&text).map_err(|e| EngineError::Json {
        path: p.display().to_string(),
        message: e.to_string(),
    })
}

/// Writes JSON to `dir/name`.
pub(crate) fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> Result<()> {
    let p = dir.join(name);
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| EngineError::Json {
        path: p.display().to_string(),
        message: e.to_string(),
    })?;
    std::fs::write(&p, bytes).map_err(|e| EngineError::io(&p, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_fill_leaves_nothing_and_prune_keeps_newest() {
        let root = std::env::temp_dir().join(format!("ferry-engine-ckpt-{}", std::process::id()));
        std::fs::remove_dir_all(&root).ok();
        let state = TrainerState {
            step: 0,
            total_steps: 9,
            samples_seen: 0,
            rng: Rng::new(1),
            loss: 0.0,
            method: "full".into(),
        };
        for step in 1..=3 {
            write_atomically(&root, step, 2, |d| write_json(d, TRAINER_STATE, &state)).unwrap();
        }
        let err = write_atomically(&root, 4, 2, |d| {
            std::fs::write(d.join("half"), b"x").unwrap();
            Err(EngineError::config("x", "simulated crash"))
        });
        assert!(err.is_err());
        let names: Vec<usize> = list_checkpoints(&root)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(names, vec![2, 3]);
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            2,
            "temp dir left behind"
        );
        assert_eq!(resolve_resume(&root).unwrap(), root.join("checkpoint-3"));
        assert!(resolve_resume(&root.join("nope")).is_err());
        std::fs::remove_dir_all(&root).ok();
    }
}

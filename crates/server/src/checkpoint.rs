//! Finding the checkpoint a restarted attempt resumes from.

use std::path::{Path, PathBuf};

use ferry_spec::{EngineKind, TrainJob};

/// How a job's engine lays out its checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The Hugging Face Trainer's `checkpoint-<step>/` (TRL, DeepSpeed and ms-swift jobs
    /// whose launch Ferry renders): nothing else in the output directory is a checkpoint
    /// (ms-swift also writes `images/`, `runs/` and `logging.jsonl` there).
    HfTrainer,
    /// Whatever the engine writes (Ferry's own engine, user commands, Megatron).
    Any,
}

impl Layout {
    /// The layout `job`'s engine writes.
    pub fn of(job: &TrainJob) -> Layout {
        // Every rendered launch but Megatron's runs the HF Trainer.
        if job.spec.renders_launch() && job.spec.engine != EngineKind::Megatron {
            Layout::HfTrainer
        } else {
            Layout::Any
        }
    }
}

/// The newest complete checkpoint in `dir`, if any.
///
/// Megatron-style directories (`latest_checkpointed_iteration.txt`) resume from the
/// directory itself, since Megatron's `--load` takes it. Otherwise the entry with the
/// highest step number in its name wins (`step-000200` over `step-000100`), then the
/// newest. Hidden entries and ones still being written (`.tmp`, `.partial`,
/// `.incomplete` suffixes) are never chosen: engines write to a temporary name and
/// rename, so whatever has its final name is complete. The Hugging Face Trainer is the
/// exception: it writes `checkpoint-<step>` in place, `trainer_state.json` last, so in a
/// directory of its checkpoints ([`Layout::HfTrainer`], or some `checkpoint-*` has that
/// file) only a `checkpoint-*` with it counts: one without was cut off, and the Trainer's
/// other output (`runs/`, ms-swift's `images/`) is no checkpoint (the launch prelude in
/// `ferry-plan` looks the same way). Other engines' own `checkpoint-*` layouts are taken as
/// they are.
pub fn latest_checkpoint(dir: &Path, layout: Layout) -> Option<PathBuf> {
    if dir.join("latest_checkpointed_iteration.txt").is_file() {
        return Some(dir.to_path_buf());
    }
    // Each entry with, for a `checkpoint-*` one, whether its trainer state was written.
    let entries: Vec<(std::fs::DirEntry, Option<bool>)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| {
            let trainer = e.file_name().to_string_lossy().starts_with("checkpoint-");
            let state = trainer.then(|| e.path().join("trainer_state.json").is_file());
            (e, state)
        })
        .collect();
    let trainer_dir =
        layout == Layout::HfTrainer || entries.iter().any(|(_, state)| *state == Some(true));
    entries
        .into_iter()
        .filter_map(|(e, state)| {
            let name = e.file_name().to_string_lossy().into_owned();
            let unfinished = [".tmp", ".partial", ".incomplete"]
                .iter()
                .any(|s| name.ends_with(s));
            // Checkpoints are directories; files beside them (a shared tokenizer) are not.
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            let cut_off = trainer_dir && state != Some(true);
            if name.starts_with('.') || unfinished || !is_dir || cut_off {
                return None;
            }
            let modified = e.metadata().and_then(|m| m.modified()).ok();
            Some((trailing_number(&name), modified, e.path()))
        })
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)))
        .map(|(_, _, path)| path)
}

fn trailing_number(name: &str) -> Option<u64> {
    let stem = name.split('.').next().unwrap_or(name);
    let digits: String = stem
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ms-swift writes `images/` and `runs/` beside its checkpoints: before its first
    /// checkpoint, an HF Trainer job has none (found on an H200 run, where the requeue
    /// message named `images/`).
    #[test]
    fn an_hf_trainer_job_resumes_only_from_complete_checkpoint_dirs() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["images", "runs", "checkpoint-8"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        assert_eq!(latest_checkpoint(dir.path(), Layout::HfTrainer), None);
        // Any other engine's directory is its checkpoint, whatever its name.
        assert!(latest_checkpoint(dir.path(), Layout::Any).is_some());
        std::fs::create_dir(dir.path().join("checkpoint-5")).unwrap();
        std::fs::write(dir.path().join("checkpoint-5/trainer_state.json"), "{}").unwrap();
        for layout in [Layout::HfTrainer, Layout::Any] {
            assert_eq!(
                latest_checkpoint(dir.path(), layout),
                Some(dir.path().join("checkpoint-5"))
            );
        }
    }

    #[test]
    fn highest_step_wins_and_unfinished_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(latest_checkpoint(dir.path(), Layout::Any), None);
        for name in ["step-9", "step-10", "step-11.tmp", ".step-12"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        assert_eq!(
            latest_checkpoint(dir.path(), Layout::Any),
            Some(dir.path().join("step-10"))
        );
    }

    #[test]
    fn a_trainer_checkpoint_without_its_state_file_was_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        for (name, complete) in [("checkpoint-5", true), ("checkpoint-40", false)] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            if complete {
                std::fs::write(dir.path().join(name).join("trainer_state.json"), "{}").unwrap();
            }
        }
        assert_eq!(
            latest_checkpoint(dir.path(), Layout::Any),
            Some(dir.path().join("checkpoint-5"))
        );
    }

    #[test]
    fn checkpoint_directories_of_other_engines_need_no_trainer_state() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["checkpoint-5", "checkpoint-40"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        assert_eq!(
            latest_checkpoint(dir.path(), Layout::Any),
            Some(dir.path().join("checkpoint-40"))
        );
    }

    #[test]
    fn megatron_directories_resume_from_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("iter_0000100")).unwrap();
        std::fs::write(dir.path().join("latest_checkpointed_iteration.txt"), "100").unwrap();
        assert_eq!(
            latest_checkpoint(dir.path(), Layout::Any),
            Some(dir.path().to_path_buf())
        );
    }

    #[test]
    fn a_missing_directory_has_no_checkpoint() {
        assert_eq!(
            latest_checkpoint(Path::new("/nonexistent/ferry"), Layout::Any),
            None
        );
    }
}

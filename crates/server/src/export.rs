//! Export of a finished job's final checkpoint as a registered model, with lineage.
//!
//! Built-in engine checkpoints are already Hugging Face directories: their model files
//! (not the optimizer state) are copied under `$FERRY_HOME/models/<name>/<job uid>`.
//! Megatron checkpoints (legacy or torch_dist) are converted there by `ferry-ckpt`,
//! streaming one tensor group at a time. The record names the job and checkpoint.

use std::path::{Path, PathBuf};

use ferry_spec::EngineKind;
use ferry_store::{JobRecord, ModelRecord, StoreError};

use crate::checkpoint::{Layout, latest_checkpoint};
use crate::engines::resolve_engine;
use crate::state::ControlPlane;

/// Files of a built-in checkpoint that belong to the trainer, not the model.
const TRAINER_FILES: [&str; 2] = [ferry_engine::OPTIMIZER_STATE, ferry_engine::TRAINER_STATE];

/// The model name a job's export registers: `spec.export.register`, else the job's name.
pub(crate) fn export_name(job: &JobRecord) -> Option<String> {
    let export = job.job.spec.export.as_ref()?;
    Some(export.register.clone().unwrap_or_else(|| job.name.clone()))
}

/// Exports and registers the job's model; `Ok(None)` when the spec asks for no export.
/// The error is a sentence for the job's `ExportFailed` event.
pub(crate) async fn export(
    plane: &ControlPlane,
    job: &JobRecord,
) -> Result<Option<ModelRecord>, String> {
    let Some(name) = export_name(job) else {
        return Ok(None);
    };
    let checkpoint_root = plane.checkpoint_dir(job);
    let checkpoint = latest_checkpoint(&checkpoint_root, Layout::of(&job.job)).ok_or_else(|| {
        format!(
            "the job asked for an export but wrote no checkpoint under {}; have the engine save one at the end",
            checkpoint_root.display()
        )
    })?;
    let dest = plane
        .config()
        .home
        .join("models")
        .join(&name)
        .join(&job.uid);
    let megatron = resolve_engine(&job.job) == EngineKind::Megatron
        || checkpoint
            .join("latest_checkpointed_iteration.txt")
            .is_file();
    let (src, dst) = (checkpoint.clone(), dest.clone());
    // Megatron checkpoints carry no tokenizer: take the base model's when it has one.
    let tokenizer_dir = job
        .job
        .spec
        .model
        .as_ref()
        .and_then(|m| m.path.as_deref())
        .map(|p| crate::engines::in_working_dir(&job.job, p))
        .filter(|p| p.join("tokenizer.json").is_file() || p.join("tokenizer.model").is_file());
    let format = tokio::task::spawn_blocking(move || {
        if megatron {
            convert_megatron(&src, &dst, tokenizer_dir)
        } else {
            copy_model_files(&src, &dst)
        }
    })
    .await
    .map_err(|e| format!("export task failed: {e}"))??;
    let record = ModelRecord {
        source_job_uid: Some(job.uid.clone()),
        checkpoint: Some(checkpoint.to_string_lossy().into_owned()),
        labels: job.job.metadata.labels.clone(),
        ..ModelRecord::new(&name, dest.to_string_lossy(), format)
    };
    match plane.store().register_model(&record).await {
        Ok(r) => Ok(Some(r)),
        Err(StoreError::AlreadyExists { .. }) => {
            // The control plane may have stopped between registering and recording success.
            if let Ok(Some(existing)) = plane.store().get_model(&name).await
                && existing.source_job_uid.as_deref() == Some(job.uid.as_str())
            {
                return Ok(Some(existing));
            }
            Err(format!(
                "a model named {name} is already registered; the export is kept at {} — pick another spec.export.register, or free the name with `ferry delete model {name}` and run the job again",
                dest.display()
            ))
        }
        Err(e) => Err(format!("registering model {name} failed: {e}")),
    }
}

/// Copies a built-in checkpoint's model files; returns the registered format.
fn copy_model_files(src: &Path, dst: &Path) -> Result<&'static str, String> {
    std::fs::create_dir_all(dst).map_err(|e| format!("cannot create {}: {e}", dst.display()))?;
    let entries =
        std::fs::read_dir(src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let mut adapter = false;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", src.display()))?;
        let file_name = entry.file_name();
        let name = file_name.to_string_lossy();
        if !entry.path().is_file() || TRAINER_FILES.contains(&name.as_ref()) {
            continue;
        }
        adapter |= name == "adapter_config.json";
        let to: PathBuf = dst.join(&file_name);
        // A hard link costs nothing when the checkpoint is on the same disk.
        if std::fs::hard_link(entry.path(), &to).is_err() {
            std::fs::copy(entry.path(), &to).map_err(|e| {
                format!(
                    "cannot copy {} to {}: {e}",
                    entry.path().display(),
                    to.display()
                )
            })?;
        }
    }
    Ok(if adapter { "peft" } else { "hf-safetensors" })
}

/// Converts a Megatron checkpoint to Hugging Face safetensors.
fn convert_megatron(
    src: &Path,
    dst: &Path,
    tokenizer_dir: Option<PathBuf>,
) -> Result<&'static str, String> {
    let opts = ferry_ckpt::ConvertOptions {
        overwrite: true,
        tokenizer_dir,
        ..Default::default()
    };
    ferry_ckpt::convert(src, dst, &opts, &|_| {}).map_err(|e| {
        format!(
            "converting {} to Hugging Face format failed: {e}",
            src.display()
        )
    })?;
    Ok("hf-safetensors")
}

//! Engine adapters: how a `TrainJob` becomes the command line and environment of
//! each rank. The `command` engine runs the user's command as it is; `builtin` runs
//! Ferry's own candle trainer; torchrun, DeepSpeed, ms-swift and Megatron-LM run the
//! launch the planner renders (or, for Megatron, the user's own command when given).

mod builtin;
mod planned;

use planned::PlannedEngine;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferry_runtime::LaunchRequest;
use ferry_spec::{EngineKind, FieldError, TrainJob};
use ferry_store::JobRecord;

/// Everything an adapter may use to build one attempt's launch.
#[derive(Debug, Clone)]
pub struct LaunchContext<'a> {
    /// The job as stored.
    pub job: &'a JobRecord,
    /// Attempt number being launched.
    pub attempt: u32,
    /// Directory for logs and exit records.
    pub run_dir: PathBuf,
    /// Directory the engine writes checkpoints to (`FERRY_CHECKPOINT_DIR`).
    pub checkpoint_dir: PathBuf,
    /// Checkpoint to resume from (`FERRY_RESUME_FROM`), when restarting.
    pub resume_from: Option<PathBuf>,
    /// GPU ids per rank.
    pub gpus_per_rank: Vec<Vec<String>>,
    /// The weights `spec.model` names, resolved to a directory (registered artifacts
    /// looked up in the store, relative paths joined to the working directory).
    pub model_dir: Option<PathBuf>,
    /// The `ferry` binary, for engines that run inside it (`ferry engine train`).
    pub self_exe: &'a Path,
}

/// Turns a job into rank processes for one engine.
pub trait EngineAdapter: Send + Sync {
    /// The engine's name as written in `spec.engine`.
    fn name(&self) -> &'static str;

    /// Engine-specific checks done at apply time, beyond the spec's own.
    fn validate(&self, _job: &TrainJob) -> Vec<FieldError> {
        Vec::new()
    }

    /// The argv, environment and working directory of every rank.
    fn launch(&self, ctx: &LaunchContext<'_>) -> Result<LaunchRequest, FieldError>;

    /// Seconds the job is predicted to train for, when the engine can tell before it runs
    /// (the planner's step time for launcher engines); the scheduler's expected duration for
    /// a job without `spec.maxRuntimeSeconds`, until its measured pace replaces it.
    fn estimated_duration_s(&self, _job: &TrainJob) -> Option<u64> {
        None
    }
}

/// The engine `engine: auto` stands for: the user's command when one is given, else the
/// built-in engine.
pub fn resolve_engine(job: &TrainJob) -> EngineKind {
    match job.spec.engine {
        EngineKind::Auto if !job.spec.command.is_empty() => EngineKind::Command,
        EngineKind::Auto => EngineKind::Builtin,
        other => other,
    }
}

/// The adapter for a job's engine (every engine has one; the `Result` keeps the seam for
/// builds that leave some out).
pub fn adapter_for(job: &TrainJob) -> Result<&'static dyn EngineAdapter, FieldError> {
    match resolve_engine(job) {
        EngineKind::Command => Ok(&CommandEngine),
        // `resolve_engine` never returns auto.
        EngineKind::Builtin | EngineKind::Auto => Ok(&builtin::BuiltinEngine),
        // Launcher engines with the user's own launch script run it like `command`.
        EngineKind::Megatron if !job.spec.command.is_empty() => Ok(&MegatronEngine),
        EngineKind::Torchrun | EngineKind::Deepspeed | EngineKind::Swift
            if !job.spec.command.is_empty() =>
        {
            Ok(&CommandEngine)
        }
        EngineKind::Megatron => Ok(&PlannedEngine { name: "megatron" }),
        EngineKind::Torchrun => Ok(&PlannedEngine { name: "torchrun" }),
        EngineKind::Deepspeed => Ok(&PlannedEngine { name: "deepspeed" }),
        EngineKind::Swift => Ok(&PlannedEngine { name: "swift" }),
    }
}

/// Joins a relative path from the spec to the job's working directory.
pub(crate) fn in_working_dir(job: &TrainJob, path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    match (&job.spec.working_dir, p.is_relative()) {
        (Some(wd), true) => PathBuf::from(wd).join(p),
        _ => p,
    }
}

/// Environment every engine's ranks get from the control plane (on top of the
/// distributed variables the runtime sets).
pub(crate) fn base_env(ctx: &LaunchContext<'_>) -> BTreeMap<String, String> {
    let spec = &ctx.job.job.spec;
    let mut env = spec.env.clone();
    // Python engines buffer stdout when it is a file; `ferry logs -f` should see lines as they come.
    env.entry("PYTHONUNBUFFERED".into())
        .or_insert_with(|| "1".into());
    env.insert("FERRY_JOB_NAME".into(), ctx.job.name.clone());
    env.insert("FERRY_NAMESPACE".into(), ctx.job.namespace.clone());
    env.insert(
        "FERRY_RUN_DIR".into(),
        ctx.run_dir.to_string_lossy().into_owned(),
    );
    env.insert(
        "FERRY_CHECKPOINT_DIR".into(),
        ctx.checkpoint_dir.to_string_lossy().into_owned(),
    );
    if let Some(every) = spec.checkpoint.every {
        env.insert("FERRY_CHECKPOINT_EVERY".into(), every.to_string());
    }
    if let Some(resume) = &ctx.resume_from {
        env.insert(
            "FERRY_RESUME_FROM".into(),
            resume.to_string_lossy().into_owned(),
        );
    }
    env
}

fn request(ctx: &LaunchContext<'_>, argv: Vec<String>) -> LaunchRequest {
    let spec = &ctx.job.job.spec;
    LaunchRequest {
        job: ctx.job.uid.clone(),
        attempt: ctx.attempt,
        nodes: spec.resources.nodes.max(1) as u32,
        procs_per_node: spec.resources.effective_procs_per_node(),
        argv,
        env: base_env(ctx),
        working_dir: spec.working_dir.as_ref().map(PathBuf::from),
        gpus_per_rank: ctx.gpus_per_rank.clone(),
        run_dir: ctx.run_dir.clone(),
    }
}

/// `engine: command`: the user's command, once per rank, like a Kubernetes Job.
struct CommandEngine;

impl EngineAdapter for CommandEngine {
    fn name(&self) -> &'static str {
        "command"
    }

    fn launch(&self, ctx: &LaunchContext<'_>) -> Result<LaunchRequest, FieldError> {
        let command = &ctx.job.job.spec.command;
        if command.is_empty() {
            return Err(FieldError::new(
                "spec.command",
                "is required for engine: command",
            ));
        }
        Ok(request(ctx, command.clone()))
    }
}

/// `engine: megatron` with `spec.command`: the user's own Megatron-LM launch command once
/// per rank (or per node with torchrun), checkpoints in `FERRY_CHECKPOINT_DIR` (pass it as
/// `--save`/`--load`); on success `spec.export` converts the Megatron checkpoint to Hugging
/// Face format. Without a command the planner renders the launch ([`PlannedEngine`]).
struct MegatronEngine;

impl EngineAdapter for MegatronEngine {
    fn name(&self) -> &'static str {
        "megatron"
    }

    fn validate(&self, job: &TrainJob) -> Vec<FieldError> {
        megatron_method_error(job).into_iter().collect()
    }

    fn launch(&self, ctx: &LaunchContext<'_>) -> Result<LaunchRequest, FieldError> {
        Ok(request(ctx, ctx.job.job.spec.command.clone()))
    }
}

/// Megatron-LM's `pretrain_gpt.py` trains full weights only.
fn megatron_method_error(job: &TrainJob) -> Option<FieldError> {
    matches!(
        job.spec.method,
        ferry_spec::Method::Lora | ferry_spec::Method::Qlora
    )
    .then(|| {
        FieldError::new(
            "spec.method",
            "Megatron-LM trains full weights; use method: full, or engine: torchrun or swift for LoRA",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec.command` on a launcher engine is the user's own launch script: it runs as given
    /// (Megatron keeps its checkpoint handling around it), never replaced by the rendered one.
    #[test]
    fn a_launcher_engine_with_a_command_runs_that_command() {
        for (engine, adapter) in [
            ("torchrun", "command"),
            ("deepspeed", "command"),
            ("swift", "command"),
            ("auto", "command"),
            ("megatron", "megatron"),
        ] {
            let text = format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: own}}\nspec:\n  engine: {engine}\n  command: [bash, launch.sh]\n  resources: {{nodes: 1, gpusPerNode: 1}}\n"
            );
            let Some(ferry_spec::Resource::TrainJob(job)) =
                ferry_spec::parse_documents(&text, "own.yaml")
                    .unwrap()
                    .pop()
            else {
                panic!("not a TrainJob");
            };
            assert_eq!(adapter_for(&job).unwrap().name(), adapter, "{engine}");
        }
    }
}

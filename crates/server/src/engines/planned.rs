//! `engine: torchrun | deepspeed | swift`, and `engine: megatron` without a command: the
//! planner chooses the method and parallel layout for the job's model and GPUs, renders the
//! launcher's command line, and each node runs it once (the launcher starts one process per
//! GPU itself). The same rendering feeds the Kubernetes backend's pods.

use std::path::{Path, PathBuf};

use ferry_plan::{JobPaths, ModelShape, PlanError, PlanReport};
use ferry_runtime::LaunchRequest;
use ferry_spec::{FieldError, ModelSource, TrainJob};

use super::{EngineAdapter, LaunchContext, in_working_dir, request};

/// A launcher engine driven by the planner.
pub(super) struct PlannedEngine {
    /// `spec.engine` as written.
    pub(super) name: &'static str,
}

impl EngineAdapter for PlannedEngine {
    fn name(&self) -> &'static str {
        self.name
    }

    fn validate(&self, job: &TrainJob) -> Vec<FieldError> {
        let res = &job.spec.resources;
        if let Some(procs) = res.procs_per_node
            && procs != res.gpus_per_node
        {
            return vec![FieldError::new(
                "spec.resources.procsPerNode",
                format!(
                    "engine {} starts one rank per GPU itself; remove procsPerNode or set it to gpusPerNode ({})",
                    self.name, res.gpus_per_node
                ),
            )];
        }
        if self.name == "megatron"
            && let Some(e) = super::megatron_method_error(job)
        {
            return vec![e];
        }
        // A registered artifact is resolved by the store at launch; everything else is
        // planned now, so a job that cannot fit is refused at apply, not failed later.
        let Some(model_dir) = model_dir_at_apply(job) else {
            return Vec::new();
        };
        // Rendering too: a plan the launcher cannot run (LoRA under Megatron) is refused now.
        let paths = JobPaths {
            data: "data".into(),
            checkpoint_dir: "checkpoints".into(),
            config_dir: "config".into(),
        };
        let rendered = plan(job, model_dir.as_deref())
            .and_then(|report| ferry_plan::job_launch(job, &report, &paths).map_err(plan_error));
        match rendered {
            Ok(_) => Vec::new(),
            Err(e) => vec![e],
        }
    }

    fn launch(&self, ctx: &LaunchContext<'_>) -> Result<LaunchRequest, FieldError> {
        let job = &ctx.job.job;
        let report = plan(job, ctx.model_dir.as_deref())?;
        let data = job.spec.data.as_ref().map_or_else(
            || "train.jsonl".to_owned(),
            |d| in_working_dir(job, &d.path).to_string_lossy().into_owned(),
        );
        let paths = JobPaths {
            data,
            checkpoint_dir: ctx.checkpoint_dir.to_string_lossy().into_owned(),
            config_dir: ctx.run_dir.to_string_lossy().into_owned(),
        };
        let launch = ferry_plan::job_launch(job, &report, &paths).map_err(plan_error)?;
        for (name, text) in &launch.files {
            let path = ctx.run_dir.join(name);
            std::fs::create_dir_all(&ctx.run_dir)
                .and_then(|()| std::fs::write(&path, text))
                .map_err(|e| {
                    FieldError::new("", format!("cannot write {}: {e}", path.display()))
                })?;
        }
        let mut req = request(ctx, launch.argv());
        // One launcher process per node, holding every GPU of its node.
        let per_node = job.spec.resources.effective_procs_per_node() as usize;
        req.gpus_per_rank = ctx
            .gpus_per_rank
            .chunks(per_node.max(1))
            .map(|ranks| ranks.concat())
            .collect();
        req.procs_per_node = 1;
        Ok(req)
    }

    /// The planner's expected run time (`ferry_plan::expected_run_s`).
    fn estimated_duration_s(&self, job: &TrainJob) -> Option<u64> {
        let report = plan(job, model_dir_at_apply(job)?.as_deref()).ok()?;
        ferry_plan::expected_run_s(job, &report)
    }
}

/// Where the job's model is on disk before launch: `Some(None)` for a hub model (the
/// planner's catalogue has its shape), `None` for a registered artifact (resolved by the
/// store at launch, so it cannot be planned yet).
fn model_dir_at_apply(job: &TrainJob) -> Option<Option<PathBuf>> {
    match job.spec.model.as_ref().map(|m| m.source) {
        Some(ModelSource::Artifact) => None,
        Some(ModelSource::Path) => Some(
            job.spec
                .model
                .as_ref()
                .and_then(|m| m.path.as_deref())
                .map(|p| in_working_dir(job, p)),
        ),
        _ => Some(None),
    }
}

/// The plan for `job`: its model's shape from `model_dir/config.json` when it is on disk,
/// else from the planner's catalogue of hub models.
fn plan(job: &TrainJob, model_dir: Option<&Path>) -> Result<PlanReport, FieldError> {
    let (shape, name) = shape(job, model_dir)?;
    let request = ferry_plan::request_for_job(job, shape, &name).map_err(plan_error)?;
    ferry_plan::plan(&request).map_err(plan_error)
}

fn shape(job: &TrainJob, model_dir: Option<&Path>) -> Result<(ModelShape, String), FieldError> {
    let model = job.spec.model.as_ref().ok_or_else(|| {
        FieldError::new(
            "spec.model",
            "is required to plan the launch: {source: hf, id: ORG/NAME} or {source: path, path: DIR}",
        )
    })?;
    if let Some(dir) = model_dir {
        let file: PathBuf = dir.join("config.json");
        let text = std::fs::read_to_string(&file).map_err(|e| {
            FieldError::new(
                "spec.model",
                format!(
                    "cannot read {}: {e}; the planner needs the model's config.json",
                    file.display()
                ),
            )
        })?;
        let shape =
            ModelShape::from_config_json(&text, &file.to_string_lossy()).map_err(plan_error)?;
        return Ok((shape, dir.to_string_lossy().into_owned()));
    }
    match model.source {
        ModelSource::Hf => {
            let id = model.id.clone().unwrap_or_default();
            let shape = ferry_plan::shape_of(&id).map_err(|e| {
                FieldError::new(
                    "spec.model.id",
                    format!("{e}; or download the model and use source: path"),
                )
            })?;
            Ok((shape, id))
        }
        other => Err(FieldError::new(
            "spec.model.source",
            format!(
                "engine {} plans from a Hugging Face id or a model directory; {} has no config.json to plan from",
                job.spec.engine.as_str(),
                match other {
                    ModelSource::Scratch => "source: scratch",
                    _ => "this source",
                }
            ),
        )),
    }
}

/// A planner error as a field error: invalid requests name their field already.
fn plan_error(e: PlanError) -> FieldError {
    match e {
        PlanError::InvalidRequest { field, reason } => {
            let path = if field.starts_with("spec.") {
                field
            } else {
                format!("spec.{field}")
            };
            FieldError::new(path, reason)
        }
        other => FieldError::new("spec", other.to_string()),
    }
}

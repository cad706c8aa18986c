//! `ferry plan -f job.yaml`: the planner's choice of method and parallel layout for a
//! `TrainJob`, with the memory breakdown, the reasoning and the launch command.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use ferry_plan::{ModelShape, PlanRequest};
use ferry_spec::{ModelSource, Resource, TrainJob};

use crate::args::Output;
use crate::output;

/// Options of `ferry plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The TrainJob to plan.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Also print the launch command for this launcher: megatron, torchrun, deepspeed, swift.
    #[arg(long)]
    pub render: Option<String>,
    /// Output format (the report when omitted).
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
}

fn shape(job: &TrainJob) -> anyhow::Result<(ModelShape, String)> {
    let model = job.spec.model.as_ref().ok_or_else(|| {
        anyhow!("spec.model: is required to plan; e.g. model: {{source: hf, id: Qwen/Qwen2.5-7B}}")
    })?;
    match model.source {
        ModelSource::Hf => {
            let id = model.id.clone().unwrap_or_default();
            Ok((ferry_plan::shape_of(&id)?, id))
        }
        ModelSource::Path => {
            let dir = PathBuf::from(model.path.clone().unwrap_or_default());
            let file = dir.join("config.json");
            let text = std::fs::read_to_string(&file)
                .map_err(|e| anyhow!("spec.model.path: cannot read {}: {e}", file.display()))?;
            Ok((
                ModelShape::from_config_json(&text, &file.display().to_string())?,
                dir.display().to_string(),
            ))
        }
        other => bail!("spec.model.source: planning needs source hf or path (got {other:?})"),
    }
}

/// Maps a `TrainJob` onto the planner's request (the mapping lives in `ferry-plan`, shared
/// with the Kubernetes backend; here the model may also come from a local `config.json`).
pub fn request(job: &TrainJob) -> anyhow::Result<PlanRequest> {
    let (model, name) = shape(job)?;
    Ok(ferry_plan::request_for_job(job, model, &name)?)
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let source = args.file.display().to_string();
    let docs = ferry_spec::parse_documents(&text, &source)?;
    let Some(Resource::TrainJob(job)) = docs
        .into_iter()
        .find(|d| matches!(d, Resource::TrainJob(_)))
    else {
        bail!("{source}: no TrainJob to plan");
    };
    let report = ferry_plan::plan(&request(&job)?)?;
    if output::structured(&report, args.output)? {
        return Ok(());
    }
    println!("{report}");
    if let Some(name) = args.render {
        let launcher = ferry_plan::Launcher::from_name(&name).ok_or_else(|| {
            anyhow!(
                "--render: unknown launcher {name:?}; use megatron, torchrun, deepspeed or swift"
            )
        })?;
        // The job's own values; paths as the job names them (the control plane puts its
        // checkpoint directory there when `spec.checkpoint.dir` is left out).
        let spec = &job.spec;
        let paths = ferry_plan::JobPaths {
            data: spec
                .data
                .as_ref()
                .map_or_else(|| "train.jsonl".to_owned(), |d| d.path.clone()),
            checkpoint_dir: spec
                .checkpoint
                .dir
                .clone()
                .unwrap_or_else(|| "$FERRY_CHECKPOINT_DIR".to_owned()),
            config_dir: ".".into(),
        };
        let opts = ferry_plan::render_options(&job, &paths);
        println!("{}", ferry_plan::render_train(&report, launcher, &opts)?);
    }
    Ok(())
}

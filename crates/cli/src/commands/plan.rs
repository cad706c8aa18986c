//! `ferry plan -f job.yaml`: the planner's choice of method and parallel layout for a
//! `TrainJob`, with the memory breakdown, the reasoning and the launch command.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use ferry_plan::{GpuKind, Layout, Method, ModelShape, Parallelism, PlanRequest, Recompute};
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

/// Maps a `TrainJob` onto the planner's request.
pub fn request(job: &TrainJob) -> anyhow::Result<PlanRequest> {
    let (model, name) = shape(job)?;
    let res = &job.spec.resources;
    let gpu_name = res.gpu.as_deref().unwrap_or("H100-80GB");
    let gpu = GpuKind::parse(gpu_name).ok_or_else(|| {
        anyhow!("spec.resources.gpu: unknown GPU {gpu_name:?}; use A100, H100, H200, H800, L40S or RTX4090")
    })?;
    let total = res.total_gpus() as u64;
    if total == 0 {
        bail!("spec.resources.gpusPerNode: a GPU plan needs at least 1 GPU (got 0)");
    }
    let seq_len = job.spec.train.seq_len.unwrap_or(4096).max(1) as u64;
    let mut req = PlanRequest::new(model, &name, gpu, total, seq_len);
    req.nodes = res.nodes.max(1) as u64;
    req.gpus_per_node = res.gpus_per_node.max(1) as u64;
    let rank = job.spec.lora.as_ref().map_or(16, |l| l.rank.max(1) as u64);
    let mode = match job.spec.method {
        ferry_spec::Method::Auto => "auto",
        ferry_spec::Method::Full => "full-mixed",
        ferry_spec::Method::Lora => "lora",
        ferry_spec::Method::Qlora => "qlora",
    };
    req.method = Method::from_mode(mode, rank)?;
    req.engine = match job.spec.engine {
        ferry_spec::EngineKind::Megatron => ferry_plan::Engine::Megatron,
        ferry_spec::EngineKind::Torchrun => ferry_plan::Engine::Torchrun,
        ferry_spec::EngineKind::Deepspeed => ferry_plan::Engine::Deepspeed,
        ferry_spec::EngineKind::Swift => ferry_plan::Engine::Swift,
        _ => ferry_plan::Engine::Auto,
    };
    if let Some(gb) = job.spec.train.global_batch {
        req.global_batch = gb.max(1) as u64;
    }
    let p = &job.spec.parallelism;
    if !p.is_auto() {
        let recompute = match p.recompute.as_deref() {
            Some("selective") => Recompute::Selective,
            Some("full") => Recompute::Full,
            _ => Recompute::None,
        };
        let pos = |v: Option<i32>| v.unwrap_or(1).max(1) as u64;
        req.parallelism = Parallelism::Fixed(Layout {
            tp: pos(p.tp),
            pp: pos(p.pp),
            cp: pos(p.cp),
            ep: pos(p.ep),
            zero: p.zero.unwrap_or(0).clamp(0, 3) as u8,
            recompute,
            micro_batch: pos(p.micro_batch),
        });
    }
    Ok(req)
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
    if let Some(launcher) = args.render {
        let launcher = match launcher.as_str() {
            "megatron" => ferry_plan::Launcher::Megatron,
            "torchrun" => ferry_plan::Launcher::Torchrun,
            "deepspeed" => ferry_plan::Launcher::Deepspeed,
            "swift" => ferry_plan::Launcher::Swift,
            other => bail!(
                "--render: unknown launcher {other:?}; use megatron, torchrun, deepspeed or swift"
            ),
        };
        let opts = ferry_plan::RenderOptions::default();
        println!("{}", ferry_plan::render_train(&report, launcher, &opts)?);
    }
    Ok(())
}

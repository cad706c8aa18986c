//! A `TrainJob` (the spec crate's type) as a planner request: the one mapping that
//! `ferry plan`, the local runtime and the Kubernetes backend share. Finding the model's
//! shape (hub catalogue, a `config.json` on disk) is left to the caller, so the planner
//! still does no I/O.

use ferry_spec::{EngineKind, TrainJob};

use crate::error::{PlanError, Result};
use crate::gpu::GpuKind;
use crate::model::ModelShape;
use crate::request::{Engine, Layout, Method, Parallelism, PlanRequest, Recompute};
use crate::search::PlanReport;

/// GPU assumed when `spec.resources.gpu` is omitted.
pub const DEFAULT_GPU: &str = "H100-80GB";
/// Sequence length assumed when `spec.train.seqLen` is omitted.
pub const DEFAULT_SEQ_LEN: u64 = 4096;
/// LoRA rank assumed when `spec.lora` is omitted.
pub const DEFAULT_LORA_RANK: u64 = 16;

fn invalid(field: &str, reason: String) -> PlanError {
    PlanError::InvalidRequest {
        field: field.into(),
        reason,
    }
}

/// How long `job`, planned as `report`, is expected to run, for a scheduler's reservations and
/// backfill before its pace is measured: twice the predicted time (the planner's step times are
/// kept within 2x of measured ones) for `spec.train.steps` steps, else for the data the plan
/// knows of; `None` when neither is known.
pub fn expected_run_s(job: &TrainJob, report: &PlanReport) -> Option<u64> {
    let t = &report.chosen.throughput;
    let seconds = match job.spec.train.steps.filter(|s| *s > 0) {
        Some(steps) => t.step_s * steps as f64,
        None => t.total_hours? * 3600.0,
    };
    (seconds.is_finite() && seconds > 0.0).then(|| (2.0 * seconds).ceil() as u64)
}

/// The planner's request for `job`, whose model has `shape` and is called `model_name`.
/// Errors name the spec field (`spec.resources.gpu`, …) and the fix.
pub fn request_for_job(job: &TrainJob, shape: ModelShape, model_name: &str) -> Result<PlanRequest> {
    let spec = &job.spec;
    let res = &spec.resources;
    let gpu_name = res.gpu.as_deref().unwrap_or(DEFAULT_GPU);
    let gpu = GpuKind::parse(gpu_name).ok_or_else(|| {
        invalid(
            "spec.resources.gpu",
            format!("unknown GPU {gpu_name:?}; use A100, H100, H200, H800, L40S or RTX4090"),
        )
    })?;
    let total = u64::from(res.total_gpus());
    if total == 0 {
        return Err(invalid(
            "spec.resources.gpusPerNode",
            format!(
                "engine {} needs at least 1 GPU to plan (got 0); set gpusPerNode or use engine: command",
                spec.engine.as_str()
            ),
        ));
    }
    let seq_len = spec
        .train
        .seq_len
        .map_or(DEFAULT_SEQ_LEN, |s| s.max(1) as u64);
    let mut req = PlanRequest::new(shape, model_name, gpu, total, seq_len);
    req.nodes = res.nodes.max(1) as u64;
    req.gpus_per_node = res.gpus_per_node.max(1) as u64;
    let rank = spec
        .lora
        .as_ref()
        .map_or(DEFAULT_LORA_RANK, |l| l.rank.max(1) as u64);
    let mode = match spec.method {
        ferry_spec::Method::Auto => "auto",
        ferry_spec::Method::Full => "full-mixed",
        ferry_spec::Method::Lora => "lora",
        ferry_spec::Method::Qlora => "qlora",
    };
    req.method = Method::from_mode(mode, rank)?;
    req.engine = match spec.engine {
        EngineKind::Megatron => Engine::Megatron,
        EngineKind::Torchrun => Engine::Torchrun,
        EngineKind::Deepspeed => Engine::Deepspeed,
        EngineKind::Swift => Engine::Swift,
        _ => Engine::Auto,
    };
    if let Some(gb) = spec.train.global_batch {
        req.global_batch = gb.max(1) as u64;
    }
    let p = &spec.parallelism;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(yaml: &str) -> TrainJob {
        match ferry_spec::parse_documents(yaml, "job.yaml")
            .unwrap()
            .remove(0)
        {
            ferry_spec::Resource::TrainJob(j) => j,
            other => panic!("not a TrainJob: {other:?}"),
        }
    }

    const JOB: &str = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\nspec:\n  \
        model: {source: hf, id: Qwen/Qwen2.5-7B}\n  engine: megatron\n  method: lora\n  lora: {rank: 32}\n  \
        resources: {nodes: 2, gpusPerNode: 8, gpu: H200}\n  train: {seqLen: 2048, globalBatch: 64}\n  \
        parallelism: {tp: 2, pp: 2, recompute: selective}\n";

    #[test]
    fn every_field_reaches_the_request() {
        let j = job(JOB);
        let req = request_for_job(
            &j,
            crate::shape_of("Qwen/Qwen2.5-7B").unwrap(),
            "Qwen/Qwen2.5-7B",
        )
        .unwrap();
        assert_eq!((req.nodes, req.gpus_per_node, req.global_batch), (2, 8, 64));
        assert_eq!(req.engine, Engine::Megatron);
        assert_eq!(req.method, Method::from_mode("lora", 32).unwrap());
        let Parallelism::Fixed(l) = req.parallelism else {
            panic!("fixed layout expected")
        };
        assert_eq!(
            (l.tp, l.pp, l.cp, l.recompute),
            (2, 2, 1, Recompute::Selective)
        );
    }

    #[test]
    fn bad_gpus_name_the_spec_field() {
        let shape = || crate::shape_of("Qwen/Qwen2.5-7B").unwrap();
        let mut j = job(JOB);
        j.spec.resources.gpu = Some("B300X".into());
        let e = request_for_job(&j, shape(), "m").unwrap_err().to_string();
        assert!(
            e.contains("spec.resources.gpu") && e.contains("B300X"),
            "{e}"
        );
        j.spec.resources.gpu = None;
        j.spec.resources.gpus_per_node = 0;
        let e = request_for_job(&j, shape(), "m").unwrap_err().to_string();
        assert!(e.contains("spec.resources.gpusPerNode"), "{e}");
    }
}

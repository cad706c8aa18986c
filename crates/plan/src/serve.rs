//! vLLM deployment planning: weights + KV cache per token → tokens that fit at a
//! `gpu_memory_utilization`, and the smallest tensor-parallel size that holds
//! `max_model_len` × the target concurrency.

use serde::Serialize;

use crate::error::{PlanError, Result};
use crate::memory::{ServeMemory, serve_memory};
use crate::request::ServeRequest;

/// The planner's answer for a deployment.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct ServePlan {
    /// Model name for the command line.
    pub model_name: String,
    /// GPU name.
    pub gpu: String,
    /// Chosen memory split (its `tp` is the tensor-parallel size).
    pub memory: ServeMemory,
    /// Longest sequence.
    pub max_model_len: u64,
    /// Sequences held at full length at once.
    pub concurrency: u64,
    /// Memory utilisation handed to vLLM.
    pub gpu_memory_utilization: f64,
    /// Why this TP size.
    pub reasoning: Vec<String>,
}

/// Picks the smallest tensor-parallel size whose KV cache holds max_model_len × concurrency.
pub fn plan_serving(req: &ServeRequest) -> Result<ServePlan> {
    let bad = |field: &str, reason: String| PlanError::InvalidRequest {
        field: field.to_string(),
        reason,
    };
    if req.gpus_per_node == 0 {
        return Err(bad(
            "resources.gpusPerNode",
            "0 GPUs for a GPU deployment; set at least 1".into(),
        ));
    }
    if req.max_model_len == 0 || req.concurrency == 0 {
        return Err(bad(
            "serving.maxModelLen",
            "max_model_len and concurrency must be at least 1".into(),
        ));
    }
    if !(0.05..=1.0).contains(&req.gpu_memory_utilization) {
        return Err(bad(
            "serving.gpuMemoryUtilization",
            format!("{} is outside 0.05–1.0", req.gpu_memory_utilization),
        ));
    }
    if req.max_model_len > req.model.max_positions {
        return Err(bad(
            "serving.maxModelLen",
            format!(
                "{} exceeds the model's max_position_embeddings {}",
                req.max_model_len, req.model.max_positions
            ),
        ));
    }
    let memory = if req.gpu_memory_bytes > 0 {
        req.gpu_memory_bytes
    } else {
        req.gpu.spec().memory_bytes
    };
    let mut reasoning = Vec::new();
    let mut tried = Vec::new();
    for tp in [1u64, 2, 4, 8] {
        if tp > req.gpus_per_node || !req.model.heads.is_multiple_of(tp) {
            continue;
        }
        let m = serve_memory(
            &req.model,
            memory,
            req.gpu_memory_utilization,
            req.weight_bytes,
            tp,
            req.max_model_len,
            req.concurrency,
        );
        if m.tokens_fit >= m.tokens_needed {
            reasoning.push(format!(
                "tensor-parallel {tp} is the smallest size whose KV cache ({} tokens) holds \
                 {} × {} tokens",
                m.tokens_fit, req.max_model_len, req.concurrency
            ));
            for (t, fit) in &tried {
                reasoning.push(format!(
                    "tensor-parallel {t} rejected: only {fit} tokens fit"
                ));
            }
            return Ok(ServePlan {
                model_name: req.model_name.clone(),
                gpu: req.gpu.spec().name.to_string(),
                memory: m,
                max_model_len: req.max_model_len,
                concurrency: req.concurrency,
                gpu_memory_utilization: req.gpu_memory_utilization,
                reasoning,
            });
        }
        tried.push((tp, m.tokens_fit));
    }
    Err(PlanError::NothingFits {
        reason: format!(
            "no tensor-parallel size up to {} GPUs holds {} × {} tokens (best: {:?}); lower \
             serving.maxModelLen or the concurrency, or add GPUs",
            req.gpus_per_node,
            req.max_model_len,
            req.concurrency,
            tried.last()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::shape_of;
    use crate::gpu::GpuKind;

    fn req(id: &str, len: u64, conc: u64) -> ServeRequest {
        ServeRequest {
            model: shape_of(id).unwrap(),
            model_name: id.to_string(),
            gpu: GpuKind::H100,
            gpu_memory_bytes: 0,
            gpus_per_node: 8,
            max_model_len: len,
            concurrency: conc,
            gpu_memory_utilization: 0.9,
            weight_bytes: 2.0,
        }
    }

    #[test]
    fn kv_per_token_is_two_layers_kv_heads_head_dim_bytes() {
        let shape = shape_of("meta-llama/Meta-Llama-3-8B").unwrap();
        // 2 · 32 layers · 8 kv heads · 128 · 2 bytes = 128 KiB per token.
        assert_eq!(shape.kv_bytes_per_token(2), 131_072);
    }

    #[test]
    fn seventy_b_needs_more_than_one_gpu_and_small_fits_one() {
        let p = plan_serving(&req("meta-llama/Meta-Llama-3-70B", 8192, 16)).unwrap();
        assert!(p.memory.tp >= 2, "{p}");
        let p = plan_serving(&req("Qwen/Qwen2.5-7B", 8192, 8)).unwrap();
        assert_eq!(p.memory.tp, 1, "{p}");
    }

    #[test]
    fn impossible_deployment_is_an_error() {
        let err = plan_serving(&req("Qwen/Qwen2.5-72B", 32768, 100_000)).unwrap_err();
        assert!(matches!(err, PlanError::NothingFits { .. }));
        let mut r = req("Qwen/Qwen2.5-7B", 8192, 1);
        r.gpus_per_node = 0;
        assert!(
            plan_serving(&r)
                .unwrap_err()
                .to_string()
                .contains("gpusPerNode")
        );
    }
}

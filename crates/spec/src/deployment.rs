//! `ModelDeployment`: a model served behind the OpenAI-compatible gateway.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::train_job::ModelRef;
use crate::validate::Problems;

/// A served model: which weights, which engine, how many replicas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelDeployment {
    /// Always `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Always `ModelDeployment`.
    pub kind: String,
    /// Name, namespace, labels.
    pub metadata: ObjectMeta,
    /// What the user asked for.
    pub spec: ModelDeploymentSpec,
    /// What the control plane observed; ignored on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ModelDeploymentStatus>,
}

/// The desired state of a [`ModelDeployment`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelDeploymentSpec {
    /// The weights to serve.
    pub model: ModelRef,
    /// Name clients use in the `model` field; the deployment name when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_name: Option<String>,
    /// Which engine serves it.
    #[serde(default)]
    pub engine: ServeEngine,
    /// Number of replicas.
    #[serde(default = "one")]
    pub replicas: i32,
    /// GPUs per replica (its tensor-parallel size for vLLM).
    #[serde(default)]
    pub gpus_per_replica: i32,
    /// GPU flavor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Longest prompt + completion, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<i64>,
    /// LoRA adapters served on top of the base model (registered model names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<String>,
    /// The queue whose quota the replicas' GPUs count against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

fn one() -> i32 {
    1
}

/// Serving engines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ServeEngine {
    /// vLLM where GPUs exist, the built-in engine otherwise.
    #[default]
    Auto,
    /// Ferry's built-in candle engine.
    Builtin,
    /// vLLM's OpenAI server.
    Vllm,
}

/// What the control plane observed of a [`ModelDeployment`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelDeploymentStatus {
    /// `Pending`, `Ready`, `Degraded` or `Failed`.
    pub phase: String,
    /// Replicas passing health checks.
    #[serde(default)]
    pub ready_replicas: u32,
    /// Why it is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Base URLs (`http://host:port`) of the replicas passing health checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    /// Replica processes restarted after they exited.
    #[serde(default)]
    pub restarts: u32,
}

impl ModelDeployment {
    pub(crate) fn validate(&self, p: &mut Problems) {
        self.metadata.validate(p);
        let s = &self.spec;
        s.model.validate("spec.model", p);
        p.at_least("spec.replicas", i64::from(s.replicas), 0);
        p.at_least("spec.gpusPerReplica", i64::from(s.gpus_per_replica), 0);
        if let Some(len) = s.max_model_len {
            p.at_least("spec.maxModelLen", len, 1);
        }
        if matches!(s.engine, ServeEngine::Vllm) && s.gpus_per_replica == 0 {
            p.push(
                "spec.gpusPerReplica",
                "must be 1 or more for engine: vllm (vLLM needs a GPU); set it or use engine: builtin",
            );
        }
    }
}

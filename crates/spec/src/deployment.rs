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
    /// Scale the replicas on a serving metric (on Kubernetes: an HPA or a KEDA
    /// `ScaledObject`); `replicas` is then only the starting count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
}

/// The metric vLLM exports for requests waiting in its queue.
pub const DEFAULT_SCALE_METRIC: &str = "vllm:num_requests_waiting";

/// How a [`ModelDeployment`]'s replicas follow its load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Autoscaling {
    /// Fewest replicas (0 only with `provider: keda`, which scales to zero).
    #[serde(default = "one")]
    pub min_replicas: i32,
    /// Most replicas.
    pub max_replicas: i32,
    /// Per-replica metric to follow; `vllm:num_requests_waiting` (queue length) by default.
    #[serde(default = "default_metric")]
    pub metric: String,
    /// Value of `metric` per replica to aim at (e.g. 4 waiting requests per replica).
    #[serde(default = "default_target")]
    pub target: f64,
    /// Which autoscaler; KEDA when the cluster has it, else an HPA, when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ScaleProvider>,
}

fn default_metric() -> String {
    DEFAULT_SCALE_METRIC.into()
}

fn default_target() -> f64 {
    5.0
}

/// The autoscaler that scales a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScaleProvider {
    /// `autoscaling/v2` HorizontalPodAutoscaler on a Pods metric (custom-metrics API).
    Hpa,
    /// KEDA `ScaledObject` with a Prometheus trigger.
    Keda,
}

impl Autoscaling {
    fn validate(&self, p: &mut Problems) {
        let min_floor = if self.provider == Some(ScaleProvider::Keda) {
            0
        } else {
            1
        };
        if self.min_replicas < min_floor {
            p.push(
                "spec.autoscaling.minReplicas",
                format!(
                    "must be {min_floor} or more (got {}); only provider: keda scales to zero",
                    self.min_replicas
                ),
            );
        }
        if self.max_replicas < self.min_replicas.max(1) {
            p.push(
                "spec.autoscaling.maxReplicas",
                format!(
                    "must be at least minReplicas and 1 (got {}, minReplicas {})",
                    self.max_replicas, self.min_replicas
                ),
            );
        }
        if !(self.target > 0.0 && self.target.is_finite()) {
            p.push(
                "spec.autoscaling.target",
                format!(
                    "must be a positive number of {} per replica (got {})",
                    self.metric, self.target
                ),
            );
        }
        let mut chars = self.metric.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if !valid {
            p.push(
                "spec.autoscaling.metric",
                format!(
                    "{:?} is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), e.g. {DEFAULT_SCALE_METRIC}",
                    self.metric
                ),
            );
        }
    }
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
        if let Some(a) = &s.autoscaling {
            a.validate(p);
        }
        if matches!(s.engine, ServeEngine::Vllm) && s.gpus_per_replica == 0 {
            p.push(
                "spec.gpusPerReplica",
                "must be 1 or more for engine: vllm (vLLM needs a GPU); set it or use engine: builtin",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Resource, ScaleProvider, parse_documents};

    fn doc(autoscaling: &str) -> String {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {{name: chat}}\n\
             spec:\n  model: {{source: hf, id: Qwen/Qwen2.5-7B}}\n  engine: vllm\n  gpusPerReplica: 1\n  \
             autoscaling: {autoscaling}\n"
        )
    }

    #[test]
    fn autoscaling_fields_parse_with_defaults() {
        let docs = parse_documents(&doc("{maxReplicas: 4}"), "md.yaml").unwrap();
        let Resource::ModelDeployment(d) = &docs[0] else {
            panic!("not a ModelDeployment")
        };
        let a = d.spec.autoscaling.as_ref().unwrap();
        assert_eq!((a.min_replicas, a.max_replicas), (1, 4));
        assert_eq!(
            (a.metric.as_str(), a.target),
            ("vllm:num_requests_waiting", 5.0)
        );
        assert_eq!(a.provider, None);
        let docs = parse_documents(
            &doc("{minReplicas: 0, maxReplicas: 3, target: 2.5, provider: keda}"),
            "md.yaml",
        )
        .unwrap();
        let Resource::ModelDeployment(d) = &docs[0] else {
            panic!("not a ModelDeployment")
        };
        assert_eq!(
            d.spec.autoscaling.as_ref().unwrap().provider,
            Some(ScaleProvider::Keda)
        );
    }

    #[test]
    fn bad_autoscaling_names_every_field() {
        let err = parse_documents(
            &doc("{minReplicas: 0, maxReplicas: 0, target: 0, metric: 'bad metric'}"),
            "md.yaml",
        )
        .unwrap_err()
        .to_string();
        for field in [
            "spec.autoscaling.minReplicas",
            "spec.autoscaling.maxReplicas",
            "spec.autoscaling.target",
            "spec.autoscaling.metric",
        ] {
            assert!(err.contains(field), "{field} missing from: {err}");
        }
        let err = parse_documents(&doc("{maxReplicas: 2, provider: knative}"), "md.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("knative"), "{err}");
    }
}

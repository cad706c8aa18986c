//! Ferry's CustomResourceDefinitions, generated from the spec crate's schemars schemas (the
//! same structs are the YAML format, the REST body and the CRD), plus the cluster-side
//! resource types the operator reads and writes.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use ferry_spec::{
    CohortSpec, JobPhase, ModelDeploymentSpec, QueueSpec, ResourceKind, TrainJobSpec,
};

use crate::error::{K8sError, Result};

/// API group of Ferry's resources.
pub const GROUP: &str = "ferry.dev";
/// API version of Ferry's resources.
pub const VERSION: &str = "v1alpha1";

/// One condition in a status, Kubernetes-style (`type`, `status`, `reason`, `message`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Admitted`, `Running`, `Succeeded`, `Failed`, `Suspended`, …
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One CamelCase word saying why.
    pub reason: String,
    /// A sentence for humans.
    #[serde(default)]
    pub message: String,
    /// RFC 3339 time the status last changed.
    #[serde(default)]
    pub last_transition_time: String,
}

/// What the operator observed of a `TrainJob` on the cluster; kept in the status
/// subresource so the restart count survives recreation of the gang's objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobClusterStatus {
    /// Current phase; absent before the operator first saw the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// Why it is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Restarts so far, across every recreation of the gang.
    #[serde(default)]
    pub restarts: u32,
    /// Current attempt (0 for the first run); the gang object is named `<job>-<attempt>`.
    #[serde(default)]
    pub attempt: u32,
    /// Name of the current gang object (JobSet or Job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
    /// `MASTER_ADDR` of the current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_addr: Option<String>,
    /// RFC 3339 time the first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339 time the job reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// Latest metrics line the engine printed (step, loss, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Value>,
    /// RFC 3339 time the running attempt is expected to reach `spec.train.steps` (else the
    /// engine's `max_steps`) at the pace of rank 0's metrics lines; absent until that pace is
    /// known, and once the attempt stops running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_completion_time: Option<String>,
    /// RFC 3339 time a queued job is expected to start, by the time limits or measured pace of
    /// the work ahead of it: for the job first in line for its GPUs, when the running work in
    /// its way ends; for the others, from Ferry's scheduler's forecast of the queue (absent
    /// while some of that work has no expected end, and once the job runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start_time: Option<String>,
    /// Seconds the job's ended runs were running: with the current run, what
    /// `spec.maxTotalRuntimeSeconds` counts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub run_seconds: u64,
    /// RFC 3339 time the current run started running (absent while none runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since: Option<String>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What the operator observed of a `ModelDeployment`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentClusterStatus {
    /// `Pending`, `Ready`, `Degraded` or `Failed`.
    #[serde(default)]
    pub phase: String,
    /// Replicas passing health checks.
    #[serde(default)]
    pub ready_replicas: u32,
    /// Why it is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A `TrainJob` as stored in the cluster: Kubernetes metadata around Ferry's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobResource {
    /// Always `ferry.dev/v1alpha1`.
    #[serde(default = "train_job_api_version")]
    pub api_version: String,
    /// Always `TrainJob`.
    #[serde(default = "train_job_kind")]
    pub kind: String,
    /// Kubernetes metadata (finalizers, generation, deletion timestamp, …).
    pub metadata: ObjectMeta,
    /// Ferry's spec, unchanged.
    pub spec: TrainJobSpec,
    /// The operator's observations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TrainJobClusterStatus>,
}

fn train_job_api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn train_job_kind() -> String {
    "TrainJob".into()
}

impl TrainJobResource {
    /// The spec-crate view of this object (for rendering and planning).
    pub fn to_spec(&self) -> ferry_spec::TrainJob {
        ferry_spec::TrainJob {
            api_version: ferry_spec::API_VERSION.into(),
            kind: "TrainJob".into(),
            metadata: spec_meta(&self.metadata),
            spec: self.spec.clone(),
            status: None,
        }
    }
}

impl kube::Resource for TrainJobResource {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "TrainJob".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "trainjobs".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A `ModelDeployment` as stored in the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelDeploymentResource {
    /// Always `ferry.dev/v1alpha1`.
    #[serde(default = "train_job_api_version")]
    pub api_version: String,
    /// Always `ModelDeployment`.
    #[serde(default = "deployment_kind")]
    pub kind: String,
    /// Kubernetes metadata.
    pub metadata: ObjectMeta,
    /// Ferry's spec, unchanged.
    pub spec: ModelDeploymentSpec,
    /// The operator's observations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeploymentClusterStatus>,
}

fn deployment_kind() -> String {
    "ModelDeployment".into()
}

impl ModelDeploymentResource {
    /// The spec-crate view of this object.
    pub fn to_spec(&self) -> ferry_spec::ModelDeployment {
        ferry_spec::ModelDeployment {
            api_version: ferry_spec::API_VERSION.into(),
            kind: "ModelDeployment".into(),
            metadata: spec_meta(&self.metadata),
            spec: self.spec.clone(),
            status: None,
        }
    }
}

impl kube::Resource for ModelDeploymentResource {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ModelDeployment".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "modeldeployments".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn spec_meta(m: &ObjectMeta) -> ferry_spec::ObjectMeta {
    ferry_spec::ObjectMeta {
        name: m.name.clone().unwrap_or_default(),
        namespace: m.namespace.clone().unwrap_or_else(|| "default".into()),
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        uid: m.uid.clone(),
        creation_timestamp: None,
    }
}

struct CrdKind {
    kind: &'static str,
    plural: &'static str,
    short: &'static str,
    /// `Namespaced`, or `Cluster` for a kind named across namespaces by what refers to it.
    scope: &'static str,
    spec: Value,
    status: Option<Value>,
    columns: Value,
}

fn kinds() -> Vec<CrdKind> {
    let col =
        |name: &str, path: &str, ty: &str| json!({"name": name, "jsonPath": path, "type": ty});
    let age = col("Age", ".metadata.creationTimestamp", "date");
    vec![
        CrdKind {
            kind: "TrainJob",
            plural: "trainjobs",
            short: "tj",
            scope: "Namespaced",
            spec: schemars::schema_for!(TrainJobSpec).to_value(),
            status: Some(schemars::schema_for!(TrainJobClusterStatus).to_value()),
            columns: json!([
                col("Phase", ".status.phase", "string"),
                col("Restarts", ".status.restarts", "integer"),
                col("Nodes", ".spec.resources.nodes", "integer"),
                col("GPUs/node", ".spec.resources.gpusPerNode", "integer"),
                age.clone(),
            ]),
        },
        CrdKind {
            kind: "ModelDeployment",
            plural: "modeldeployments",
            short: "md",
            scope: "Namespaced",
            spec: schemars::schema_for!(ModelDeploymentSpec).to_value(),
            status: Some(schemars::schema_for!(DeploymentClusterStatus).to_value()),
            columns: json!([
                col("Phase", ".status.phase", "string"),
                col("Ready", ".status.readyReplicas", "integer"),
                col("Replicas", ".spec.replicas", "integer"),
                age.clone(),
            ]),
        },
        CrdKind {
            kind: "Queue",
            plural: "queues",
            short: "fq",
            scope: "Namespaced",
            spec: schemars::schema_for!(QueueSpec).to_value(),
            status: None,
            columns: json!([
                col("Cohort", ".spec.cohort", "string"),
                col("Stop", ".spec.stopPolicy", "string"),
                age.clone()
            ]),
        },
        // Cluster-scoped, as Kueue's Cohort: Queues of every namespace name it by name alone.
        CrdKind {
            kind: "Cohort",
            plural: "cohorts",
            short: "fco",
            scope: "Cluster",
            spec: schemars::schema_for!(CohortSpec).to_value(),
            status: None,
            columns: json!([col("Parent", ".spec.parent", "string"), age]),
        },
    ]
}

/// Ferry's CRDs (TrainJob, ModelDeployment, Queue, Cohort), as `apiextensions.k8s.io/v1`
/// objects.
pub fn crds() -> Result<Vec<Value>> {
    // Every kind the spec crate knows has a CRD, but `PriorityClass`: on a cluster it is
    // Kubernetes' own (`ferry render` makes one); and `Sweep`: `ferry render` renders its jobs,
    // and no controller on the cluster watches sweeps.
    debug_assert_eq!(ResourceKind::ALL.len(), kinds().len() + 2);
    let mut out = Vec::new();
    for k in kinds() {
        let spec = structural(k.kind, &k.spec)?;
        let mut properties = json!({
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        });
        let mut version = json!({
            "name": VERSION,
            "served": true,
            "storage": true,
            "additionalPrinterColumns": k.columns,
        });
        if let Some(status) = &k.status {
            properties["status"] = structural(k.kind, status)?;
            version["subresources"] = json!({"status": {}});
        }
        version["schema"] = json!({"openAPIV3Schema": {
            "type": "object",
            "description": format!("Ferry {}: see https://ferry.dev/docs/kubernetes", k.kind),
            "required": ["spec"],
            "properties": properties,
        }});
        out.push(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{GROUP}", k.plural), "labels": {"app.kubernetes.io/part-of": "ferry"}},
            "spec": {
                "group": GROUP,
                "names": {
                    "kind": k.kind,
                    "listKind": format!("{}List", k.kind),
                    "plural": k.plural,
                    "singular": k.kind.to_ascii_lowercase(),
                    "shortNames": [k.short],
                    "categories": ["ferry"],
                },
                "scope": k.scope,
                "versions": [version],
            }
        }));
    }
    Ok(out)
}

/// File name of a CRD under `deploy/crds/`.
pub fn crd_file_name(crd: &Value) -> String {
    format!(
        "{}.yaml",
        crd["metadata"]["name"].as_str().unwrap_or("unnamed")
    )
}

/// The CRD files' contents, keyed by file name, as `ferry crds` writes them.
pub fn crd_files() -> Result<Vec<(String, String)>> {
    crds()?
        .iter()
        .map(|c| {
            let body = crate::render::to_yaml(std::slice::from_ref(c))?;
            Ok((
                crd_file_name(c),
                format!("# Generated by `ferry crds` from the spec types; do not edit.\n{body}"),
            ))
        })
        .collect()
}

/// Turns a schemars (JSON Schema 2020-12) schema into a Kubernetes structural schema:
/// references inlined, documented enums flattened to `enum`, `null` branches dropped,
/// free-form values marked `x-kubernetes-preserve-unknown-fields`.
pub fn structural(kind: &str, schema: &Value) -> Result<Value> {
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    convert(kind, schema, &defs, 0)
}

fn convert(kind: &str, schema: &Value, defs: &Map<String, Value>, depth: usize) -> Result<Value> {
    let err = |m: String| K8sError::Schema {
        kind: kind.into(),
        message: m,
    };
    if depth > 32 {
        return Err(err(
            "schema nests deeper than 32 levels (recursive type?)".into()
        ));
    }
    let obj = match schema {
        Value::Bool(true) => return Ok(json!({"x-kubernetes-preserve-unknown-fields": true})),
        Value::Object(o) => o,
        other => return Err(err(format!("unexpected schema {other}"))),
    };
    if let Some(Value::String(r)) = obj.get("$ref") {
        let name = r.trim_start_matches("#/$defs/");
        let target = defs
            .get(name)
            .ok_or_else(|| err(format!("unresolved $ref {r}")))?;
        let mut inlined = convert(kind, target, defs, depth + 1)?;
        if let Some(d) = obj.get("description") {
            inlined["description"] = d.clone();
        }
        return Ok(inlined);
    }
    let mut out = Map::new();
    // Documented enums: oneOf [{const, description}] → enum.
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            let branches: Vec<&Value> = branches
                .iter()
                .filter(|b| b.get("type") != Some(&json!("null")))
                .collect();
            let mut values = Vec::new();
            for b in &branches {
                if let Some(c) = b.get("const") {
                    values.push(c.clone());
                } else if let Some(Value::Array(e)) = b.get("enum") {
                    values.extend(e.iter().filter(|v| !v.is_null()).cloned());
                } else if branches.len() == 1 {
                    let mut single = convert(kind, b, defs, depth + 1)?;
                    if let Some(d) = obj.get("description") {
                        single["description"] = d.clone();
                    }
                    return Ok(single);
                } else {
                    return Err(err(format!(
                        "{key} with non-constant branches is not structural"
                    )));
                }
            }
            out.insert("type".into(), "string".into());
            out.insert("enum".into(), Value::Array(values));
        }
    }
    if obj.is_empty() {
        return Ok(json!({"x-kubernetes-preserve-unknown-fields": true}));
    }
    for (k, v) in obj {
        match k.as_str() {
            "$schema" | "$defs" | "title" | "default" | "oneOf" | "anyOf" | "examples" => {}
            "type" => {
                let t = match v {
                    Value::Array(types) => {
                        let rest: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                        match rest.as_slice() {
                            [one] => (*one).clone(),
                            _ => return Err(err(format!("union type {v} is not structural"))),
                        }
                    }
                    other => other.clone(),
                };
                out.insert("type".into(), t);
            }
            "const" => {
                out.insert("enum".into(), json!([v]));
            }
            "enum" => {
                let values: Vec<Value> = v
                    .as_array()
                    .map(|a| a.iter().filter(|x| !x.is_null()).cloned().collect())
                    .unwrap_or_default();
                out.insert("enum".into(), Value::Array(values));
            }
            "format" => {
                if matches!(v.as_str(), Some("int32" | "int64" | "double" | "float")) {
                    out.insert(k.clone(), v.clone());
                }
            }
            "properties" => {
                let mut props = Map::new();
                for (name, p) in v.as_object().into_iter().flatten() {
                    props.insert(name.clone(), convert(kind, p, defs, depth + 1)?);
                }
                out.insert(k.clone(), Value::Object(props));
            }
            "additionalProperties" => match v {
                Value::Bool(false) => {}
                Value::Bool(true) => {
                    out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
                }
                schema => {
                    out.insert(k.clone(), convert(kind, schema, defs, depth + 1)?);
                }
            },
            "items" => {
                out.insert(k.clone(), convert(kind, v, defs, depth + 1)?);
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if !out.contains_key("type") && !out.contains_key("x-kubernetes-preserve-unknown-fields") {
        out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
    }
    Ok(Value::Object(out))
}

/// `skip_serializing_if` for counters that start at zero.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

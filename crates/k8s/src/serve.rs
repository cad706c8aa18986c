//! `ModelDeployment` → a vLLM Deployment (arguments from the planner), a Service the gateway
//! discovers through its EndpointSlices, and an autoscaler on waiting requests.

use ferry_plan::{GpuKind, ServeRequest};
use ferry_spec::{Autoscaling, ModelDeployment, ModelSource, ScaleProvider, ServeEngine};
use serde_json::{Value, json};

use crate::error::{K8sError, Result};
use crate::options::{
    KUEUE_QUEUE_LABEL, LABEL_DEPLOYMENT, LABEL_SERVED_MODEL, MANAGED_BY, RenderOptions, object_id,
};
use crate::train::MODELS_MOUNT;

/// The metric vLLM exports and the autoscaler follows by default.
pub const WAITING_METRIC: &str = ferry_spec::DEFAULT_SCALE_METRIC;

/// Which autoscaler `spec.autoscaling` becomes on this cluster.
pub fn provider(a: &Autoscaling, opts: &RenderOptions) -> ScaleProvider {
    a.provider.unwrap_or(if opts.cluster.keda {
        ScaleProvider::Keda
    } else {
        ScaleProvider::Hpa
    })
}

/// A Kubernetes quantity for a positive target: whole numbers as such, others in milli-units.
pub fn quantity(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{}m", (v * 1000.0).round() as i64)
    }
}

fn id(d: &ModelDeployment) -> String {
    object_id("ModelDeployment", &d.metadata.namespace, &d.metadata.name)
}

/// Checks `spec.autoscaling` against the rest of the spec (the spec crate checks the fields).
pub fn check_autoscaling(d: &ModelDeployment) -> Result<Option<&Autoscaling>> {
    let Some(a) = &d.spec.autoscaling else {
        return Ok(None);
    };
    if a.provider != Some(ScaleProvider::Keda) && a.min_replicas < 1 {
        return Err(K8sError::invalid(
            id(d),
            "spec.autoscaling.minReplicas",
            "an HPA needs at least 1 replica; set minReplicas: 1 or provider: keda to scale to zero",
        ));
    }
    if a.max_replicas < a.min_replicas.max(1) {
        return Err(K8sError::invalid(
            id(d),
            "spec.autoscaling.maxReplicas",
            format!(
                "must be at least minReplicas ({}) and 1 (got {})",
                a.min_replicas, a.max_replicas
            ),
        ));
    }
    Ok(Some(a))
}

/// Where vLLM loads the weights from inside the pod.
fn model_arg(d: &ModelDeployment) -> String {
    let m = &d.spec.model;
    match m.source {
        ModelSource::Hf => m.id.clone().unwrap_or_default(),
        ModelSource::Path => m.path.clone().unwrap_or_default(),
        ModelSource::Artifact => {
            format!("{MODELS_MOUNT}/{}", m.artifact.clone().unwrap_or_default())
        }
        ModelSource::Scratch => String::new(),
    }
}

/// vLLM's arguments: the planner's for catalogued models (TP size, max length, memory
/// utilisation, max sequences), then the deployment's own (name, port, adapters).
pub fn vllm_args(d: &ModelDeployment, port: u16) -> Result<Vec<String>> {
    let s = &d.spec;
    if s.model.source == ModelSource::Scratch {
        return Err(K8sError::invalid(
            id(d),
            "spec.model.source",
            "scratch models have no weights to serve; use hf, path or artifact",
        ));
    }
    let gpus = s.gpus_per_replica.max(1) as u64;
    let model = model_arg(d);
    let mut args = vec![model.clone()];
    let hub_shape = (s.model.source == ModelSource::Hf)
        .then(|| ferry_plan::shape_of(&model).ok())
        .flatten();
    if let Some(shape) = hub_shape {
        let gpu_name = s.gpu.as_deref().unwrap_or("H100-80GB");
        let gpu = GpuKind::parse(gpu_name).ok_or_else(|| {
            K8sError::invalid(
                id(d),
                "spec.gpu",
                format!("unknown GPU {gpu_name:?}; use A100, H100, H200, H800, L40S or RTX4090"),
            )
        })?;
        let max_len = s
            .max_model_len
            .map(|l| l.max(1) as u64)
            .unwrap_or_else(|| shape.max_positions.min(8192));
        let req = ServeRequest {
            model: shape,
            model_name: model.clone(),
            gpu,
            gpu_memory_bytes: 0,
            gpus_per_node: gpus,
            max_model_len: max_len,
            concurrency: 16,
            gpu_memory_utilization: 0.9,
            weight_bytes: 2.0,
        };
        let plan = ferry_plan::plan_serving(&req).map_err(|source| K8sError::Plan {
            object: id(d),
            source,
        })?;
        let text = ferry_plan::render_vllm(&plan);
        for part in text.trim_end().split(" \\\n").skip(1) {
            let part = part.trim();
            match part.split_once(' ') {
                // The replica owns gpusPerReplica GPUs: use them all for tensor parallelism.
                Some(("--tensor-parallel-size", _)) => {
                    args.push("--tensor-parallel-size".into());
                    args.push(gpus.to_string());
                }
                Some((flag, value)) => {
                    args.push(flag.into());
                    args.push(value.into());
                }
                None => args.push(part.into()),
            }
        }
    } else {
        args.extend(["--tensor-parallel-size".into(), gpus.to_string()]);
        if let Some(len) = s.max_model_len {
            args.extend(["--max-model-len".into(), len.to_string()]);
        }
        args.extend(["--gpu-memory-utilization".into(), "0.9".into()]);
    }
    let served = s
        .served_name
        .clone()
        .unwrap_or_else(|| d.metadata.name.clone());
    args.extend([
        "--served-model-name".into(),
        served,
        "--port".into(),
        port.to_string(),
    ]);
    if !s.adapters.is_empty() {
        args.push("--enable-lora".into());
        args.push("--lora-modules".into());
        for a in &s.adapters {
            args.push(format!("{a}={MODELS_MOUNT}/{a}"));
        }
    }
    Ok(args)
}

/// Renders the Deployment, Service and (when asked) the autoscaler of `d`.
pub fn render(d: &ModelDeployment, opts: &RenderOptions) -> Result<Vec<Value>> {
    let s = &d.spec;
    if s.engine == ServeEngine::Builtin || s.gpus_per_replica == 0 {
        return Err(K8sError::invalid(
            id(d),
            "spec.engine",
            "on Kubernetes deployments run vLLM on GPUs; set engine: vllm (or auto) and gpusPerReplica: 1 or more",
        ));
    }
    let node = opts.cluster.gpus_per_node as i32;
    if node > 0 && s.gpus_per_replica > node {
        return Err(K8sError::invalid(
            id(d),
            "spec.gpusPerReplica",
            format!(
                "{} GPUs do not fit on one node of {node}; use at most {node}",
                s.gpus_per_replica
            ),
        ));
    }
    let scale = check_autoscaling(d)?;
    let args = vllm_args(d, opts.serve_port)?;
    let ns = &d.metadata.namespace;
    let name = &d.metadata.name;
    let served = s.served_name.clone().unwrap_or_else(|| name.clone());
    let mut labels = serde_json::Map::new();
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    labels.insert(LABEL_DEPLOYMENT.into(), name.clone().into());
    labels.insert(LABEL_SERVED_MODEL.into(), served.into());
    let mut meta_labels = labels.clone();
    if opts.cluster.kueue
        && let Some(q) = &s.queue
    {
        meta_labels.insert(KUEUE_QUEUE_LABEL.into(), q.clone().into());
    }
    let gpus = s.gpus_per_replica.to_string();
    let port = opts.serve_port;
    let probe = |period: u32, failures: u32| json!({"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period, "failureThreshold": failures});
    let mut pod_spec = json!({
        "containers": [{
            "name": "vllm",
            "image": opts.images.vllm,
            "command": ["vllm", "serve"],
            "args": args,
            "env": [{"name": "HF_HOME", "value": format!("{MODELS_MOUNT}/.cache/huggingface")}],
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
            // Loading weights takes minutes: liveness waits for the startup probe.
            "startupProbe": probe(10, 180),
            "readinessProbe": probe(5, 3),
            "livenessProbe": probe(15, 4),
            "volumeMounts": [
                {"name": "dshm", "mountPath": "/dev/shm"},
                {"name": "models", "mountPath": MODELS_MOUNT},
            ],
        }],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm_size}},
            {"name": "models", "persistentVolumeClaim": {"claimName": opts.claims.models}},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    });
    if let Some(flavor) = &s.gpu {
        pod_spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": opts.cluster.flavor_label, "operator": "In", "values": [flavor]}]}]}}});
    }
    let mut deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": meta_labels},
        "spec": {
            "selector": {"matchLabels": {LABEL_DEPLOYMENT: name}},
            "template": {"metadata": {"labels": labels.clone()}, "spec": pod_spec},
            // A replica holds whole GPUs: start the new one only after the old one is gone.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        }
    });
    if scale.is_none() {
        deployment["spec"]["replicas"] = s.replicas.into();
    }
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "selector": {LABEL_DEPLOYMENT: name},
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        }
    });
    let mut out = vec![deployment, service];
    if let Some(a) = scale {
        let labels = json!({MANAGED_BY.0: MANAGED_BY.1, LABEL_DEPLOYMENT: name});
        match provider(a, opts) {
            ScaleProvider::Keda => out.push(json!({
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicaCount": a.min_replicas,
                    "maxReplicaCount": a.max_replicas,
                    "triggers": [{"type": "prometheus", "metricType": "AverageValue", "metadata": {
                        "serverAddress": opts.cluster.prometheus_url,
                        "query": format!("sum({}{{namespace=\"{ns}\",{}=\"{name}\"}})", a.metric, LABEL_DEPLOYMENT.replace(['.', '/', '-'], "_")),
                        "threshold": quantity(a.target),
                    }}],
                }
            })),
            ScaleProvider::Hpa => out.push(json!({
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": a.min_replicas,
                    "maxReplicas": a.max_replicas,
                    "metrics": [{"type": "Pods", "pods": {
                        "metric": {"name": a.metric},
                        "target": {"type": "AverageValue", "averageValue": quantity(a.target)},
                    }}],
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
                }
            })),
        }
    }
    Ok(out)
}

//! `TrainJob` → one gang of pods: a JobSet when the JobSet CRD is installed, else an
//! Indexed Job plus a headless Service. Pure: values in, manifests out.
//!
//! Rank wiring is correct by construction: every pod gets `NODE_RANK` from its completion
//! index (downward API, never parsed from a pod name), and `MASTER_ADDR` is the stable DNS
//! name `<index-0 pod hostname>.<headless service>.<namespace>.svc`.

use std::collections::BTreeMap;

use ferry_plan::PlanRequest;
use ferry_spec::{EngineKind, ModelSource, TrainJob};
use serde_json::{Value, json};

use crate::error::{K8sError, Result};
use crate::options::{
    Attempt, COMPLETION_INDEX_ANNOTATION, KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, LABEL_ATTEMPT,
    LABEL_TRAIN_JOB, MANAGED_BY, RenderOptions, object_id, priority_class,
};

/// Where the checkpoints claim is mounted in every training pod.
pub const CHECKPOINT_MOUNT: &str = "/checkpoints";
/// Where the data claim is mounted.
pub const DATA_MOUNT: &str = "/data";
/// Where the models claim is mounted.
pub const MODELS_MOUNT: &str = "/models";
/// Name of the replicated job inside a JobSet.
pub const JOBSET_REPLICA: &str = "node";

/// The objects one attempt of a `TrainJob` becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainObjects {
    /// Name of the gang object (JobSet or Job): `<job>-<attempt>`.
    pub child_name: String,
    /// The JobSet or Indexed Job.
    pub gang: Value,
    /// The headless Service (absent with JobSet, which creates its own).
    pub service: Option<Value>,
    /// Launch files (DeepSpeed config, the TRL SIGTERM wrapper), mounted at `/etc/ferry`.
    pub config_map: Option<Value>,
    /// `MASTER_ADDR` every rank gets.
    pub master_addr: String,
}

impl TrainObjects {
    /// Every object, in creation order.
    pub fn all(&self) -> Vec<Value> {
        let mut out = Vec::new();
        out.extend(self.config_map.clone());
        out.extend(self.service.clone());
        out.push(self.gang.clone());
        out
    }
}

/// How every rank of the gang starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The container's command.
    pub command: Vec<String>,
    /// Files for `/etc/ferry` (`ds_config.json`, `ferry_trainer.py`).
    pub files: BTreeMap<String, String>,
    /// Which launcher rendered it (`megatron`, `torchrun`, `deepspeed`, `swift`, `command`).
    pub launcher: &'static str,
}

/// The checkpoint directory of a job inside its pods.
pub fn checkpoint_dir(job: &TrainJob) -> String {
    match job.spec.checkpoint.dir.as_deref() {
        Some(d) if d.starts_with(CHECKPOINT_MOUNT) => d.trim_end_matches('/').to_owned(),
        _ => format!(
            "{CHECKPOINT_MOUNT}/{}/{}",
            job.metadata.namespace, job.metadata.name
        ),
    }
}

fn id(job: &TrainJob) -> String {
    object_id("TrainJob", &job.metadata.namespace, &job.metadata.name)
}

/// Maps a `TrainJob` onto the planner's request (hub models from the planner's catalogue):
/// the shared mapping `ferry_plan::request_for_job`, with errors naming this object.
pub fn plan_request(job: &TrainJob) -> Result<PlanRequest> {
    let bad = |field: &str, msg: String| K8sError::invalid(id(job), field, msg);
    let model = job
        .spec
        .model
        .as_ref()
        .ok_or_else(|| bad("spec.model", "is required to plan the launch".into()))?;
    if model.source != ModelSource::Hf {
        return Err(bad(
            "spec.model.source",
            "on Kubernetes the planner needs a Hugging Face id it knows (source: hf); \
             use engine: command for other models"
                .into(),
        ));
    }
    let model_id = model.id.clone().unwrap_or_default();
    let plan_err = |source| match source {
        ferry_plan::PlanError::InvalidRequest { field, reason } => bad(&field, reason),
        source => K8sError::Plan {
            object: id(job),
            source,
        },
    };
    let shape = ferry_plan::shape_of(&model_id).map_err(plan_err)?;
    ferry_plan::request_for_job(job, shape, &model_id).map_err(plan_err)
}

/// What a launcher job's plan tells the scheduler before the job runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planned {
    /// How long it is expected to run (`ferry_plan::expected_run_s`).
    pub run_s: Option<u64>,
    /// How much longer (percent) it runs split across racks, when the cluster says how fast its
    /// links between racks are (`ferry_plan::split_slowdown_pct`).
    pub split_slowdown_pct: Option<u32>,
}

/// What `job`'s plan says of its run, for a cluster whose links between racks carry
/// `inter_rack_pct`% of the bandwidth between nodes within a rack (`None`: not known); nothing
/// for a user's command or a job the planner cannot plan (its launch says why).
pub fn planned(job: &TrainJob, inter_rack_pct: Option<u32>) -> Planned {
    let spec = &job.spec;
    if matches!(spec.engine, EngineKind::Builtin | EngineKind::Command) || !spec.command.is_empty()
    {
        return Planned::default();
    }
    let Ok(request) = plan_request(job) else {
        return Planned::default();
    };
    let Ok(report) = ferry_plan::plan(&request) else {
        return Planned::default();
    };
    Planned {
        run_s: ferry_plan::expected_run_s(job, &report),
        split_slowdown_pct: inter_rack_pct
            .map(|pct| ferry_plan::split_slowdown_pct(&request, &report.chosen, pct)),
    }
}

/// The launch of every rank: the planner's command wrapped in a shell prelude that resumes
/// from the newest checkpoint in the job's checkpoint directory when one exists.
pub fn launch(job: &TrainJob) -> Result<Launch> {
    let spec = &job.spec;
    match spec.engine {
        EngineKind::Builtin => {
            return Err(K8sError::invalid(
                id(job),
                "spec.engine",
                "builtin runs on the local runtime only; on Kubernetes use torchrun, megatron, \
                 deepspeed, swift, auto, or command with your own image",
            ));
        }
        // A launcher engine given the user's own launch script runs it as is, as on the local
        // runtime (the planner's command would silently replace it).
        _ if spec.engine == EngineKind::Command || !spec.command.is_empty() => {
            return Ok(Launch {
                command: spec.command.clone(),
                files: BTreeMap::new(),
                launcher: "command",
            });
        }
        _ => {}
    }
    if let Some(procs) = spec.resources.procs_per_node
        && procs != spec.resources.gpus_per_node
    {
        return Err(K8sError::invalid(
            id(job),
            "spec.resources.procsPerNode",
            format!(
                "launchers start one rank per GPU; remove it or set it to gpusPerNode ({})",
                spec.resources.gpus_per_node
            ),
        ));
    }
    let plan_err = |source| K8sError::Plan {
        object: id(job),
        source,
    };
    let report = ferry_plan::plan(&plan_request(job)?).map_err(plan_err)?;
    let data = spec
        .data
        .as_ref()
        .map(|d| {
            if d.path.starts_with('/') {
                d.path.clone()
            } else {
                format!("{DATA_MOUNT}/{}", d.path)
            }
        })
        .unwrap_or_else(|| format!("{DATA_MOUNT}/train.jsonl"));
    let paths = ferry_plan::JobPaths {
        data,
        checkpoint_dir: checkpoint_dir(job),
        config_dir: "/etc/ferry".into(),
    };
    let launch = ferry_plan::job_launch(job, &report, &paths).map_err(plan_err)?;
    Ok(Launch {
        command: launch.argv(),
        files: launch.files,
        launcher: launch.launcher.name(),
    })
}

/// Name of the gang object of `attempt`.
pub fn child_name(job: &TrainJob, attempt: u32) -> String {
    format!("{}-{attempt}", job.metadata.name)
}

/// Hostname of the pod with completion index `index`, and the headless Service name.
pub fn pod_hostname(job: &TrainJob, attempt: u32, jobset: bool, index: u32) -> (String, String) {
    let child = child_name(job, attempt);
    if jobset {
        (format!("{child}-{JOBSET_REPLICA}-0-{index}"), child)
    } else {
        (format!("{child}-{index}"), job.metadata.name.clone())
    }
}

/// Checks the job against the cluster's shape before anything is rendered.
pub fn check(job: &TrainJob, opts: &RenderOptions) -> Vec<K8sError> {
    let mut errs = Vec::new();
    let r = &job.spec.resources;
    let node = opts.cluster.gpus_per_node as i32;
    if r.gpus_per_node > 0 && node > 0 {
        if r.gpus_per_node > node {
            errs.push(K8sError::invalid(
                id(job),
                "spec.resources.gpusPerNode",
                format!(
                    "{} GPUs do not fit on one node of {node}; use at most {node} per node and more nodes",
                    r.gpus_per_node
                ),
            ));
        } else if r.nodes > 1 && r.gpus_per_node != node {
            let total = r.nodes * r.gpus_per_node;
            errs.push(K8sError::invalid(
                id(job),
                "spec.resources.gpusPerNode",
                format!(
                    "a {}-node gang must use whole nodes: {total} GPUs is not a multiple of the node size {node}; \
                     set gpusPerNode: {node} (with nodes: {}) or use one node",
                    r.nodes,
                    (total + node - 1) / node
                ),
            ));
        }
    }
    let max_index = r.nodes.max(1) - 1;
    let attempt_digits = 3; // room for up to 999 restarts
    let (host, _) = pod_hostname(job, 0, opts.cluster.jobset, max_index as u32);
    let longest = host.len() + attempt_digits - 1;
    if longest > 63 {
        let over = longest - 63;
        errs.push(K8sError::invalid(
            id(job),
            "metadata.name",
            format!(
                "pod hostnames would be {longest} characters (Kubernetes allows 63); shorten the name by {over}"
            ),
        ));
    }
    errs
}

fn labels(job: &TrainJob, attempt: u32) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    m.insert(LABEL_TRAIN_JOB.into(), job.metadata.name.clone().into());
    m.insert(LABEL_ATTEMPT.into(), attempt.to_string().into());
    m
}

/// Renders one attempt of `job`.
pub fn render(job: &TrainJob, attempt: Attempt, opts: &RenderOptions) -> Result<TrainObjects> {
    K8sError::collect(check(job, opts))?;
    let launch = launch(job)?;
    let ns = &job.metadata.namespace;
    let name = &job.metadata.name;
    let jobset = opts.cluster.jobset;
    let child = child_name(job, attempt.number);
    let (host0, service) = pod_hostname(job, attempt.number, jobset, 0);
    let master_addr = format!("{host0}.{service}.{ns}.svc");
    let r = &job.spec.resources;
    let nodes = r.nodes.max(1);
    let procs = r.effective_procs_per_node();
    let world = r.world_size();
    let gpus = r.gpus_per_node.max(0);
    let cfg_name = format!("{child}-launch");

    let mut env = vec![
        json!({"name": "MASTER_ADDR", "value": master_addr}),
        json!({"name": "MASTER_PORT", "value": opts.master_port.to_string()}),
        json!({"name": "NNODES", "value": nodes.to_string()}),
        json!({"name": "NODE_RANK", "valueFrom": {"fieldRef": {
            "fieldPath": format!("metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']")}}}),
        json!({"name": "NPROC_PER_NODE", "value": procs.to_string()}),
        json!({"name": "WORLD_SIZE", "value": world.to_string()}),
        json!({"name": "FERRY_JOB", "value": format!("{ns}.{name}")}),
        json!({"name": "FERRY_ATTEMPT", "value": attempt.number.to_string()}),
        json!({"name": "FERRY_CHECKPOINT_DIR", "value": checkpoint_dir(job)}),
    ];
    for (k, v) in &job.spec.env {
        env.push(json!({"name": k, "value": v}));
    }

    let mut mounts = vec![
        json!({"name": "dshm", "mountPath": "/dev/shm"}),
        json!({"name": "data", "mountPath": DATA_MOUNT, "readOnly": true}),
        json!({"name": "models", "mountPath": MODELS_MOUNT}),
        json!({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}),
    ];
    let mut volumes = vec![
        json!({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm_size}}),
        json!({"name": "data", "persistentVolumeClaim": {"claimName": opts.claims.data, "readOnly": true}}),
        json!({"name": "models", "persistentVolumeClaim": {"claimName": opts.claims.models}}),
        json!({"name": "checkpoints", "persistentVolumeClaim": {"claimName": opts.claims.checkpoints}}),
    ];
    if !launch.files.is_empty() {
        mounts.push(json!({"name": "launch", "mountPath": "/etc/ferry", "readOnly": true}));
        volumes.push(json!({"name": "launch", "configMap": {"name": cfg_name}}));
    }

    let mut container = json!({
        "name": "trainer",
        "image": opts.images.trainer,
        "command": launch.command,
        "env": env,
        "ports": [{"name": "rendezvous", "containerPort": opts.master_port, "protocol": "TCP"}],
        "volumeMounts": mounts,
    });
    if gpus > 0 {
        let q = gpus.to_string();
        container["resources"] = json!({
            "limits": {"nvidia.com/gpu": q},
            "requests": {"nvidia.com/gpu": q},
        });
    }
    if let Some(dir) = &job.spec.working_dir {
        container["workingDir"] = dir.clone().into();
    }

    let pod_labels = labels(job, attempt.number);
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
        "priorityClassName": priority_class(job.spec.priority.as_deref()),
        "terminationGracePeriodSeconds": job.spec.on_failure.grace_seconds.ceil() as i64,
    });
    if !jobset {
        pod_spec["subdomain"] = service.clone().into();
    }
    let mut affinity = serde_json::Map::new();
    if let Some(flavor) = &r.gpu {
        affinity.insert(
            "nodeAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": opts.cluster.flavor_label, "operator": "In", "values": [flavor]}]}
            ]}}),
        );
    }
    // Pods of one gang: in one domain when `spec.resources.topology` requires it (as Ferry's
    // scheduler places it), else preferably in one rack (as it does when a rack has room).
    let gang =
        json!({"matchLabels": {LABEL_TRAIN_JOB: name, LABEL_ATTEMPT: attempt.number.to_string()}});
    let rack_key = opts.cluster.rack_label.as_deref();
    match r.topology {
        Some(t) if nodes > 1 => {
            let key = match t {
                ferry_spec::Topology::Rack => rack_key.unwrap_or(crate::admission::LABEL_RACK),
                ferry_spec::Topology::NvlinkDomain => crate::admission::LABEL_NVLINK_CLIQUE,
            };
            affinity.insert(
                "podAffinity".into(),
                json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": gang,
                    "topologyKey": key,
                }]}),
            );
        }
        None if nodes > 1 && rack_key.is_some() => {
            affinity.insert(
                "podAffinity".into(),
                json!({"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100,
                    "podAffinityTerm": {"labelSelector": gang, "topologyKey": rack_key},
                }]}),
            );
        }
        _ => {}
    }
    if !affinity.is_empty() {
        pod_spec["affinity"] = Value::Object(affinity);
    }
    if gpus > 0 {
        pod_spec["tolerations"] =
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    }
    let template = json!({"metadata": {"labels": pod_labels}, "spec": pod_spec});
    let mut job_spec = json!({
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        // Ferry restarts the whole gang from a checkpoint and counts restarts in the
        // TrainJob's status, so a single pod failure fails this attempt.
        "backoffLimit": 0,
        "template": template,
    });
    // The run's time limit: the Job fails with DeadlineExceeded (its pods get SIGTERM and
    // their grace period) and the operator handles it like any failed attempt. The clock
    // restarts when a suspended (preempted) Job is resumed.
    if let Some(limit) = job.spec.max_runtime_seconds {
        job_spec["activeDeadlineSeconds"] = limit.into();
    }

    let mut meta_labels = labels(job, attempt.number);
    if opts.cluster.kueue {
        meta_labels.insert(
            KUEUE_QUEUE_LABEL.into(),
            job.spec
                .queue
                .clone()
                .unwrap_or_else(|| "default".into())
                .into(),
        );
        meta_labels.insert(
            KUEUE_PRIORITY_LABEL.into(),
            priority_class(job.spec.priority.as_deref()).into(),
        );
    }
    let metadata = json!({"name": child, "namespace": ns, "labels": meta_labels});
    let (gang, svc) = if jobset {
        let gang = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": metadata,
            "spec": {
                "suspend": attempt.suspend,
                "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true},
                "failurePolicy": {"maxRestarts": 0},
                "successPolicy": {"operator": "All"},
                "replicatedJobs": [{"name": JOBSET_REPLICA, "replicas": 1, "template": {"spec": job_spec}}],
            }
        });
        (gang, None)
    } else {
        let mut spec = job_spec;
        spec["suspend"] = attempt.suspend.into();
        let gang =
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec});
        let mut svc_labels = serde_json::Map::new();
        svc_labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
        svc_labels.insert(LABEL_TRAIN_JOB.into(), name.clone().into());
        let svc = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": ns, "labels": svc_labels},
            "spec": {
                "clusterIP": "None",
                // Ranks rendezvous before any of them is ready.
                "publishNotReadyAddresses": true,
                "selector": {LABEL_TRAIN_JOB: name},
                "ports": [{"name": "rendezvous", "port": opts.master_port, "targetPort": opts.master_port, "protocol": "TCP"}],
            }
        });
        (gang, Some(svc))
    };
    let config_map = (!launch.files.is_empty()).then(|| {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": cfg_name, "namespace": ns, "labels": labels(job, attempt.number)},
            "data": launch.files,
        })
    });
    Ok(TrainObjects {
        child_name: child,
        gang,
        service: svc,
        config_map,
        master_addr,
    })
}

/// Pins a rendered gang (Job or JobSet JSON) to the nodes the scheduler chose: a required
/// node affinity on `kubernetes.io/hostname` added to every node-selector term, and the
/// placement and admission time recorded as annotations (read back after an operator
/// restart). Kubernetes allows changing these scheduling directives while a gang is
/// suspended, which is when Ferry applies them.
pub fn pin(gang: &mut Value, placement: &[ferry_sched::PodPlacement], admitted_at: u64) {
    if placement.is_empty() {
        return;
    }
    let mut nodes: Vec<&str> = placement.iter().map(|p| p.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let hostname = json!({"key": "kubernetes.io/hostname", "operator": "In", "values": nodes});
    let annotations = &mut gang["metadata"]["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[crate::admission::ANNOTATION_PLACEMENT] =
        serde_json::to_string(placement).unwrap_or_default().into();
    annotations[crate::admission::ANNOTATION_ADMITTED_AT] = admitted_at.to_string().into();
    let pod = if gang["kind"] == "JobSet" {
        &mut gang["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    } else {
        &mut gang["spec"]["template"]["spec"]
    };
    let required =
        &mut pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    match required["nodeSelectorTerms"].as_array_mut() {
        Some(terms) if !terms.is_empty() => {
            for t in terms {
                match t["matchExpressions"].as_array_mut() {
                    Some(exprs) => exprs.push(hostname.clone()),
                    None => t["matchExpressions"] = json!([hostname.clone()]),
                }
            }
        }
        _ => *required = json!({"nodeSelectorTerms": [{"matchExpressions": [hostname]}]}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Cluster;

    /// The one TrainJob of a YAML text.
    fn one_job(text: &str) -> TrainJob {
        match ferry_spec::parse_documents(text, "job.yaml").unwrap().pop() {
            Some(ferry_spec::Resource::TrainJob(job)) => job,
            other => panic!("not a TrainJob: {other:?}"),
        }
    }

    /// A launcher engine with `spec.command` runs that command on every rank, as the local
    /// runtime does: the planner's command would silently replace the user's launch script.
    #[test]
    fn a_launcher_engine_with_a_command_runs_that_command() {
        for engine in ["torchrun", "deepspeed", "swift", "megatron", "auto"] {
            let text = format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: own, namespace: team-a}}\nspec:\n  engine: {engine}\n  command: [bash, launch.sh, --lr, '1e-4']\n  resources: {{nodes: 2, gpusPerNode: 8}}\n"
            );
            let job = one_job(&text);
            let l = launch(&job).unwrap();
            assert_eq!(l.launcher, "command", "{engine}");
            assert_eq!(l.command, ["bash", "launch.sh", "--lr", "1e-4"], "{engine}");
        }
    }

    #[test]
    fn a_time_limit_becomes_the_child_jobs_active_deadline() {
        let text = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: capped, namespace: team-a}\nspec:\n  engine: command\n  command: [python3, train.py]\n  resources: {nodes: 2, gpusPerNode: 8}\n  maxRuntimeSeconds: 7200\n";
        let job = one_job(text);
        for jobset in [false, true] {
            let opts = RenderOptions {
                cluster: Cluster {
                    jobset,
                    ..Cluster::default()
                },
                ..RenderOptions::default()
            };
            let attempt = Attempt {
                number: 0,
                suspend: false,
            };
            let child_spec = |gang: &Value| {
                if jobset {
                    gang["spec"]["replicatedJobs"][0]["template"]["spec"].clone()
                } else {
                    gang["spec"].clone()
                }
            };
            let objs = render(&job, attempt, &opts).unwrap();
            assert_eq!(child_spec(&objs.gang)["activeDeadlineSeconds"], 7200);
            let mut unlimited = job.clone();
            unlimited.spec.max_runtime_seconds = None;
            let objs = render(&unlimited, attempt, &opts).unwrap();
            assert!(
                child_spec(&objs.gang)
                    .get("activeDeadlineSeconds")
                    .is_none()
            );
        }
        let zero = text.replace("7200", "0");
        let err = ferry_spec::parse_documents(&zero, "capped.yaml").unwrap_err();
        assert!(err.to_string().contains("spec.maxRuntimeSeconds"), "{err}");
    }
}

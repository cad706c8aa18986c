//! The serving controller: keeps each `ModelDeployment`'s replicas running as
//! `ferry serve` processes, health-checks them, and reports their endpoints.
//!
//! Replicas are ordinary local-runtime gangs of one rank, each in
//! `$FERRY_HOME/deployments/<ns>/<name>/<uid>/replica-<i>` with a `replica.json`
//! naming its URL and the spec generation it serves, so a restarted control plane
//! re-adopts replicas that still serve the current spec instead of starting new ones.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferry_runtime::{GangRecord, GangStatus, LaunchRequest, LocalRuntime};
use ferry_spec::{ModelDeployment, ModelDeploymentStatus, ModelSource, ServeEngine};
use ferry_store::ObjectRecord;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::inputs::Awaited;
use crate::state::ControlPlane;

/// Kind name deployments are stored under.
pub(crate) const KIND: &str = "ModelDeployment";

/// Seconds a replica gets to finish in-flight requests when it is stopped.
const REPLICA_GRACE: Duration = Duration::from_secs(10);

/// What a replica directory records about its process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplicaFile {
    url: String,
    generation: i64,
    attempt: u32,
}

/// One replica the controller is watching.
#[derive(Debug, Clone)]
pub(crate) struct Replica {
    gang: GangRecord,
    url: String,
    generation: i64,
    readiness: Readiness,
}

impl Replica {
    fn new(gang: GangRecord, url: String, generation: i64) -> Self {
        Self {
            gang,
            url,
            generation,
            readiness: Readiness::default(),
        }
    }
}

/// Failed probes in a row that take a ready replica out of rotation, as Kubernetes'
/// `readinessProbe.failureThreshold` defaults to: one slow `/health` on a busy machine
/// is not an outage, and dropping the replica from the gateway for it fails requests.
const NOT_READY_AFTER: u32 = 3;

/// Whether a replica takes traffic, from its `/health` probes.
#[derive(Debug, Clone, Copy, Default)]
struct Readiness {
    ready: bool,
    /// Probes failed in a row since the last good one.
    failed: u32,
}

impl Readiness {
    /// One success makes the replica ready; only [`NOT_READY_AFTER`] failures in a row
    /// make it not ready.
    fn observe(&mut self, ok: bool) {
        if ok {
            *self = Self {
                ready: true,
                failed: 0,
            };
        } else {
            self.failed = self.failed.saturating_add(1);
            self.ready &= self.failed < NOT_READY_AFTER;
        }
    }
}

/// The live state of one deployment.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeploymentState {
    replicas: Vec<Option<Replica>>,
    restarts: u32,
    /// Why the deployment cannot run, when it cannot (bad model, unsupported engine).
    error: Option<String>,
    /// What it waits for before it can run (a model a job has yet to register).
    waiting: Option<String>,
    /// The model name its replicas are registered under in the gateway.
    served: Option<String>,
}

impl DeploymentState {
    /// The status reported through the API.
    pub(crate) fn status(&self, desired: u32) -> ModelDeploymentStatus {
        let endpoints: Vec<String> = self
            .replicas
            .iter()
            .flatten()
            .filter(|r| r.readiness.ready)
            .map(|r| r.url.clone())
            .collect();
        let ready = endpoints.len() as u32;
        let (phase, message) = match (&self.error, ready) {
            (Some(e), _) => ("Failed", Some(e.clone())),
            (None, 0) if self.waiting.is_some() => ("Pending", self.waiting.clone()),
            (None, r) if r >= desired => ("Ready", None),
            (None, 0) => ("Pending", Some("starting replicas".to_owned())),
            (None, r) => ("Degraded", Some(format!("{r} of {desired} replicas ready"))),
        };
        ModelDeploymentStatus {
            phase: phase.to_owned(),
            ready_replicas: ready,
            message,
            endpoints,
            restarts: self.restarts,
        }
    }
}

/// Replicas the local runtime keeps: `spec.replicas`, or with `spec.autoscaling` (which
/// only Kubernetes acts on) its floor, at least one so the model is served.
fn desired_replicas(deployment: &ModelDeployment) -> usize {
    let n = match &deployment.spec.autoscaling {
        Some(a) => a.min_replicas.max(1),
        None => deployment.spec.replicas,
    };
    usize::try_from(n).unwrap_or(0)
}

/// A stored deployment with its live status filled in (for the API).
pub(crate) fn with_status(plane: &ControlPlane, mut record: ObjectRecord) -> ObjectRecord {
    if record.kind != KIND {
        return record;
    }
    let Ok(deployment) = serde_json::from_value::<ModelDeployment>(record.doc.clone()) else {
        return record;
    };
    let desired = desired_replicas(&deployment) as u32;
    let mut status = plane
        .deployments()
        .get(&record.uid)
        .map(|d| d.status(desired))
        .unwrap_or_else(|| DeploymentState::default().status(desired));
    if deployment.spec.autoscaling.is_some() && status.message.is_none() {
        status.message = Some(format!(
            "{desired} replica(s): the local runtime does not autoscale (spec.autoscaling applies on Kubernetes)"
        ));
    }
    if let Ok(v) = serde_json::to_value(status) {
        record.doc["status"] = v;
    }
    record
}

fn deployment_dir(plane: &ControlPlane, record: &ObjectRecord) -> PathBuf {
    plane
        .config()
        .home
        .join("deployments")
        .join(&record.namespace)
        .join(&record.name)
        .join(&record.uid)
}

/// Runs forever: a controller pass every second.
pub(crate) async fn run(plane: ControlPlane) {
    let http = reqwest::Client::new();
    loop {
        if let Err(e) = pass(&plane, &http).await {
            tracing::warn!(error = %e, "serving pass failed; retrying");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One controller pass over every deployment.
pub(crate) async fn pass(plane: &ControlPlane, http: &reqwest::Client) -> Result<(), ApiError> {
    let records = plane.store().list_objects(KIND, None).await?;
    // Replicas of deleted deployments stop.
    let gone: Vec<String> = plane
        .deployments()
        .keys()
        .filter(|uid| !records.iter().any(|r| &r.uid == *uid))
        .cloned()
        .collect();
    for uid in gone {
        if let Some(state) = plane.deployments().remove(&uid) {
            if let (Some(link), Some(name)) = (plane.gateway(), &state.served) {
                link.registry.forget_model(name);
            }
            stop_all(plane, state);
        }
    }
    for record in records {
        reconcile_one(plane, http, &record).await;
    }
    Ok(())
}

/// Stops every replica of every deployment (the demo's control plane does this at exit).
pub(crate) async fn stop_everything(plane: &ControlPlane) {
    let states: Vec<DeploymentState> = plane.deployments().drain().map(|(_, s)| s).collect();
    for state in states {
        for r in state.replicas.into_iter().flatten() {
            let _ = plane.runtime().terminate(&r.gang, REPLICA_GRACE).await;
        }
    }
}

fn stop_all(plane: &ControlPlane, state: DeploymentState) {
    for r in state.replicas.into_iter().flatten() {
        stop_replica(plane, r);
    }
}

fn stop_replica(plane: &ControlPlane, replica: Replica) {
    let runtime = plane.runtime().clone();
    tokio::spawn(async move {
        if let Err(e) = runtime.terminate(&replica.gang, REPLICA_GRACE).await {
            tracing::warn!(url = %replica.url, error = %e, "stopping a serving replica failed");
        }
    });
}

async fn reconcile_one(plane: &ControlPlane, http: &reqwest::Client, record: &ObjectRecord) {
    let dir = deployment_dir(plane, record);
    let mut state = plane.deployments().remove(&record.uid).unwrap_or_default();
    let deployment: ModelDeployment = match serde_json::from_value(record.doc.clone()) {
        Ok(d) => d,
        Err(e) => {
            state.error = Some(format!("stored document is not a ModelDeployment: {e}"));
            plane.deployments().insert(record.uid.clone(), state);
            return;
        }
    };
    let desired = desired_replicas(&deployment);
    (state.error, state.waiting) = (None, None);
    let launch = match replica_command(plane, record, &deployment).await {
        Ok(argv) => Some(argv),
        Err(NotYet::Waiting(w)) => {
            state.waiting = Some(w);
            None
        }
        Err(NotYet::Failed(e)) => {
            state.error = Some(e);
            None
        }
    };
    // Replicas beyond the desired count, or serving an older spec, stop.
    state
        .replicas
        .resize_with(desired.max(state.replicas.len()), || None);
    for (i, slot) in state.replicas.iter_mut().enumerate() {
        let stale = slot
            .as_ref()
            .is_some_and(|r| r.generation != record.generation || i >= desired || launch.is_none());
        if stale && let Some(r) = slot.take() {
            stop_replica(plane, r);
        }
    }
    state.replicas.truncate(desired);
    for i in 0..desired {
        let replica_dir = dir.join(format!("replica-{i}"));
        if state.replicas[i].is_none() {
            state.replicas[i] = adopt(plane, &replica_dir, record.generation).await;
        }
        // A replica whose process ended is replaced.
        if let Some(r) = &state.replicas[i] {
            match plane.runtime().observe(&r.gang).await {
                Ok(GangStatus::Running) => {}
                Ok(_) | Err(_) => {
                    tracing::warn!(url = %r.url, "serving replica exited; starting another");
                    state.replicas[i] = None;
                    state.restarts += 1;
                }
            }
        }
        if state.replicas[i].is_none()
            && let Some(argv) = &launch
        {
            match start(plane, &replica_dir, argv, record.generation).await {
                Ok(r) => state.replicas[i] = Some(r),
                Err(e) => state.error = Some(e),
            }
        }
        if let Some(r) = &mut state.replicas[i] {
            r.readiness.observe(healthy(http, &r.url).await);
        }
    }
    publish(plane, record, &deployment, &mut state);
    plane.deployments().insert(record.uid.clone(), state);
}

/// Makes the gateway route the deployment's served name to exactly its ready replicas.
fn publish(
    plane: &ControlPlane,
    record: &ObjectRecord,
    deployment: &ModelDeployment,
    state: &mut DeploymentState,
) {
    let Some(link) = plane.gateway() else {
        return;
    };
    let name = deployment
        .spec
        .served_name
        .clone()
        .unwrap_or_else(|| record.name.clone());
    if let Some(old) = state.served.as_ref().filter(|old| **old != name) {
        link.registry.forget_model(old);
    }
    let ready: Vec<(String, String)> = state
        .replicas
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().filter(|r| r.readiness.ready).map(|r| (i, r)))
        .map(|(i, r)| (format!("{}-r{i}", record.uid), r.url.clone()))
        .collect();
    if let Err(e) = link.registry.set_replicas(&name, &ready) {
        tracing::warn!(deployment = %record.name, error = %e, "cannot register replicas in the gateway");
    }
    state.served = Some(name);
}

/// Re-adopts the replica a previous control plane left in `dir`, if it still serves
/// this generation and is alive.
async fn adopt(plane: &ControlPlane, dir: &Path, generation: i64) -> Option<Replica> {
    let file: ReplicaFile =
        serde_json::from_slice(&std::fs::read(dir.join("replica.json")).ok()?).ok()?;
    let gang = LocalRuntime::recover(&dir.join(format!("attempt-{}", file.attempt))).ok()?;
    let running = matches!(plane.runtime().adopt(&gang).await, Ok(GangStatus::Running));
    if running && file.generation == generation {
        return Some(Replica::new(gang, file.url, generation));
    }
    if running {
        let _ = plane.runtime().terminate(&gang, REPLICA_GRACE).await;
    }
    None
}

async fn start(
    plane: &ControlPlane,
    dir: &Path,
    argv: &[String],
    generation: i64,
) -> Result<Replica, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port for a replica: {e}"))?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let previous: Option<ReplicaFile> = std::fs::read(dir.join("replica.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let attempt = previous.map_or(0, |p| p.attempt + 1);
    let mut argv = argv.to_vec();
    argv.extend(["--listen".to_owned(), format!("127.0.0.1:{port}")]);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let gang = plane
        .runtime()
        .launch(LaunchRequest {
            job: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            attempt,
            nodes: 1,
            procs_per_node: 1,
            argv,
            env: Default::default(),
            working_dir: None,
            gpus_per_rank: vec![vec![]],
            run_dir: dir.to_path_buf(),
        })
        .await
        .map_err(|e| format!("starting a serving replica failed: {e}"))?;
    let file = ReplicaFile {
        url: url.clone(),
        generation,
        attempt,
    };
    let bytes = serde_json::to_vec(&file).unwrap_or_default();
    std::fs::write(dir.join("replica.json"), bytes)
        .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    Ok(Replica::new(gang, url, generation))
}

async fn healthy(http: &reqwest::Client, url: &str) -> bool {
    http.get(format!("{url}/health"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Why a model (or a deployment) cannot be used yet.
pub(crate) enum NotYet {
    /// A model it serves is still to be registered by an unfinished job.
    Waiting(String),
    /// It cannot run as specified; the message names the field and the fix.
    Failed(String),
}

impl std::fmt::Display for NotYet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotYet::Waiting(m) | NotYet::Failed(m) => f.write_str(m),
        }
    }
}

impl From<&str> for NotYet {
    fn from(e: &str) -> Self {
        NotYet::Failed(e.to_owned())
    }
}

/// The `ferry serve` command line of a replica (without `--listen`), or why there is none.
async fn replica_command(
    plane: &ControlPlane,
    record: &ObjectRecord,
    deployment: &ModelDeployment,
) -> Result<Vec<String>, NotYet> {
    let spec = &deployment.spec;
    match spec.engine {
        ServeEngine::Builtin => {}
        ServeEngine::Auto if spec.gpus_per_replica == 0 => {}
        other => {
            return Err(NotYet::Failed(format!(
                "spec.engine: {} serving runs on Kubernetes (`ferry render --target k8s`); on this machine use engine: builtin with gpusPerReplica: 0",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            )));
        }
    }
    let model = match spec.model.source {
        ModelSource::Path => spec
            .model
            .path
            .clone()
            .map(PathBuf::from)
            .ok_or("spec.model.path is required for source: path")?,
        ModelSource::Artifact => {
            let name = spec.model.artifact.as_deref().unwrap_or("");
            awaited_dir(plane, name, "spec.model.artifact", None).await?
        }
        ModelSource::Hf | ModelSource::Scratch => {
            return Err(NotYet::Failed(
                "spec.model.source: the built-in engine serves a local directory or a registered model (source: path or artifact)"
                    .to_owned(),
            ));
        }
    };
    let served = spec
        .served_name
        .clone()
        .unwrap_or_else(|| record.name.clone());
    let mut argv = vec![
        plane.config().self_exe.to_string_lossy().into_owned(),
        "serve".into(),
        "--model".into(),
        model.to_string_lossy().into_owned(),
        "--served-model-name".into(),
        served,
    ];
    for adapter in &spec.adapters {
        let dir = awaited_dir(plane, adapter, "spec.adapters", None).await?;
        argv.extend(["--adapter".into(), format!("{adapter}={}", dir.display())]);
    }
    Ok(argv)
}

/// The directory of registered model `name`, or what its user (the job `asker`, or a
/// deployment) waits for; errors name `field`.
pub(crate) async fn awaited_dir(
    plane: &ControlPlane,
    name: &str,
    field: &str,
    asker: Option<&str>,
) -> Result<PathBuf, NotYet> {
    match crate::inputs::model(plane, name, field, asker).await {
        Ok(Awaited::Ready(dir)) => Ok(dir),
        Ok(Awaited::Waiting(w)) => Err(NotYet::Waiting(w)),
        Ok(Awaited::Missing(e)) => Err(NotYet::Failed(e)),
        Err(e) => Err(NotYet::Failed(format!(
            "{field}: looking up model {name:?} failed: {e}"
        ))),
    }
}

/// Deployment states by deployment uid.
pub(crate) type Deployments = HashMap<String, DeploymentState>;

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(extra: &str) -> ModelDeployment {
        let yaml = format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {{name: d}}\nspec:\n  model: {{source: artifact, artifact: m}}\n  engine: builtin\n{extra}"
        );
        match ferry_spec::parse_documents(&yaml, "d.yaml")
            .unwrap()
            .remove(0)
        {
            ferry_spec::Resource::ModelDeployment(d) => d,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_local_runtime_keeps_the_autoscaling_floor_and_serves_at_least_one() {
        assert_eq!(desired_replicas(&deployment("  replicas: 3\n")), 3);
        let scaled = "  autoscaling: {minReplicas: 2, maxReplicas: 6}\n";
        assert_eq!(desired_replicas(&deployment(scaled)), 2);
        let to_zero = "  autoscaling: {minReplicas: 0, maxReplicas: 4, provider: keda}\n";
        assert_eq!(desired_replicas(&deployment(to_zero)), 1);
    }

    #[test]
    fn a_ready_replica_leaves_rotation_only_after_three_failed_probes_in_a_row() {
        let mut r = Readiness::default();
        r.observe(false);
        assert!(!r.ready, "never answered: not ready");
        r.observe(true);
        assert!(r.ready);
        r.observe(false);
        r.observe(false);
        assert!(r.ready, "two slow probes under load keep it in rotation");
        r.observe(true);
        r.observe(false);
        r.observe(false);
        assert!(r.ready, "a success resets the count");
        r.observe(false);
        assert!(!r.ready, "three in a row take it out");
        r.observe(true);
        assert!(r.ready);
    }
}

//! Models that jobs and deployments wait for. A `source: artifact` name that is not
//! registered yet, but that an unfinished TrainJob registers when it succeeds
//! (`spec.export.register`), is awaited rather than an error, so one file can chain
//! pretraining, a fine-tune on its result and a deployment serving that.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use ferry_spec::ModelSource;
use ferry_store::{JobFilter, JobRecord, StoreError};

use crate::export::export_name;
use crate::state::ControlPlane;

/// Where a named model stands for whoever asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Awaited {
    /// Registered: its directory.
    Ready(PathBuf),
    /// Not yet: an unfinished job registers it when it succeeds (the message says which).
    Waiting(String),
    /// Never, as things stand: the message names the field, why, and the fix.
    Missing(String),
}

/// The stored jobs and registered models, read once and jobs first: a job ends only after its
/// export has registered its model, so a producer seen ended has that model in the list read
/// after it (read the other way round, a model registered in between would be called missing).
/// One catalog answers every question of a reconcile pass.
pub(crate) struct Catalog {
    jobs: Vec<JobRecord>,
    models: HashMap<String, PathBuf>,
}

impl Catalog {
    /// Reads every stored job, then every registered model.
    pub(crate) async fn read(plane: &ControlPlane) -> Result<Self, StoreError> {
        let jobs = plane.store().list_jobs(&JobFilter::default()).await?;
        let models = registered_models(plane).await?;
        Ok(Self { jobs, models })
    }

    /// The model `name` given in `field`, for `asker` (the uid of the job asking, if a job
    /// asks: a job never waits for itself, and two jobs that wait for each other's models are
    /// told so instead of waiting forever).
    pub(crate) fn model(&self, name: &str, field: &str, asker: Option<&str>) -> Awaited {
        if let Some(dir) = self.models.get(name) {
            return Awaited::Ready(dir.clone());
        }
        // A cycle can only run through models not registered yet.
        decide(&self.jobs, name, field, asker, |n| {
            !self.models.contains_key(n)
        })
    }
}

/// Model `name` for one question (see [`Catalog::model`]): a registered model costs one
/// lookup, and only a missing one reads the whole catalog (the serving loop asks every second).
pub(crate) async fn model(
    plane: &ControlPlane,
    name: &str,
    field: &str,
    asker: Option<&str>,
) -> Result<Awaited, StoreError> {
    if let Some(m) = plane.store().get_model(name).await? {
        return Ok(Awaited::Ready(PathBuf::from(m.path)));
    }
    // Registered since the lookup: the catalog reads models after jobs, so it sees it.
    Ok(Catalog::read(plane).await?.model(name, field, asker))
}

/// What one reconcile pass knows of models, read on first use: a pass with no job starting
/// from a registered model reads nothing; one whose jobs all start from registered models reads
/// only the model list; the whole catalog is read once some job's model is missing.
#[derive(Default)]
pub(crate) struct LazyCatalog {
    registered: Option<HashMap<String, PathBuf>>,
    catalog: Option<Catalog>,
}

impl LazyCatalog {
    /// Where the registered model `job` starts from stands (`None`: it starts from none).
    pub(crate) async fn job_input(
        &mut self,
        plane: &ControlPlane,
        job: &JobRecord,
    ) -> Result<Option<Awaited>, StoreError> {
        let Some(name) = starts_from(job) else {
            return Ok(None);
        };
        let (field, asker) = ("spec.model.artifact", Some(job.uid.as_str()));
        if let Some(catalog) = &self.catalog {
            return Ok(Some(catalog.model(name, field, asker)));
        }
        let registered = match &mut self.registered {
            Some(r) => r,
            empty => empty.insert(registered_models(plane).await?),
        };
        if let Some(dir) = registered.get(name) {
            return Ok(Some(Awaited::Ready(dir.clone())));
        }
        // Missing from the list: read jobs, then models again (see `Catalog`).
        let catalog = self.catalog.insert(Catalog::read(plane).await?);
        Ok(Some(catalog.model(name, field, asker)))
    }
}

/// Every registered model's directory, by name.
async fn registered_models(plane: &ControlPlane) -> Result<HashMap<String, PathBuf>, StoreError> {
    Ok(plane
        .store()
        .list_models()
        .await?
        .into_iter()
        .map(|m| (m.name, PathBuf::from(m.path)))
        .collect())
}

/// Whether `job`'s export, when it succeeds, registers model `name`.
fn registers(job: &JobRecord, name: &str) -> bool {
    export_name(job).as_deref() == Some(name)
}

/// The registered model a job starts from, if it starts from one.
pub(crate) fn starts_from(job: &JobRecord) -> Option<&str> {
    let model = job.job.spec.model.as_ref()?;
    (model.source == ModelSource::Artifact)
        .then_some(model.artifact.as_deref())
        .flatten()
}

/// `namespace/name`, as messages name a job.
fn label(job: &JobRecord) -> String {
    format!("{}/{}", job.namespace, job.name)
}

/// The verdict for an unregistered `name`, from every stored job. `pending(n)` says whether
/// model `n` is still unregistered (a cycle can only run through those).
fn decide(
    jobs: &[JobRecord],
    name: &str,
    field: &str,
    asker: Option<&str>,
    pending: impl Fn(&str) -> bool,
) -> Awaited {
    let producers = || {
        jobs.iter()
            .filter(move |j| Some(j.uid.as_str()) != asker && registers(j, name))
    };
    if let Some(p) = producers().find(|j| !j.phase.is_terminal()) {
        if let Some(cycle) = asker.and_then(|a| cycle_back(jobs, p, a, &pending)) {
            return Awaited::Missing(format!(
                "{field}: model {name:?} can never be registered: {cycle} each wait for the other's model; start one of them from a model that exists"
            ));
        }
        // Without the producer's phase: the message is recorded again only when it changes.
        return Awaited::Waiting(format!(
            "waiting for model {name:?}, which job {} registers when it succeeds",
            label(p)
        ));
    }
    let ended = producers().max_by_key(|j| j.finished_at.unwrap_or(j.updated_at));
    Awaited::Missing(match ended {
        Some(p) => format!(
            "{field}: no registered model named {name:?}: job {}, which was to register it, ended {}{}; run it again or name a model `ferry get models` lists",
            label(p),
            p.phase,
            p.message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        None => format!(
            "{field}: no registered model named {name:?}; `ferry get models` lists them, and a TrainJob with spec.export.register: {name} registers one"
        ),
    })
}

/// Follows what `producer` waits for, model by model, and describes the cycle if the chain
/// comes back to the job `asker`.
fn cycle_back(
    jobs: &[JobRecord],
    producer: &JobRecord,
    asker: &str,
    pending: &impl Fn(&str) -> bool,
) -> Option<String> {
    let mut seen = HashSet::new();
    let mut chain = vec![label(producer)];
    let mut at = producer;
    while seen.insert(at.uid.as_str()) {
        let wanted = starts_from(at).filter(|n| pending(n))?;
        let next = jobs
            .iter()
            .find(|j| !j.phase.is_terminal() && j.uid != at.uid && registers(j, wanted))?;
        if next.uid == asker {
            let mut all = vec![label(next)];
            all.append(&mut chain);
            return Some(format!("jobs {}", all.join(", ")));
        }
        chain.push(label(next));
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use ferry_spec::JobPhase;

    use super::*;

    fn job(name: &str, phase: JobPhase, from: Option<&str>, register: Option<&str>) -> JobRecord {
        let model = match from {
            Some(m) => format!("{{source: artifact, artifact: {m}}}"),
            None => "{source: scratch, preset: tiny}".to_owned(),
        };
        let export = register
            .map(|r| format!("  export: {{format: hf, register: {r}}}\n"))
            .unwrap_or_default();
        let yaml = format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n  engine: builtin\n  model: {model}\n  data: {{path: c.txt, format: text}}\n  train: {{steps: 2}}\n{export}"
        );
        let job = match ferry_spec::parse_documents(&yaml, "j.yaml")
            .unwrap()
            .remove(0)
        {
            ferry_spec::Resource::TrainJob(j) => j,
            other => panic!("{other:?}"),
        };
        let now = chrono::Utc::now();
        JobRecord {
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            name: name.into(),
            job,
            phase,
            attempt: 0,
            restarts: 0,
            message: (phase == JobPhase::Failed).then(|| "rank 0 exited 1".to_owned()),
            gpus: Vec::new(),
            resumed_from: None,
            created_at: now,
            updated_at: now,
            started_at: None,
            finished_at: phase.is_terminal().then_some(now),
        }
    }

    fn verdict(jobs: &[JobRecord], name: &str, asker: Option<&str>) -> Awaited {
        decide(jobs, name, "spec.model.artifact", asker, |_| true)
    }

    #[test]
    fn a_model_an_unfinished_job_registers_is_awaited_and_names_the_job() {
        let jobs = [job("pre", JobPhase::Running, None, Some("base-v1"))];
        let Awaited::Waiting(msg) = verdict(&jobs, "base-v1", Some("uid-sft")) else {
            panic!("not waiting");
        };
        assert!(
            msg.contains("\"base-v1\"") && msg.contains("job default/pre registers"),
            "{msg}"
        );
    }

    #[test]
    fn a_model_whose_job_failed_or_that_no_job_registers_is_missing_with_the_fix() {
        let failed = [job("pre", JobPhase::Failed, None, Some("base-v1"))];
        let Awaited::Missing(msg) = verdict(&failed, "base-v1", None) else {
            panic!("a failed producer is still awaited");
        };
        assert!(
            msg.starts_with("spec.model.artifact")
                && msg.contains("default/pre")
                && msg.contains("Failed (rank 0 exited 1)"),
            "{msg}"
        );
        let Awaited::Missing(msg) = verdict(&[], "base-v1", None) else {
            panic!("nothing registers it");
        };
        assert!(msg.contains("spec.export.register: base-v1"), "{msg}");
    }

    #[test]
    fn an_export_without_a_name_registers_the_job_name_and_is_awaited() {
        let mut pre = job("pre", JobPhase::Running, None, Some("ignored"));
        pre.job.spec.export.as_mut().unwrap().register = None;
        assert!(matches!(
            verdict(&[pre], "pre", None),
            Awaited::Waiting(m) if m.contains("job default/pre registers")
        ));
    }

    #[test]
    fn a_job_does_not_wait_for_its_own_export_nor_in_a_cycle() {
        // A job that starts from the name it registers would wait for itself.
        let me = [job("loop", JobPhase::Pending, Some("x"), Some("x"))];
        assert!(matches!(
            verdict(&me, "x", Some("uid-loop")),
            Awaited::Missing(_)
        ));
        // a waits for b's model and b for a's: both are told, neither waits forever.
        let jobs = [
            job("a", JobPhase::Pending, Some("b-out"), Some("a-out")),
            job("b", JobPhase::Pending, Some("a-out"), Some("b-out")),
        ];
        let Awaited::Missing(msg) = verdict(&jobs, "b-out", Some("uid-a")) else {
            panic!("a cycle was awaited");
        };
        assert!(
            msg.contains("default/a, default/b") && msg.contains("never be registered"),
            "{msg}"
        );
        // A chain without a cycle (c waits for b, b for a, a runs) waits.
        let chain = [
            job("a", JobPhase::Running, None, Some("a-out")),
            job("b", JobPhase::Pending, Some("a-out"), Some("b-out")),
        ];
        assert!(matches!(
            verdict(&chain, "b-out", Some("uid-c")),
            Awaited::Waiting(_)
        ));
    }

    /// Through the API and real reconcile passes over SQLite: a job starting from a model a
    /// suspended job would register waits in `Pending` (one event, however many passes), and
    /// fails naming that job once it is cancelled. No rank process starts: the producer is
    /// held, and the waiting job is never queued.
    #[tokio::test]
    async fn a_reconcile_pass_holds_a_job_for_its_model_then_fails_it_when_the_producer_ends() {
        let home = tempfile::tempdir().unwrap();
        let plane = crate::api::tests::plane_in(home.path()).await;
        let app = crate::api::router(plane.clone());
        let job_doc = |name: &str, model: serde_json::Value, export: Option<&str>| {
            let mut doc = serde_json::json!({
                "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": {
                    "engine": "builtin", "task": "pretrain", "model": model,
                    "data": {"path": "c.txt", "format": "text"}, "train": {"steps": 2},
                },
            });
            if let Some(r) = export {
                doc["spec"]["export"] = serde_json::json!({"format": "hf", "register": r});
                doc["spec"]["suspend"] = serde_json::json!(true);
            }
            doc
        };
        let producer = job_doc(
            "pre",
            serde_json::json!({"source": "scratch", "preset": "tiny"}),
            Some("base-v1"),
        );
        let consumer = job_doc(
            "sft",
            serde_json::json!({"source": "artifact", "artifact": "base-v1"}),
            None,
        );
        for doc in [producer, consumer] {
            let (status, body) =
                crate::api::tests::call(&app, "POST", "/api/v1/apply", Some(doc)).await;
            assert!(status.is_success(), "{body}");
        }
        let mut admission = None;
        let get = |name: &'static str| {
            let plane = plane.clone();
            async move {
                plane
                    .store()
                    .get_job("default", name)
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        for _ in 0..3 {
            crate::reconcile::pass(&plane, &mut admission)
                .await
                .unwrap();
        }
        assert_eq!(get("pre").await.phase, JobPhase::Suspended);
        let sft = get("sft").await;
        assert_eq!(sft.phase, JobPhase::Pending, "{:?}", sft.message);
        assert!(
            sft.message
                .as_deref()
                .is_some_and(|m| m.contains("job default/pre registers")),
            "{:?}",
            sft.message
        );
        let events = plane.store().events(&sft.uid).await.unwrap();
        let waits = events.iter().filter(|e| e.reason == "WaitingForModel");
        assert_eq!(waits.count(), 1, "{events:?}");

        let (status, body) = crate::api::tests::call(
            &app,
            "POST",
            "/api/v1/namespaces/default/jobs/pre/cancel",
            None,
        )
        .await;
        assert!(status.is_success(), "{body}");
        crate::reconcile::pass(&plane, &mut admission)
            .await
            .unwrap();
        let sft = get("sft").await;
        assert_eq!(sft.phase, JobPhase::Failed);
        let message = sft.message.unwrap_or_default();
        assert!(
            message.starts_with("spec.model.artifact")
                && message.contains("job default/pre, which was to register it, ended Cancelled"),
            "{message}"
        );
    }
}

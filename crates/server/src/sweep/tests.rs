//! Sweeps through the API in-process, over a real SQLite store in a temp dir. The steps of a
//! reconcile pass that concern sweeps (`suspend::follow_spec`, then `release`) are run by
//! [`settle`], so no rank process is launched; `ferry up` end to end is in the CLI's tests.

use axum::Router;
use axum::http::StatusCode;
use ferry_spec::JobPhase;
use ferry_store::{JobFilter, JobRecord, StatusPatch};
use serde_json::{Value, json};

use super::*;
use crate::api::tests::{call, plane_in};

/// A sweep of `sh -c 'sleep 1'` jobs over three values of `env.TAG` and two of
/// `train.steps`: six jobs.
fn sweep_doc(max_parallel: Option<i32>) -> Value {
    let mut doc = json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "Sweep",
        "metadata": {"name": "grid", "labels": {"team": "a"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"project": "x"}},
                "spec": {"engine": "command", "command": ["sh", "-c", "sleep 1"]},
            },
            "parameters": {"env.TAG": ["a", "b", "c"], "train.steps": [10, 20]},
        },
    });
    if let Some(n) = max_parallel {
        doc["spec"]["maxParallel"] = json!(n);
    }
    doc
}

async fn apply(app: &Router, doc: Value) -> (StatusCode, Value) {
    call(app, "POST", "/api/v1/apply", Some(doc)).await
}

/// A control plane over a fresh store (kept while the returned directory lives) and its routes.
async fn fresh() -> (tempfile::TempDir, ControlPlane, Router) {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = crate::api::router(plane.clone());
    (home, plane, app)
}

/// The sweep's jobs, by index.
async fn jobs(plane: &ControlPlane) -> Vec<JobRecord> {
    let mut jobs: Vec<JobRecord> = plane
        .store()
        .list_jobs(&JobFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|j| belongs(j, "default", "grid"))
        .collect();
    jobs.sort_by_key(|j| index_of(j).unwrap());
    jobs
}

fn phases(jobs: &[JobRecord]) -> Vec<&'static str> {
    jobs.iter().map(|j| j.phase.as_str()).collect()
}

/// What a reconcile pass does for sweeps: jobs follow their `spec.suspend`, then held jobs
/// are released.
async fn settle(plane: &ControlPlane) {
    let mut active = plane
        .store()
        .list_jobs(&JobFilter::unfinished())
        .await
        .unwrap();
    for job in &mut active {
        if let Some(updated) = crate::suspend::follow_spec(plane, job).await.unwrap() {
            *job = updated;
        }
    }
    let mut catalog = crate::inputs::LazyCatalog::default();
    release(plane, &mut active, &mut catalog).await.unwrap();
}

/// Moves `job` along `path` in the store, as the reconcile loop would.
async fn walk(plane: &ControlPlane, job: &JobRecord, path: &[JobPhase]) {
    let mut from = job.phase;
    for &to in path {
        plane
            .store()
            .transition(
                &job.uid,
                from,
                to,
                "Test",
                "moved by the test",
                StatusPatch::default(),
            )
            .await
            .unwrap();
        from = to;
    }
}

#[tokio::test]
async fn applying_a_sweep_creates_its_jobs_labelled_in_order() {
    let (_home, plane, app) = fresh().await;
    let (status, applied) = apply(&app, sweep_doc(None)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["kind"], "Sweep");
    assert_eq!(applied[0]["action"], "created");
    assert_eq!(applied[0]["namespace"], "default");

    let jobs = jobs(&plane).await;
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        ["grid-0", "grid-1", "grid-2", "grid-3", "grid-4", "grid-5"]
    );
    let job = &jobs[3].job;
    assert_eq!(job.spec.env["TAG"], "b");
    assert_eq!(job.spec.train.steps, Some(20));
    assert_eq!(job.metadata.labels["project"], "x");
    assert_eq!(job.metadata.labels["ferry.dev/sweep-index"], "3");
    assert!(jobs.iter().all(|j| !j.job.spec.suspend));
    assert_eq!(phases(&jobs), ["Pending"; 6]);

    let stored = plane
        .store()
        .get_object("Sweep", "default", "grid")
        .await
        .unwrap()
        .unwrap();
    assert!(stored.doc.get("status").is_none(), "{}", stored.doc);
    let (status, got) = call(&app, "GET", "/api/v1/namespaces/default/sweeps/grid", None).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let s = &got["doc"]["status"];
    assert_eq!(s["phases"], json!({"Pending": 6}), "{s}");
    assert_eq!(
        s["jobs"][4]["parameters"],
        json!({"env.TAG": "c", "train.steps": 10})
    );
    assert_eq!(s["jobs"][4]["name"], "grid-4");
    let (_, listed) = call(&app, "GET", "/api/v1/sweeps?namespace=default", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        listed[0]["doc"]["status"]["jobs"].as_array().unwrap().len(),
        6
    );
}

/// With `maxParallel: 2`, jobs 2.. are created suspended; each job that ends releases the next
/// by index, one for one, and the count holds across a restart of the control plane (a fresh
/// one on the same store).
#[tokio::test]
async fn max_parallel_holds_the_rest_and_releases_them_in_order() {
    let (home, plane, app) = fresh().await;
    let (status, applied) = apply(&app, sweep_doc(Some(2))).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let listed = jobs(&plane).await;
    let held: Vec<bool> = listed.iter().map(|j| j.job.spec.suspend).collect();
    assert_eq!(held, [false, false, true, true, true, true]);
    settle(&plane).await;
    let listed = jobs(&plane).await;
    assert_eq!(
        phases(&listed),
        [
            "Pending",
            "Pending",
            "Suspended",
            "Suspended",
            "Suspended",
            "Suspended"
        ]
    );
    // Nothing is released while two are live.
    settle(&plane).await;
    assert_eq!(phases(&jobs(&plane).await)[2], "Suspended");

    // Job 0 succeeds: job 2 is released, and only it.
    use JobPhase::*;
    walk(&plane, &listed[0], &[Queued, Admitted, Running, Succeeded]).await;
    settle(&plane).await;
    let listed = jobs(&plane).await;
    assert_eq!(
        phases(&listed),
        [
            "Succeeded",
            "Pending",
            "Queued",
            "Suspended",
            "Suspended",
            "Suspended"
        ]
    );
    assert!(!listed[2].job.spec.suspend);
    let events = plane.store().events(&listed[2].uid).await.unwrap();
    let released = events.last().unwrap();
    assert_eq!(released.reason, "Resumed");
    assert!(
        released
            .message
            .starts_with("released by sweep grid (job 2; spec.maxParallel: 2"),
        "{released:?}"
    );

    // A fresh control plane on the same store: job 1 fails, job 3 is released.
    drop(app);
    plane.store().close().await;
    let plane = plane_in(home.path()).await;
    walk(&plane, &listed[1], &[Failed]).await;
    settle(&plane).await;
    let listed = jobs(&plane).await;
    assert_eq!(
        phases(&listed),
        [
            "Succeeded",
            "Failed",
            "Queued",
            "Queued",
            "Suspended",
            "Suspended"
        ]
    );

    // A held job a user resumed and suspended again is the user's: the sweep skips it.
    let app = crate::api::router(plane.clone());
    for action in ["resume", "suspend"] {
        let uri = format!("/api/v1/namespaces/default/jobs/grid-4/{action}");
        let (status, got) = call(&app, "POST", &uri, None).await;
        assert_eq!(status, StatusCode::OK, "{action}: {got}");
    }
    let (status, _) = call(
        &app,
        "POST",
        "/api/v1/namespaces/default/jobs/grid-2/cancel",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    settle(&plane).await;
    assert_eq!(
        phases(&jobs(&plane).await),
        [
            "Succeeded",
            "Failed",
            "Cancelled",
            "Queued",
            "Suspended",
            "Queued"
        ]
    );
}

#[tokio::test]
async fn a_held_job_whose_model_is_awaited_stays_held_until_it_is_registered() {
    let (_home, plane, app) = fresh().await;
    let producer = json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "pre"},
        "spec": {"engine": "command", "command": ["true"], "suspend": true,
                 "export": {"format": "hf", "register": "base-v1"}},
    });
    let (status, got) = apply(&app, producer).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let mut doc = sweep_doc(Some(1));
    doc["spec"]["template"]["spec"]["model"] = json!({"source": "artifact", "artifact": "base-v1"});
    let (status, got) = apply(&app, doc).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    settle(&plane).await;
    // Job 0 ends (cancelled): a slot frees, but the next job's model is still to come.
    let listed = jobs(&plane).await;
    walk(&plane, &listed[0], &[JobPhase::Cancelled]).await;
    settle(&plane).await;
    assert_eq!(phases(&jobs(&plane).await)[1], "Suspended");

    let dir = plane.config().home.join("base");
    let model = ferry_store::ModelRecord::new("base-v1", dir.to_string_lossy(), "hf-safetensors");
    plane.store().register_model(&model).await.unwrap();
    settle(&plane).await;
    assert_eq!(
        phases(&jobs(&plane).await)[..3],
        ["Cancelled", "Queued", "Suspended"]
    );
}

#[tokio::test]
async fn re_applying_the_same_sweep_changes_nothing_and_a_changed_one_is_refused() {
    let (_home, plane, app) = fresh().await;
    let (status, _) = apply(&app, sweep_doc(Some(2))).await;
    assert_eq!(status, StatusCode::OK);
    let before = jobs(&plane).await;

    let (status, applied) = apply(&app, sweep_doc(Some(2))).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["action"], "unchanged");
    let after = jobs(&plane).await;
    assert_eq!(before, after);
    let stored = plane
        .store()
        .get_object("Sweep", "default", "grid")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.generation, 1);

    let mut changed = sweep_doc(Some(3));
    changed["spec"]["parameters"]["env.TAG"] = json!(["a", "b"]);
    let (status, err) = apply(&app, changed).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(
        err["error"]["message"],
        "Sweep default/grid already exists and its spec.parameters, spec.maxParallel changed; a \
         sweep cannot change once applied: delete it first with `ferry delete sweep grid` (its \
         jobs go with it), or apply the new one under another metadata.name"
    );
    assert_eq!(jobs(&plane).await, after);

    // A job deleted (or never created, by a crash) is created again by the same apply.
    walk(&plane, &after[5], &[JobPhase::Cancelled]).await;
    plane.store().delete_job(&after[5].uid).await.unwrap();
    let (status, applied) = apply(&app, sweep_doc(Some(2))).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["action"], "configured");
    let again = jobs(&plane).await;
    assert_eq!(again.len(), 6);
    assert_eq!(again[..5], after[..5]);
    assert!(again[5].job.spec.suspend);
}

#[tokio::test]
async fn a_job_name_taken_by_another_job_is_refused_before_anything_is_stored() {
    let (_home, plane, app) = fresh().await;
    let job = json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "grid-1"},
        "spec": {"engine": "command", "command": ["true"]},
    });
    // In one batch, and against a stored job.
    let (status, err) = apply(&app, json!([sweep_doc(None), job.clone()])).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(
        err["error"]["message"],
        "job default/grid-1 is named twice in this batch (TrainJob grid-1 and sweep grid's job 1); rename one"
    );
    let (status, _) = apply(&app, job).await;
    assert_eq!(status, StatusCode::OK);
    let (status, err) = apply(&app, sweep_doc(None)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().starts_with(
            "Sweep default/grid would create job grid-1, but a job of that name exists;"
        ),
        "{err}"
    );
    assert!(
        plane
            .store()
            .get_object("Sweep", "default", "grid")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        plane
            .store()
            .list_jobs(&JobFilter::default())
            .await
            .unwrap()
            .len(),
        1
    );
}

/// The control plane's own checks run on every job of the sweep and are reported as the
/// sweep's: here, more GPUs than `ferry up` has, for one combination.
#[tokio::test]
async fn the_jobs_are_checked_against_the_control_plane() {
    let home = tempfile::tempdir().unwrap();
    let app = crate::api::router(plane_in(home.path()).await);
    let mut doc = sweep_doc(None);
    doc["spec"]["parameters"] = json!({"resources.gpusPerNode": [1, 8]});
    let (status, err) = apply(&app, doc).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let problems = err["error"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{err}");
    assert_eq!(
        problems[0]["field"],
        r#"spec.parameters["resources.gpusPerNode"]"#
    );
    let message = problems[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "in job grid-1 (resources.gpusPerNode=8): spec.resources.gpusPerNode: the job needs 8 GPUs"
        ),
        "{message}"
    );
}

/// The status counts the jobs per phase and names the succeeded job with the lowest final
/// loss; a failed job's lower loss does not count.
#[tokio::test]
async fn the_status_ranks_succeeded_jobs_by_the_metric() {
    let (_home, plane, app) = fresh().await;
    let (status, _) = apply(&app, sweep_doc(None)).await;
    assert_eq!(status, StatusCode::OK);
    let listed = jobs(&plane).await;
    use JobPhase::*;
    for (i, loss, end) in [(0, 0.9, Succeeded), (1, 0.4, Succeeded), (2, 0.1, Failed)] {
        walk(&plane, &listed[i], &[Queued, Admitted, Running]).await;
        plane
            .store()
            .append_metrics(
                &listed[i].uid,
                0,
                &[
                    json!({"step": 5, "loss": 2.0}),
                    json!({"step": 10, "loss": loss}),
                ],
            )
            .await
            .unwrap();
        let job = plane
            .store()
            .get_job_by_uid(&listed[i].uid)
            .await
            .unwrap()
            .unwrap();
        walk(&plane, &job, &[end]).await;
    }
    let (_, got) = call(&app, "GET", "/api/v1/namespaces/default/sweeps/grid", None).await;
    let s = &got["doc"]["status"];
    assert_eq!(
        s["phases"],
        json!({"Succeeded": 2, "Failed": 1, "Pending": 3}),
        "{s}"
    );
    assert_eq!(s["best"], json!({"job": "grid-1", "value": 0.4}), "{s}");
    assert_eq!(s["jobs"][1]["step"], 10);
    assert_eq!(s["jobs"][2]["value"], 0.1);
    assert!(s["jobs"][3].get("value").is_none(), "{s}");
}

/// Deleting a sweep cancels its unfinished jobs and deletes them with it; other jobs stay.
#[tokio::test]
async fn deleting_a_sweep_cancels_and_deletes_its_jobs() {
    let (_home, plane, app) = fresh().await;
    let other = json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "other"},
        "spec": {"engine": "command", "command": ["true"]},
    });
    let (status, _) = apply(&app, json!([sweep_doc(Some(1)), other])).await;
    assert_eq!(status, StatusCode::OK);
    settle(&plane).await;
    let listed = jobs(&plane).await;
    walk(&plane, &listed[0], &[JobPhase::Queued]).await;

    let (status, got) = call(
        &app,
        "DELETE",
        "/api/v1/namespaces/default/sweeps/grid",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["deleted"], "default/grid");
    for job in &listed {
        assert!(
            plane
                .store()
                .get_job_by_uid(&job.uid)
                .await
                .unwrap()
                .is_none()
        );
    }
    let left = plane
        .store()
        .list_jobs(&JobFilter::default())
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].name, "other");
    let (status, _) = call(&app, "GET", "/api/v1/namespaces/default/sweeps/grid", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "DELETE",
        "/api/v1/namespaces/default/sweeps/grid",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

//! `DELETE /api/v1/models/{name}` in-process, over a real SQLite store in a temp dir. Jobs are
//! stored through the API and moved by the test; no rank process or replica is launched.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::http::StatusCode;
use ferry_spec::JobPhase;
use ferry_store::{ModelRecord, StatusPatch};
use serde_json::{Value, json};

use crate::api::tests::{call, plane_in};
use crate::state::ControlPlane;

/// A control plane over a fresh store (kept while the returned directory lives) and its routes.
async fn fresh() -> (tempfile::TempDir, ControlPlane, Router) {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = crate::api::router(plane.clone());
    (home, plane, app)
}

/// Registers `name` at `dir`, with a weights file in it, as an export would.
async fn register(plane: &ControlPlane, name: &str, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"weights").unwrap();
    let model = ModelRecord::new(name, dir.to_string_lossy(), "hf-safetensors");
    plane.store().register_model(&model).await.unwrap();
}

/// Where an export of `name` by job `uid` puts its files.
fn exported(plane: &ControlPlane, name: &str, uid: &str) -> PathBuf {
    plane.config().home.join("models").join(name).join(uid)
}

async fn apply(app: &Router, doc: Value) {
    let (status, applied) = call(app, "POST", "/api/v1/apply", Some(doc)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
}

fn deployment(namespace: &str, name: &str, model: Value, adapters: &[&str]) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": model, "engine": "builtin", "adapters": adapters},
    })
}

/// A command job (never launched here) whose `spec.model` is `model`.
fn job_from(name: &str, model: Value) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"engine": "command", "command": ["true"], "model": model},
    })
}

fn artifact(name: &str) -> Value {
    json!({"source": "artifact", "artifact": name})
}

async fn delete(app: &Router, name: &str) -> (StatusCode, Value) {
    call(app, "DELETE", &format!("/api/v1/models/{name}"), None).await
}

fn message(err: &Value) -> &str {
    err["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {err}"))
}

#[tokio::test]
async fn an_unknown_model_is_not_found() {
    let (_home, _plane, app) = fresh().await;
    let (status, err) = delete(&app, "no-such").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    let message = message(&err);
    assert!(
        message.contains("Model no-such not found") && message.contains("ferry get models"),
        "{message}"
    );
    let (status, err) = call(&app, "GET", "/api/v1/models/no-such", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
}

#[tokio::test]
async fn a_model_in_use_is_refused_naming_each_user_and_the_fix() {
    let (_home, plane, app) = fresh().await;
    let dir = exported(&plane, "tiny-lm-v1", "uid-1");
    register(&plane, "tiny-lm-v1", &dir).await;
    register(&plane, "base", &exported(&plane, "base", "uid-0")).await;

    apply(
        &app,
        deployment("team-a", "chat", artifact("tiny-lm-v1"), &[]),
    )
    .await;
    apply(
        &app,
        deployment("default", "lora", artifact("base"), &["tiny-lm-v1"]),
    )
    .await;
    // Neither of these uses it: another artifact, and a path that merely looks like the name.
    apply(&app, deployment("default", "other", artifact("base"), &[])).await;
    apply(
        &app,
        deployment(
            "default",
            "by-path",
            json!({"source": "path", "path": "tiny-lm-v1"}),
            &[],
        ),
    )
    .await;
    apply(&app, job_from("ft", artifact("tiny-lm-v1"))).await;
    apply(&app, job_from("done", artifact("tiny-lm-v1"))).await;
    let done = plane
        .store()
        .get_job("default", "done")
        .await
        .unwrap()
        .unwrap();
    plane
        .store()
        .transition(
            &done.uid,
            JobPhase::Pending,
            JobPhase::Cancelled,
            "Test",
            "ended by the test",
            StatusPatch::default(),
        )
        .await
        .unwrap();

    let (status, err) = delete(&app, "tiny-lm-v1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    let text = message(&err);
    for needle in [
        "model tiny-lm-v1 is still in use by",
        "ModelDeployment team-a/chat (spec.model)",
        "ModelDeployment default/lora (spec.adapters)",
        "unfinished TrainJob default/ft (Pending)",
        "ferry delete deployment",
        "ferry cancel job",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    for unrelated in ["other", "by-path", "done"] {
        assert!(
            !text.contains(&format!("/{unrelated} ")),
            "{unrelated} named: {text}"
        );
    }
    assert!(
        plane
            .store()
            .get_model("tiny-lm-v1")
            .await
            .unwrap()
            .is_some()
    );
    assert!(dir.join("model.safetensors").is_file(), "files kept");

    // Once the job ends and the deployments go, the model is free.
    let ft = plane
        .store()
        .get_job("default", "ft")
        .await
        .unwrap()
        .unwrap();
    let (status, cancelled) = call(
        &app,
        "POST",
        "/api/v1/namespaces/default/jobs/ft/cancel",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    let ft = plane
        .store()
        .get_job_by_uid(&ft.uid)
        .await
        .unwrap()
        .unwrap();
    assert!(ft.phase.is_terminal(), "{:?}", ft.phase);
    let (status, err) = delete(&app, "tiny-lm-v1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert!(!message(&err).contains("TrainJob"), "{err}");
    assert!(!message(&err).contains("ferry cancel"), "{err}");
    for path in [
        "/api/v1/namespaces/team-a/deployments/chat",
        "/api/v1/namespaces/default/deployments/lora",
    ] {
        let (status, deleted) = call(&app, "DELETE", path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {deleted}");
    }
    let (status, deleted) = delete(&app, "tiny-lm-v1").await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["filesRemoved"], true, "{deleted}");
}

#[tokio::test]
async fn deleting_removes_its_files_under_the_models_dir_and_frees_the_name() {
    let (_home, plane, app) = fresh().await;
    let dir = exported(&plane, "tiny-lm-v1", "uid-1");
    register(&plane, "tiny-lm-v1", &dir).await;
    let sibling = exported(&plane, "tiny-lm-v2", "uid-2");
    register(&plane, "tiny-lm-v2", &sibling).await;

    let (status, got) = call(&app, "GET", "/api/v1/models/tiny-lm-v1", None).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["path"], dir.to_string_lossy().as_ref());

    let (status, deleted) = delete(&app, "tiny-lm-v1").await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(
        deleted,
        json!({"deleted": "tiny-lm-v1", "path": dir.to_string_lossy(), "filesRemoved": true})
    );
    assert!(!dir.exists(), "{} still there", dir.display());
    assert!(
        !dir.parent().unwrap().exists(),
        "the empty name directory goes too"
    );
    assert!(
        sibling.join("model.safetensors").is_file(),
        "another model's files stay"
    );
    assert!(
        plane.config().home.join("models").is_dir(),
        "the models dir stays"
    );
    assert_eq!(plane.store().get_model("tiny-lm-v1").await.unwrap(), None);
    let (status, _) = delete(&app, "tiny-lm-v1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The name can be registered again (the export of a later job).
    let again = exported(&plane, "tiny-lm-v1", "uid-3");
    register(&plane, "tiny-lm-v1", &again).await;
    let (status, got) = call(&app, "GET", "/api/v1/models/tiny-lm-v1", None).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["path"], again.to_string_lossy().as_ref());
}

#[tokio::test]
async fn a_model_registered_from_elsewhere_is_unregistered_but_keeps_its_files() {
    let (_home, plane, app) = fresh().await;
    let outside = tempfile::tempdir().unwrap();
    let theirs = outside.path().join("my-model");
    register(&plane, "mine", &theirs).await;

    let (status, deleted) = delete(&app, "mine").await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["deleted"], "mine");
    assert_eq!(deleted["filesRemoved"], false, "{deleted}");
    let note = deleted["note"].as_str().unwrap();
    assert!(note.contains("kept") && note.contains("outside"), "{note}");
    assert!(
        theirs.join("model.safetensors").is_file(),
        "the user's files stay"
    );
    assert_eq!(plane.store().get_model("mine").await.unwrap(), None);

    // Neither `..` nor a symlink inside the models dir leads Ferry out of it.
    // `models/x/../..` is $FERRY_HOME itself, the store's file in it.
    let models = plane.config().home.join("models");
    std::fs::create_dir_all(models.join("x")).unwrap();
    let dotted = models.join("x").join("..").join("..");
    let dotted_target = dotted.canonicalize().unwrap();
    std::fs::write(dotted_target.join("keep-me"), b"x").unwrap();
    register(&plane, "dotted", &dotted).await;
    let link = models.join("linked");
    std::os::unix::fs::symlink(&theirs, &link).unwrap();
    plane
        .store()
        .register_model(&ModelRecord::new("linked", link.to_string_lossy(), "peft"))
        .await
        .unwrap();
    for name in ["dotted", "linked"] {
        let (status, deleted) = delete(&app, name).await;
        assert_eq!(status, StatusCode::OK, "{deleted}");
        assert_eq!(deleted["filesRemoved"], false, "{name}: {deleted}");
    }
    assert!(dotted_target.join("keep-me").is_file());
    assert!(dotted_target.join("ferry.db").is_file());
    assert!(theirs.join("model.safetensors").is_file());
}

#[tokio::test]
async fn files_another_model_shares_are_kept() {
    let (_home, plane, app) = fresh().await;
    let dir = exported(&plane, "a", "uid-1");
    register(&plane, "a", &dir).await;
    plane
        .store()
        .register_model(&ModelRecord::new(
            "alias",
            dir.to_string_lossy(),
            "hf-safetensors",
        ))
        .await
        .unwrap();
    let (status, deleted) = delete(&app, "a").await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["filesRemoved"], false, "{deleted}");
    assert!(
        deleted["note"]
            .as_str()
            .unwrap()
            .contains("another registered model"),
        "{deleted}"
    );
    assert!(dir.join("model.safetensors").is_file());
    let (status, deleted) = delete(&app, "alias").await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["filesRemoved"], true, "{deleted}");
    assert!(!dir.exists());
}

#[tokio::test]
async fn a_job_that_will_register_the_name_again_does_not_hold_it() {
    let (_home, plane, app) = fresh().await;
    let dir = exported(&plane, "tiny-lm-v1", "uid-1");
    register(&plane, "tiny-lm-v1", &dir).await;
    let mut job = job_from("retrain", json!({"source": "scratch", "preset": "tiny"}));
    job["spec"]["export"] = json!({"register": "tiny-lm-v1"});
    apply(&app, job).await;

    let (status, deleted) = delete(&app, "tiny-lm-v1").await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["filesRemoved"], true, "{deleted}");
    assert!(!dir.exists());
    // Its export will write beside the old one: the name's directory stays for it.
    assert!(dir.parent().unwrap().is_dir());
}

/// A delete and an apply naming the model do not interleave. A delete waits for an apply that
/// is storing, then sees the deployment it stored and refuses; an apply waits for a delete
/// under way, and its deployment then names a model that is gone.
#[tokio::test]
async fn a_delete_and_an_apply_naming_the_model_take_turns() {
    let (_home, plane, app) = fresh().await;
    register(&plane, "base", &exported(&plane, "base", "u1")).await;
    let held = std::time::Duration::from_millis(300);

    // An apply between its checks and its writes.
    let storing = plane.storing_model_users().await;
    let deleting = tokio::spawn({
        let app = app.clone();
        async move { delete(&app, "base").await }
    });
    tokio::time::sleep(held).await;
    assert!(
        !deleting.is_finished(),
        "the delete went ahead of an apply under way"
    );
    let doc = deployment("default", "chat", artifact("base"), &[]);
    plane
        .store()
        .put_object("ModelDeployment", "default", "chat", &doc, false)
        .await
        .unwrap();
    drop(storing);
    let (status, err) = deleting.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert!(message(&err).contains("default/chat"), "{err}");

    // A delete between its check and its removal.
    register(&plane, "other", &exported(&plane, "other", "u2")).await;
    let removing = plane.deleting_model().await;
    let applying = tokio::spawn({
        let app = app.clone();
        let doc = deployment("default", "chat2", artifact("other"), &[]);
        async move { apply(&app, doc).await }
    });
    tokio::time::sleep(held).await;
    assert!(
        !applying.is_finished(),
        "the apply stored while a delete was under way"
    );
    drop(removing);
    applying.await.unwrap();
}

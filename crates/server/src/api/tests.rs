//! The API in-process (`oneshot` on the router) over a real SQLite store in a temp dir.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{ControlPlane, GpuSetting, ServerConfig};

/// A control plane with 4 virtual GPUs whose `FERRY_HOME` is `home`, started as `ferry up`
/// starts one (so an older store is gathered first).
pub(crate) async fn plane_in(home: &std::path::Path) -> ControlPlane {
    let mut config = ServerConfig::new(home.to_owned(), "127.0.0.1:0".parse().unwrap());
    config.gpus = GpuSetting::Virtual(4);
    ControlPlane::start(config).await.expect("control plane")
}

/// Sends one request; the status and the JSON answer.
pub(crate) async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

fn queue(namespace: &str, nominal: u32) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "a", "namespace": namespace},
        "spec": {"quotas": [{"flavor": "any", "nominal": nominal}]},
    })
}

fn class(name: &str, namespace: &str, value: i32) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "PriorityClass",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"value": value},
    })
}

#[tokio::test]
async fn a_queue_applied_from_two_namespaces_is_one_object() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());

    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(queue("x", 1))).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["action"], "created", "{applied}");
    assert!(applied[0].get("namespace").is_none(), "{applied}");
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(queue("y", 2))).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["action"], "configured", "{applied}");
    assert!(applied[0].get("namespace").is_none(), "{applied}");

    let stored = plane.store().list_objects("Queue", None).await.unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].generation, 2);
    // Listed from any namespace, without claiming one (beside ferry up's own `default`).
    let (_, listed) = call(&app, "GET", "/api/v1/queues?namespace=x", None).await;
    let listed = listed.as_array().unwrap();
    let names: Vec<&Value> = listed.iter().map(|q| &q["name"]).collect();
    assert_eq!(names, [&json!("a"), &json!("default")], "{listed:?}");
    assert_eq!(listed[1]["doc"]["status"]["builtIn"], true, "{listed:?}");
    assert_eq!(listed[0]["doc"]["spec"]["quotas"][0]["nominal"], 2);
    assert!(
        listed[0]["doc"]["metadata"].get("namespace").is_none(),
        "{listed:?}"
    );
    assert_eq!(listed[0]["namespace"], "");
}

#[tokio::test]
async fn queues_and_classes_are_found_and_deleted_from_any_namespace() {
    let home = tempfile::tempdir().unwrap();
    let app = super::router(plane_in(home.path()).await);
    let batch = json!([queue("default", 2), class("urgent", "team-a", 1000)]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(batch)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");

    for uri in [
        "/api/v1/namespaces/other/queues/a",
        "/api/v1/queues/a",
        "/api/v1/namespaces/default/priorityclasses/urgent",
        "/api/v1/priorityclasses/urgent",
    ] {
        let (status, got) = call(&app, "GET", uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {got}");
    }
    let (status, deleted) = call(
        &app,
        "DELETE",
        "/api/v1/namespaces/other/priorityclasses/urgent",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["deleted"], "urgent");
    let (status, err) = call(&app, "GET", "/api/v1/priorityclasses/urgent", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("PriorityClass urgent not found;") && message.contains("ferry get"),
        "{message}"
    );
    let (status, _) = call(&app, "DELETE", "/api/v1/queues/a", None).await;
    assert_eq!(status, StatusCode::OK);

    // Deployments stay in their namespace.
    let (status, err) = call(&app, "GET", "/api/v1/deployments/chat", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/api/v1/namespaces/NAMESPACE/deployments/NAME"),
        "{err}"
    );
}

#[tokio::test]
async fn a_built_in_class_is_found_by_name_and_cannot_be_deleted() {
    let home = tempfile::tempdir().unwrap();
    let app = super::router(plane_in(home.path()).await);
    let (status, high) = call(
        &app,
        "GET",
        "/api/v1/namespaces/team-a/priorityclasses/high",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{high}");
    assert_eq!(high["doc"]["status"]["builtIn"], true, "{high}");
    assert_eq!(high["doc"]["spec"]["value"], 100, "{high}");

    let (status, err) = call(&app, "DELETE", "/api/v1/priorityclasses/high", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(
        err["error"]["message"],
        "PriorityClass `high` is ferry up's own (set by --priority-classes or the defaults \
         low/normal/high); it cannot be deleted; apply a PriorityClass named `high` to change its \
         value"
    );

    // An applied class of that name replaces it, and deleting that falls back to it.
    let (status, _) = call(
        &app,
        "POST",
        "/api/v1/apply",
        Some(class("high", "default", 5)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, high) = call(&app, "GET", "/api/v1/priorityclasses/high", None).await;
    assert_eq!(high["doc"]["spec"]["value"], 5, "{high}");
    assert!(high["doc"].get("status").is_none(), "{high}");
    let (status, _) = call(&app, "DELETE", "/api/v1/priorityclasses/high", None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, high) = call(&app, "GET", "/api/v1/priorityclasses/high", None).await;
    assert_eq!(high["doc"]["spec"]["value"], 100, "{high}");
    assert_eq!(high["doc"]["status"]["builtIn"], true, "{high}");
}

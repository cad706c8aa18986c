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

/// A suspended command job (it never launches) in `namespace` with `labels`.
fn labelled_job(name: &str, namespace: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"engine": "command", "command": ["true"], "suspend": true},
    })
}

/// `?labelSelector=` with the selector percent-encoded, as a client sends it.
fn selecting(path: &str, selector: &str) -> String {
    let encoded: String = selector
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let join = if path.contains('?') { '&' } else { '?' };
    format!("{path}{join}labelSelector={encoded}")
}

/// The names a list answer holds, sorted (jobs carry theirs in `metadata`, objects and models
/// at the top).
fn names(listed: &Value) -> Vec<String> {
    let mut names: Vec<String> = listed
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {listed}"))
        .iter()
        .map(|o| {
            o.get("metadata")
                .map_or(&o["name"], |m| &m["name"])
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn lists_keep_only_what_the_label_selector_matches() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    let mut nlp_queue = queue("default", 1);
    nlp_queue["metadata"]["labels"] = json!({"team": "nlp"});
    let batch = json!([
        labelled_job("a", "default", json!({"team": "nlp", "tier": "gold"})),
        labelled_job("b", "default", json!({"team": "nlp"})),
        labelled_job("c", "other", json!({"team": "vision", "tier": "bronze"})),
        labelled_job("d", "default", json!({})),
        nlp_queue,
    ]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(batch)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    plane
        .store()
        .register_model(&ferry_store::ModelRecord::new("m", "/models/m", "peft"))
        .await
        .unwrap();
    let exported = ferry_store::ModelRecord {
        labels: [("team".to_owned(), "nlp".to_owned())].into(),
        ..ferry_store::ModelRecord::new("nlp-m", "/models/nlp-m", "hf-safetensors")
    };
    plane.store().register_model(&exported).await.unwrap();

    let cases = [
        ("/api/v1/jobs", "team=nlp", vec!["a", "b"]),
        ("/api/v1/jobs", "team==nlp,tier=gold", vec!["a"]),
        ("/api/v1/jobs", "team in (nlp, vision)", vec!["a", "b", "c"]),
        ("/api/v1/jobs", "team!=nlp", vec!["c", "d"]),
        ("/api/v1/jobs", "tier notin (gold)", vec!["b", "c", "d"]),
        ("/api/v1/jobs", "tier", vec!["a", "c"]),
        ("/api/v1/jobs", "!tier", vec!["b", "d"]),
        ("/api/v1/jobs", "", vec!["a", "b", "c", "d"]),
        ("/api/v1/jobs?namespace=default", "team!=nlp", vec!["d"]),
        ("/api/v1/queues", "team=nlp", vec!["a"]),
        ("/api/v1/queues", "!team", vec!["default"]),
        ("/api/v1/priorityclasses", "team", vec![]),
        ("/api/v1/models", "team=nlp", vec!["nlp-m"]),
        ("/api/v1/models", "!team", vec!["m"]),
        ("/api/v1/models", "team!=vision", vec!["m", "nlp-m"]),
    ];
    for (path, selector, expect) in cases {
        let uri = selecting(path, selector);
        let (status, listed) = call(&app, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {listed}");
        assert_eq!(names(&listed), expect, "{uri}");
    }
    // Without a selector, everything (ferry up's own queue too).
    let (_, listed) = call(&app, "GET", "/api/v1/queues", None).await;
    assert_eq!(names(&listed), ["a", "default"]);

    for path in [
        "/api/v1/jobs",
        "/api/v1/jobs?namespace=default",
        "/api/v1/deployments",
        "/api/v1/queues",
        "/api/v1/models",
    ] {
        let uri = selecting(path, "team in (a");
        let (status, err) = call(&app, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {err}");
        assert_eq!(err["error"]["code"], "bad_request", "{uri}: {err}");
        assert_eq!(
            err["error"]["message"],
            r#"label selector "team in (a": requirement 1 has no closing ")"; write key in (v1,v2)"#,
            "{uri}"
        );
    }
}

#[tokio::test]
async fn a_bad_label_is_refused_at_apply_naming_it() {
    let home = tempfile::tempdir().unwrap();
    let app = super::router(plane_in(home.path()).await);
    let job = labelled_job("a", "default", json!({"bad key": "x", "team": "-nlp"}));
    let (status, err) = call(&app, "POST", "/api/v1/apply", Some(job)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let fields = problem_fields(&err);
    assert_eq!(
        fields,
        [
            &json!("metadata.labels[\"bad key\"]"),
            &json!("metadata.labels[\"team\"]")
        ],
        "{err}"
    );
    let (_, listed) = call(&app, "GET", "/api/v1/jobs", None).await;
    assert_eq!(listed, json!([]));
}

/// The `field` of each problem of an `invalid` answer, in order.
fn problem_fields(err: &Value) -> Vec<&Value> {
    err["error"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["field"])
        .collect()
}

fn cohort(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "Cohort",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec,
    })
}

fn queue_in(name: &str, cohort: &str, nominal: u32) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"cohort": cohort, "quotas": [{"flavor": "any", "nominal": nominal}]},
    })
}

/// A cohort tree applied with its queues is stored, one Cohort per name across namespaces
/// (without one), and listed; a job too large for its queue's own quota but not for what the
/// tree lends it is accepted, and one larger than the tree allows is refused.
#[tokio::test]
async fn a_cohort_tree_is_applied_listed_and_holds_jobs_to_it() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    // 4 GPUs: org has 1 of its own; research under it borrows at most 1 beyond its subtree's.
    let tree = json!([
        cohort("org", json!({"quotas": [{"flavor": "any", "nominal": 1}]})),
        cohort(
            "research",
            json!({"parent": "org",
            "quotas": [{"flavor": "any", "nominal": 0, "borrowingLimit": 1}]})
        ),
        queue_in("nlp", "research", 1),
        queue_in("serving", "org", 2),
    ]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(tree)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["kind"], "Cohort", "{applied}");
    assert_eq!(applied[0]["action"], "created", "{applied}");
    assert!(applied[0].get("namespace").is_none(), "{applied}");

    let (status, listed) = call(&app, "GET", "/api/v1/cohorts?namespace=x", None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(names(&listed), ["org", "research"]);
    let research = &listed.as_array().unwrap()[1];
    assert_eq!(research["doc"]["spec"]["parent"], "org");
    assert!(
        research["doc"]["metadata"].get("namespace").is_none(),
        "{research}"
    );
    for uri in [
        "/api/v1/cohorts/research",
        "/api/v1/namespaces/y/cohorts/research",
    ] {
        let (status, got) = call(&app, "GET", uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {got}");
    }

    // nlp's 1 GPU, plus 1 borrowed through research: a 2-GPU job fits, a 3-GPU one never does
    // (without the tree's limit org's and serving's idle GPUs would make it fit).
    let job = |name: &str, gpus: u32| {
        json!({"apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"engine": "command", "command": ["true"], "queue": "nlp",
                "resources": {"gpusPerNode": gpus}}})
    };
    let dry = "/api/v1/apply?dryRun=true";
    let (status, ok) = call(&app, "POST", dry, Some(job("two", 2))).await;
    assert_eq!(status, StatusCode::OK, "{ok}");
    let (status, err) = call(&app, "POST", dry, Some(job("three", 3))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(
        err["error"]["problems"][0]["field"], "spec.resources",
        "{err}"
    );
    // The limit lifted (the Cohort applied again, changed), the same job is accepted.
    let lifted = cohort("research", json!({"parent": "org"}));
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(lifted)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied[0]["action"], "configured", "{applied}");
    let (status, ok) = call(&app, "POST", dry, Some(job("three", 3))).await;
    assert_eq!(status, StatusCode::OK, "{ok}");
}

/// A bad tree is refused at apply with the scheduler's field and fix on the Cohort's own
/// path, and nothing of the batch is stored.
#[tokio::test]
async fn a_bad_cohort_tree_is_refused_and_nothing_is_stored() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    // A parent loop.
    let looped = json!([
        cohort("org", json!({"parent": "research"})),
        cohort("research", json!({"parent": "org"})),
        queue_in("nlp", "research", 1),
        queue_in("serving", "org", 1),
    ]);
    let (status, err) = call(&app, "POST", "/api/v1/apply", Some(looped)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let problem = &err["error"]["problems"][0];
    assert_eq!(problem["field"], "spec.parent", "{err}");
    let message = problem["message"].as_str().unwrap();
    assert!(
        message.starts_with("Cohort org: cohort `org` is its own ancestor")
            && message.contains("fix: make the parents form a tree"),
        "{message}"
    );
    // A borrowing limit beyond what the rest of the tree lends.
    let greedy = json!([
        cohort("org", json!({"quotas": [{"flavor": "any", "nominal": 1}]})),
        cohort(
            "research",
            json!({"parent": "org",
            "quotas": [{"flavor": "any", "nominal": 0, "borrowingLimit": 3}]})
        ),
        queue_in("nlp", "research", 1),
    ]);
    let (status, err) = call(&app, "POST", "/api/v1/apply", Some(greedy)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let problem = &err["error"]["problems"][0];
    assert_eq!(problem["field"], "spec.quotas[0].borrowingLimit", "{err}");
    let message = problem["message"].as_str().unwrap();
    assert!(
        message.starts_with("Cohort research: cohort `research` may borrow 3 ")
            && message.contains("lends only 1")
            && message.contains("fix: lower borrowingLimit to at most 1"),
        "{message}"
    );
    for kind in ["Cohort", "Queue"] {
        let stored = plane.store().list_objects(kind, None).await.unwrap();
        assert!(stored.is_empty(), "{kind}: {stored:?}");
    }
    // A limit on a root is the document's own problem, found before the scheduler's.
    let (status, err) = call(
        &app,
        "POST",
        "/api/v1/apply",
        Some(cohort(
            "org",
            json!({"quotas": [{"flavor": "any", "nominal": 1, "lendingLimit": 1}]}),
        )),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(
        err["error"]["problems"][0]["field"],
        "spec.quotas[0].lendingLimit"
    );
}

/// A GPU job with its queue and size, as `ferry apply` sends one.
fn gpu_job(name: &str, queue: &str, gpus: u32) -> Value {
    json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"engine": "command", "command": ["true"], "queue": queue,
                 "resources": {"nodes": 1, "procsPerNode": 1, "gpusPerNode": gpus}},
    })
}

/// A batch with several bad documents is refused with every document's problems at once,
/// each named once: the queue's unknown cohort (which keeps any scheduler from being built),
/// a job's missing queue, and a job both too large and in a missing queue.
#[tokio::test]
async fn every_bad_document_of_a_batch_is_reported_at_once() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    let batch = json!([
        queue_in("q-a", "nowhere", 2),
        gpu_job("lost", "no-such-queue", 1),
        gpu_job("huge", "also-missing", 16),
    ]);
    let (status, err) = call(&app, "POST", "/api/v1/apply", Some(batch)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let problems: Vec<(String, String)> = err["error"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["field"].as_str().unwrap().to_owned(),
                p["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.cohort",
            "spec.queue",
            "spec.resources.gpusPerNode",
            "spec.queue"
        ],
        "{err}"
    );
    assert!(
        problems[0]
            .1
            .starts_with("Queue q-a: cohort `nowhere` of queue `q-a` is unknown"),
        "{}",
        problems[0].1
    );
    assert!(
        problems[1]
            .1
            .starts_with("TrainJob lost: queue `no-such-queue` does not exist; create the queue")
            && problems[1].1.contains("default"),
        "{}",
        problems[1].1
    );
    assert!(
        problems[2].1.contains("needs 16 GPUs") && problems[3].1.contains("`also-missing`"),
        "{problems:?}"
    );
    let stored = plane.store().list_objects("Queue", None).await.unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    let (_, listed) = call(&app, "GET", "/api/v1/jobs", None).await;
    assert_eq!(listed, json!([]));
    // Documents that do not parse are all reported too, each labelled with its number.
    let mut typo = gpu_job("typo", "default", 1);
    typo["spec"]["resources"]["gpusPerNod"] = json!(1);
    let mut negative = queue_in("q-b", "lab", 1);
    negative["spec"]["quotas"][0]["nominal"] = json!(-1);
    let (status, err) = call(
        &app,
        "POST",
        "/api/v1/apply",
        Some(json!([typo, gpu_job("fine", "default", 1), negative])),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let fields = problem_fields(&err);
    assert_eq!(
        fields,
        [
            &json!("spec.resources.gpusPerNod"),
            &json!("spec.quotas[0].nominal")
        ],
        "{err}"
    );
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("(document 1): spec.resources.gpusPerNod")
            && message.contains("(document 3): spec.quotas[0].nominal"),
        "{message}"
    );
    // With the scheduler buildable, a job too large for the machine in a queue that exists
    // is refused once, for its size.
    let (status, err) = call(
        &app,
        "POST",
        "/api/v1/apply",
        Some(gpu_job("huge", "default", 16)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let problems = err["error"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{err}");
    assert_eq!(problems[0]["field"], "spec.resources.gpusPerNode", "{err}");
}

/// A Cohort's weight that is not a positive number is refused at apply naming `spec.weight`
/// and the fix, and nothing of the batch is stored; a good one is stored and listed.
#[tokio::test]
async fn a_bad_cohort_weight_is_refused_at_apply_naming_it() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    for bad in [json!(0), json!(-2)] {
        let batch = json!([
            cohort("org", json!({"quotas": [{"flavor": "any", "nominal": 1}]})),
            cohort("research", json!({"parent": "org", "weight": bad})),
            queue_in("nlp", "research", 1),
        ]);
        let (status, err) = call(&app, "POST", "/api/v1/apply", Some(batch)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        let problems = err["error"]["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{err}");
        assert_eq!(problems[0]["field"], "spec.weight", "{err}");
        let message = problems[0]["message"].as_str().unwrap();
        assert!(
            message.contains("must be a positive number such as 1 (the default)")
                && message.contains("write a small one such as 0.01"),
            "{message}"
        );
        for kind in ["Cohort", "Queue"] {
            let stored = plane.store().list_objects(kind, None).await.unwrap();
            assert!(stored.is_empty(), "{kind}: {stored:?}");
        }
    }
    let (status, err) = call(
        &app,
        "POST",
        "/api/v1/apply",
        Some(cohort("org", json!({"weight": "heavy"}))),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"]["problems"][0]["field"], "spec.weight", "{err}");

    let good = json!([
        cohort("org", json!({"quotas": [{"flavor": "any", "nominal": 1}]})),
        cohort("research", json!({"parent": "org", "weight": 2.5})),
        queue_in("nlp", "research", 1),
    ]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(good)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let (_, listed) = call(&app, "GET", "/api/v1/cohorts", None).await;
    let weights: Vec<&Value> = (listed.as_array().unwrap().iter())
        .map(|c| &c["doc"]["spec"]["weight"])
        .collect();
    assert_eq!(weights, [&json!(1.0), &json!(2.5)], "{listed}");
}

/// A cohort queues still name may be deleted when the trees left build (the queues' cohort
/// becomes a root with no GPUs of its own); one whose GPUs a queue's borrowing limit needs is
/// not, naming what names it, and stays.
#[tokio::test]
async fn deleting_a_cohort_keeps_the_scheduler_buildable() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    let tree = json!([
        cohort("org", json!({"quotas": [{"flavor": "any", "nominal": 2}]})),
        cohort("research", json!({"parent": "org"})),
        queue_in("nlp", "research", 1),
        queue_in("vision", "research", 1),
        {"apiVersion": "ferry.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "solo"},
         "spec": {"cohort": "lab", "quotas": [{"flavor": "any", "nominal": 0, "borrowingLimit": 2}]}},
        cohort("lab", json!({"quotas": [{"flavor": "any", "nominal": 2}]})),
    ]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(tree)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    // `org` goes: research becomes a root of its own, its two queues lend each other.
    let (status, deleted) = call(&app, "DELETE", "/api/v1/cohorts/org", None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["deleted"], "org");
    // Queue solo is alone in `lab`, whose GPUs are all it may use: without them its cohort
    // would be a typo's, which the scheduler refuses.
    let (status, err) = call(&app, "DELETE", "/api/v1/namespaces/x/cohorts/lab", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Cohort lab is named by Queue solo; without it the queues and cohort trees would not \
             build a scheduler (spec.cohort: cohort `lab` of queue `solo` is unknown"
        ) && message.contains("change or delete those first"),
        "{message}"
    );
    let (status, _) = call(&app, "GET", "/api/v1/cohorts/lab", None).await;
    assert_eq!(status, StatusCode::OK);
    // Deleted with its queue by one command (`along`), it goes.
    let (status, deleted) =
        call(&app, "DELETE", "/api/v1/cohorts/lab?along=queue/solo", None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    let (status, deleted) = call(&app, "DELETE", "/api/v1/queues/solo", None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
}

/// A queue an unfinished job names is not deleted (the job would wait in a queue no scheduler
/// has), nor one whose going leaves the other queue of its cohort alone in it, unless the same
/// command deletes that one too (`along`), which must itself be free to go; an `along` that is
/// not KIND/NAME is refused. A queue alone in a cohort a document defines is allowed.
#[tokio::test]
async fn deleting_a_queue_keeps_its_jobs_and_the_scheduler_buildable() {
    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    let batch = json!([
        queue_in("nlp", "lab", 1),
        queue_in("vision", "lab", 1),
        gpu_job("j", "nlp", 1)
    ]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(batch)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let (status, err) = call(&app, "DELETE", "/api/v1/queues/nlp", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Queue nlp is named by 1 unfinished job(s): default/j ("),
        "{message}"
    );
    let (status, cancelled) = call(
        &app,
        "POST",
        "/api/v1/namespaces/default/jobs/j/cancel",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    let (status, err) = call(&app, "DELETE", "/api/v1/queues/nlp", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Queue nlp cannot go; without it the queues and cohort trees")
            && message.contains("cohort `lab` of queue `vision` is unknown")
            && message.contains("ferry delete -f"),
        "{message}"
    );
    let (status, err) = call(&app, "DELETE", "/api/v1/queues/nlp?along=vision", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    // A queue that goes with one its jobs keep does not go first: it would leave that one alone.
    let batch = json!([gpu_job("k", "nlp", 1)]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(batch)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let (status, err) = call(
        &app,
        "DELETE",
        "/api/v1/queues/vision?along=queue/nlp",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Queue vision goes only with Queue nlp, which cannot: Queue nlp is named by 1 unfinished job(s): default/k ("),
        "{message}"
    );
    let (status, cancelled) = call(
        &app,
        "POST",
        "/api/v1/namespaces/default/jobs/k/cancel",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    for path in [
        "/api/v1/queues/nlp?along=queue/vision",
        "/api/v1/queues/vision",
    ] {
        let (status, deleted) = call(&app, "DELETE", path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {deleted}");
    }
    // A queue alone in a cohort a document defines is the tree's first team, not a typo: it is
    // applied, and its cohort's document cannot go from under it (then it would be one).
    let tree = json!([cohort("org", json!({})), queue_in("solo", "org", 1)]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(tree)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let (status, err) = call(&app, "DELETE", "/api/v1/cohorts/org", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    for path in ["/api/v1/queues/solo", "/api/v1/cohorts/org"] {
        let (status, deleted) = call(&app, "DELETE", path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {deleted}");
    }
}

/// A weighted department's status shows what its subtree uses against its nominal GPUs and
/// its weighted share, and its queue's status shows its own: read before any scheduling
/// cycle, a Cohort shows zeros. Jobs are queued and admitted by one admission step (no rank
/// process is launched).
#[tokio::test]
async fn a_cohort_and_its_queue_show_their_use_and_weighted_share() {
    use ferry_spec::JobPhase;
    use ferry_store::{JobFilter, StatusPatch};

    let home = tempfile::tempdir().unwrap();
    let plane = plane_in(home.path()).await;
    let app = super::router(plane.clone());
    // 4 GPUs: org has 2 of its own; research (weight 2) and product each hold a 1-GPU queue.
    let tree = json!([
        cohort("org", json!({"quotas": [{"flavor": "any", "nominal": 2}]})),
        cohort("research", json!({"parent": "org", "weight": 2})),
        cohort("product", json!({"parent": "org"})),
        queue_in("nlp", "research", 1),
        queue_in("web", "product", 1),
    ]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(tree)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let (_, before) = call(&app, "GET", "/api/v1/cohorts/research", None).await;
    let s = &before["doc"]["status"];
    assert_eq!(
        [
            &s["usedGpus"],
            &s["nominalGpus"],
            &s["borrowedGpus"],
            &s["weightedShare"]
        ],
        [&json!(0), &json!(0), &json!(0), &json!(0.0)],
        "{before}"
    );

    let job = |name: &str, queue: &str, gpus: u32| {
        json!({"apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"engine": "command", "command": ["true"], "queue": queue,
                "resources": {"gpusPerNode": gpus}}})
    };
    let jobs = json!([job("big", "nlp", 3), job("small", "web", 1)]);
    let (status, applied) = call(&app, "POST", "/api/v1/apply", Some(jobs)).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    let store = plane.store();
    let mut active = store.list_jobs(&JobFilter::unfinished()).await.unwrap();
    for job in &mut active {
        *job = store
            .transition(
                &job.uid,
                JobPhase::Pending,
                JobPhase::Queued,
                "Queued",
                "queued by the test",
                StatusPatch::default(),
            )
            .await
            .unwrap();
    }
    let mut admission = None;
    crate::admission::schedule(&plane, &mut admission, &active)
        .await
        .unwrap();
    let admitted = store.list_jobs(&JobFilter::unfinished()).await.unwrap();
    assert!(
        admitted.iter().all(|j| j.phase == JobPhase::Admitted),
        "{admitted:?}"
    );

    // (usedGpus, nominalGpus, borrowedGpus, weightedShare) of a Cohort's or a Queue's status.
    let figures = |record: &Value| {
        let s = &record["doc"]["status"];
        (
            s["usedGpus"].as_u64().unwrap(),
            s["nominalGpus"].as_u64().unwrap(),
            s["borrowedGpus"].as_u64().unwrap(),
            s["weightedShare"].as_f64().unwrap(),
        )
    };
    let (status, cohorts) = call(&app, "GET", "/api/v1/cohorts", None).await;
    assert_eq!(status, StatusCode::OK, "{cohorts}");
    let by_name = |listed: &Value, name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap()
    };
    // research: nlp's 3 GPUs on its 1 nominal, 2 borrowed over weight 2; product: its own 1;
    // org: all 4 of its subtree's 4 (its 2 and its queues' 2), nothing borrowed.
    let research = by_name(&cohorts, "research");
    assert_eq!(figures(&research), (3, 1, 2, 1.0), "{research}");
    assert_eq!(figures(&by_name(&cohorts, "product")), (1, 1, 0, 0.0));
    assert_eq!(figures(&by_name(&cohorts, "org")), (4, 4, 0, 0.0));
    let flavors = research["doc"]["status"]["flavors"].as_array().unwrap();
    let used: Vec<&Value> = flavors
        .iter()
        .filter(|f| f["usedGpus"].as_u64() > Some(0))
        .collect();
    assert_eq!(used.len(), 1, "{research}");
    assert_eq!(
        [&used[0]["nominal"], &used[0]["borrowedGpus"]],
        [&json!(1), &json!(2)],
        "{research}"
    );
    let (_, got) = call(&app, "GET", "/api/v1/cohorts/research", None).await;
    assert_eq!(figures(&got), (3, 1, 2, 1.0), "{got}");
    // nlp: the same 2 borrowed over its weight 1.
    let (_, queues) = call(&app, "GET", "/api/v1/queues", None).await;
    assert_eq!(
        figures(&by_name(&queues, "nlp")),
        (3, 1, 2, 2.0),
        "{queues}"
    );
    assert_eq!(
        figures(&by_name(&queues, "web")),
        (1, 1, 0, 0.0),
        "{queues}"
    );
}

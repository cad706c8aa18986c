//! kube's `ApiServerVerifier` pattern: a `tower_test` mock stands in for the API server and
//! plays a scripted scenario — each step checks the method and path of the next request,
//! records its body, and answers. A scenario that is not played to the end fails the test.

use std::sync::Arc;
use std::time::Duration;

use ferry_k8s::crd::TrainJobResource;
use ferry_k8s::{Admission, Context, RenderOptions, reconcile};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// One expected request and its answer.
pub struct Step {
    /// HTTP method.
    pub method: &'static str,
    /// Path (without the query string) the request must have.
    pub path: String,
    /// Status code of the answer.
    pub code: u16,
    /// Body of the answer (a JSON string is sent as plain text).
    pub answer: Value,
}

/// Shorthand for a step.
pub fn step(method: &'static str, path: impl Into<String>, code: u16, answer: Value) -> Step {
    Step {
        method,
        path: path.into(),
        code,
        answer,
    }
}

/// A Kubernetes `Status` body for `code`.
pub fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": reason, "reason": reason, "code": code})
}

/// A step answered 404 Not Found: the object at `path` does not exist.
pub fn not_found(method: &'static str, path: impl Into<String>) -> Step {
    step(method, path, 404, status(404, "NotFound"))
}

/// Where the operator records the events of the fixtures' namespace, `team-a`.
pub const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/team-a/events";

/// The operator records an event in `team-a` (answered 201).
pub fn event() -> Step {
    step("POST", EVENTS, 201, json!({}))
}

/// What the server saw: method, path with query, JSON body.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    /// Parsed body (`Null` when empty).
    pub body: Value,
}

/// Starts a mock API server; returns the client and the task playing `steps`.
pub fn server(steps: Vec<Step>) -> (Client, tokio::task::JoinHandle<Vec<Seen>>) {
    serve(steps, false)
}

/// `server`, also failing on any request after the last step; its task ends only once the
/// client is dropped.
pub fn strict_server(steps: Vec<Step>) -> (Client, tokio::task::JoinHandle<Vec<Seen>>) {
    serve(steps, true)
}

fn serve(steps: Vec<Step>, strict: bool) -> (Client, tokio::task::JoinHandle<Vec<Seen>>) {
    let (svc, mut handle): (_, Handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        for (i, s) in steps.into_iter().enumerate() {
            let (req, send) = handle.next_request().await.unwrap_or_else(|| {
                panic!("step {i}: client hung up before {} {}", s.method, s.path)
            });
            let uri = req.uri().to_string();
            let path = req.uri().path().to_owned();
            assert_eq!(
                (req.method().as_str(), path.as_str()),
                (s.method, s.path.as_str()),
                "step {i}: unexpected request {uri}"
            );
            let bytes = req.into_body().collect_bytes().await.unwrap();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            seen.push(Seen { uri, body });
            let resp = Response::builder()
                .status(s.code)
                .body(Body::from(match &s.answer {
                    // A string answer is sent as plain text (pod logs).
                    Value::String(text) => text.clone().into_bytes(),
                    other => serde_json::to_vec(other).unwrap(),
                }))
                .unwrap();
            send.send_response(resp);
        }
        // A request the scenario does not expect (an event nobody waits for, whose failure the
        // operator only logs) would otherwise go unnoticed.
        if strict && let Some((req, _)) = handle.next_request().await {
            panic!(
                "a request after the scenario's end: {} {}",
                req.method(),
                req.uri()
            );
        }
        seen
    });
    (Client::new(svc, "default"), task)
}

/// Waits for the scenario to be played to the end (a missing request times out).
pub async fn finish(task: tokio::task::JoinHandle<Vec<Seen>>) -> Vec<Seen> {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the scenario was not played to the end (a request is missing)")
        .expect("the mock server panicked (an unexpected request)")
}

/// Reconciles `job` once, deciding admission with `admission`, against a server playing
/// `steps` and nothing more; returns what the server saw once every step was played.
pub async fn reconciled(
    job: &TrainJobResource,
    admission: Arc<dyn Admission>,
    steps: Vec<Step>,
) -> Vec<Seen> {
    let (client, task) = strict_server(steps);
    let ctx = Context::new(client, RenderOptions::default(), admission);
    reconcile(Arc::new(job.clone()), Arc::new(ctx))
        .await
        .unwrap();
    finish(task).await
}

//! Issue 8, backends: the gateway's replicas discovered from EndpointSlices. A scripted
//! fake API server (see `mock.rs`) plays list and watch answers; the watcher's sink calls
//! are recorded, and in the last test they drive a real `ferry_gateway::Registry`.

use std::time::Duration;

use ferry_k8s::endpoints::{Replica, watch_replicas};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::mock::{finish, server, status, step};

const NS: &str = "team-a";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices";
const ALL_SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

/// `(address, pod, ready)`; `ready: None` leaves `conditions` out (the API: ready).
type Ep<'a> = (&'a str, &'a str, Option<bool>);

fn slice(name: &str, model: &str, endpoints: &[Ep<'_>]) -> Value {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(ip, pod, ready)| {
            let mut e = json!({"addresses": [ip], "targetRef": {"kind": "Pod", "name": pod, "namespace": NS}});
            if let Some(r) = ready {
                e["conditions"] = json!({"ready": r, "serving": r, "terminating": false});
            }
            e
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "10",
            "labels": {"ferry.dev/served-model": model, "kubernetes.io/service-name": model}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
        "endpoints": eps,
    })
}

fn list(rv: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": rv}, "items": items})
}

/// A watch answer: newline-delimited events, sent as the body's text.
fn events(evs: &[(&str, Value)]) -> Value {
    let lines: Vec<String> = evs
        .iter()
        .map(|(t, o)| json!({"type": t, "object": o}).to_string())
        .collect();
    Value::String(lines.join("\n") + "\n")
}

/// What the sink is told for a model with these `(pod, ip)` replicas.
fn replicas(v: &[(&str, &str)]) -> Option<Vec<Replica>> {
    Some(
        v.iter()
            .map(|(pod, ip)| (format!("{NS}/{pod}"), format!("http://{ip}:8000")))
            .collect(),
    )
}

type Calls = mpsc::UnboundedReceiver<(String, Option<Vec<Replica>>)>;

fn recorder() -> (impl FnMut(&str, Option<&[Replica]>) + Send + 'static, Calls) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sink = move |model: &str, r: Option<&[Replica]>| {
        let _ = tx.send((model.to_owned(), r.map(<[Replica]>::to_vec)));
    };
    (sink, rx)
}

async fn next(calls: &mut Calls) -> (String, Option<Vec<Replica>>) {
    tokio::time::timeout(Duration::from_secs(10), calls.recv())
        .await
        .expect("the sink was not called")
        .expect("the watcher stopped")
}

fn qwen_a(b_ready: bool) -> Value {
    slice(
        "qwen-a",
        "qwen",
        &[
            ("10.0.0.1", "qwen-1", Some(true)),
            ("10.0.0.2", "qwen-2", Some(b_ready)),
        ],
    )
}

#[tokio::test]
async fn list_then_watch_events_give_the_sink_each_models_ready_set() {
    let (client, task) = server(vec![
        step(
            "GET",
            SLICES,
            200,
            list("10", vec![qwen_a(false), slice("qwen-b", "qwen", &[])]),
        ),
        step(
            "GET",
            SLICES,
            200,
            events(&[
                ("MODIFIED", qwen_a(true)),
                (
                    "MODIFIED",
                    slice("qwen-b", "qwen", &[("10.0.0.3", "qwen-3", None)]),
                ),
                ("DELETED", qwen_a(true)),
                (
                    "MODIFIED",
                    slice("qwen-b", "qwen", &[("10.0.0.3", "qwen-3", Some(false))]),
                ),
            ]),
        ),
    ]);
    let (sink, mut calls) = recorder();
    let watch = tokio::spawn(async move { watch_replicas(client, Some(NS), sink).await });

    // The list: only the ready endpoint.
    assert_eq!(
        next(&mut calls).await,
        ("qwen".into(), replicas(&[("qwen-1", "10.0.0.1")]))
    );
    // MODIFIED: qwen-2 became ready.
    assert_eq!(
        next(&mut calls).await,
        (
            "qwen".into(),
            replicas(&[("qwen-1", "10.0.0.1"), ("qwen-2", "10.0.0.2")])
        )
    );
    // The second slice got an endpoint: the union of both slices.
    assert_eq!(
        next(&mut calls).await,
        (
            "qwen".into(),
            replicas(&[
                ("qwen-1", "10.0.0.1"),
                ("qwen-2", "10.0.0.2"),
                ("qwen-3", "10.0.0.3")
            ])
        )
    );
    // DELETED qwen-a: its replicas go.
    assert_eq!(
        next(&mut calls).await,
        ("qwen".into(), replicas(&[("qwen-3", "10.0.0.3")]))
    );
    // Nothing ready any more: the model stays known with no replica (503, not 404).
    assert_eq!(next(&mut calls).await, ("qwen".into(), Some(vec![])));

    let seen = finish(task).await;
    assert!(
        seen[0]
            .uri
            .contains("labelSelector=ferry.dev%2Fserved-model"),
        "{}",
        seen[0].uri
    );
    assert!(!seen[0].uri.contains("watch=true"), "{}", seen[0].uri);
    assert!(seen[1].uri.contains("watch=true"), "{}", seen[1].uri);
    assert!(
        seen[1].uri.contains("resourceVersion=10"),
        "{}",
        seen[1].uri
    );
    watch.abort();
    assert!(calls.try_recv().is_err(), "no further sink call");
}

#[tokio::test]
async fn a_relist_after_an_expired_watch_converges_and_removes_vanished_models() {
    let gone = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410});
    let llama = slice("llama-a", "llama", &[("10.0.1.1", "llama-1", None)]);
    let (client, task) = server(vec![
        step("GET", SLICES, 500, status(500, "InternalError")),
        step("GET", SLICES, 200, list("10", vec![qwen_a(false), llama])),
        step("GET", SLICES, 200, events(&[("ERROR", gone)])),
        // While the watch was down, llama's slice was deleted and qwen-2 became ready.
        step("GET", SLICES, 200, list("20", vec![qwen_a(true)])),
    ]);
    let (sink, mut calls) = recorder();
    let watch = tokio::spawn(async move { watch_replicas(client, Some(NS), sink).await });

    // The failed first list told the sink nothing; the retry lists both models.
    let mut first = vec![next(&mut calls).await, next(&mut calls).await];
    first.sort();
    assert_eq!(
        first,
        vec![
            ("llama".into(), replicas(&[("llama-1", "10.0.1.1")])),
            ("qwen".into(), replicas(&[("qwen-1", "10.0.0.1")])),
        ]
    );
    // After the relist: llama removed, qwen at its new set — the same state a fresh
    // watcher would build from the second list.
    let mut after = vec![next(&mut calls).await, next(&mut calls).await];
    after.sort();
    assert_eq!(
        after,
        vec![
            ("llama".into(), None),
            (
                "qwen".into(),
                replicas(&[("qwen-1", "10.0.0.1"), ("qwen-2", "10.0.0.2")])
            ),
        ]
    );
    let seen = finish(task).await;
    assert!(
        !seen[3].uri.contains("watch=true"),
        "a relist, not a watch: {}",
        seen[3].uri
    );
    watch.abort();
}

#[tokio::test]
async fn the_watcher_drives_a_real_gateway_registry() {
    let registry = ferry_gateway::Registry::default();
    // A replica from `--backend` for another model is left alone.
    registry
        .set_replicas(
            "static",
            &[("flag-0".into(), "http://127.0.0.1:9000".into())],
        )
        .unwrap();
    let (client, task) = server(vec![
        step(
            "GET",
            ALL_SLICES,
            200,
            list(
                "10",
                vec![
                    qwen_a(false),
                    slice("llama-a", "llama", &[("10.0.1.1", "llama-1", None)]),
                ],
            ),
        ),
        step(
            "GET",
            ALL_SLICES,
            200,
            events(&[
                ("MODIFIED", qwen_a(true)),
                ("DELETED", slice("llama-a", "llama", &[])),
            ]),
        ),
    ]);
    let (tx, mut done) = mpsc::unbounded_channel();
    let reg = registry.clone();
    let watch = tokio::spawn(async move {
        watch_replicas(client, None, move |model, replicas| {
            match replicas {
                Some(r) => reg.set_replicas(model, r).unwrap(),
                None => assert!(reg.forget_model(model)),
            }
            let _ = tx.send(());
        })
        .await;
    });
    // Four changes: qwen and llama listed, qwen modified, llama deleted.
    for _ in 0..4 {
        tokio::time::timeout(Duration::from_secs(10), done.recv())
            .await
            .expect("the registry was not updated")
            .unwrap();
    }
    let mut got: Vec<(String, String, Vec<String>)> = registry
        .replicas()
        .into_iter()
        .map(|r| (r.id, r.url, r.models))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "flag-0".into(),
                "http://127.0.0.1:9000".into(),
                vec!["static".into()]
            ),
            (
                "team-a/qwen-1".into(),
                "http://10.0.0.1:8000".into(),
                vec!["qwen".into()]
            ),
            (
                "team-a/qwen-2".into(),
                "http://10.0.0.2:8000".into(),
                vec!["qwen".into()]
            ),
        ]
    );
    assert_eq!(registry.models(), ["qwen", "static"]);
    finish(task).await;
    watch.abort();
}

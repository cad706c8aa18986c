//! Lease-based leader election against the mocked API server.

use std::time::Duration;

use ferry_k8s::leader::LeaderElector;
use serde_json::{Value, json};

use crate::mock::{finish, server, status, step};

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ferry-system/leases/ferry-operator";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ferry-system/leases";

fn lease(holder: &str, renewed: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "ferry-operator", "namespace": "ferry-system", "resourceVersion": "42"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed, "leaseTransitions": 3}})
}

fn elector(client: kube::Client, me: &str) -> LeaderElector {
    LeaderElector::new(
        client,
        "ferry-system",
        "ferry-operator",
        me.into(),
        Duration::from_secs(15),
    )
}

#[tokio::test]
async fn a_missing_lease_is_created_and_won() {
    let (client, task) = server(vec![
        step("GET", LEASE, 404, status(404, "NotFound")),
        step(
            "POST",
            LEASES,
            201,
            lease("op-a", "2026-01-01T00:00:00.000000Z"),
        ),
    ]);
    assert!(
        elector(client, "op-a")
            .try_acquire_or_renew()
            .await
            .unwrap()
    );
    let seen = finish(task).await;
    assert_eq!(seen[1].body["spec"]["holderIdentity"], "op-a");
}

#[tokio::test]
async fn a_fresh_lease_of_another_holder_is_respected() {
    let fresh = k8s_openapi::jiff::Timestamp::now().to_string();
    let (client, task) = server(vec![step("GET", LEASE, 200, lease("op-b", &fresh))]);
    assert!(
        !elector(client, "op-a")
            .try_acquire_or_renew()
            .await
            .unwrap()
    );
    assert_eq!(finish(task).await.len(), 1, "no write");
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_its_resource_version() {
    let (client, task) = server(vec![
        step(
            "GET",
            LEASE,
            200,
            lease("op-b", "2020-01-01T00:00:00.000000Z"),
        ),
        step(
            "PUT",
            LEASE,
            200,
            lease("op-a", "2026-01-01T00:00:00.000000Z"),
        ),
    ]);
    assert!(
        elector(client, "op-a")
            .try_acquire_or_renew()
            .await
            .unwrap()
    );
    let seen = finish(task).await;
    assert_eq!(seen[1].body["spec"]["holderIdentity"], "op-a");
    assert_eq!(seen[1].body["spec"]["leaseTransitions"], 4);
    assert_eq!(seen[1].body["metadata"]["resourceVersion"], "42");
}

#[tokio::test]
async fn losing_the_race_is_not_an_error() {
    let (client, task) = server(vec![
        step(
            "GET",
            LEASE,
            200,
            lease("op-b", "2020-01-01T00:00:00.000000Z"),
        ),
        step("PUT", LEASE, 409, status(409, "Conflict")),
    ]);
    assert!(
        !elector(client, "op-a")
            .try_acquire_or_renew()
            .await
            .unwrap()
    );
    finish(task).await;
}

#[tokio::test]
async fn the_holder_renews() {
    let (client, task) = server(vec![
        step(
            "GET",
            LEASE,
            200,
            lease("op-a", "2020-01-01T00:00:00.000000Z"),
        ),
        step(
            "PUT",
            LEASE,
            200,
            lease("op-a", "2026-01-01T00:00:00.000000Z"),
        ),
    ]);
    assert!(
        elector(client, "op-a")
            .try_acquire_or_renew()
            .await
            .unwrap()
    );
    let seen = finish(task).await;
    assert_eq!(
        seen[1].body["spec"]["leaseTransitions"], 3,
        "renewal is not a transition"
    );
}

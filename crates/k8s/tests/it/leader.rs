//! Lease-based leader election against the mocked API server.

use std::time::Duration;

use ferry_k8s::leader::LeaderElector;
use serde_json::{Value, json};

use crate::mock::{Seen, Step, finish, not_found, server, status, step};

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ferry-system/leases/ferry-operator";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ferry-system/leases";

fn lease(holder: &str, renewed: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "ferry-operator", "namespace": "ferry-system", "resourceVersion": "42"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed, "leaseTransitions": 3}})
}

/// A `renewTime` long past the lease's 15 s.
const EXPIRED: &str = "2020-01-01T00:00:00.000000Z";
/// The `renewTime` the server answers a write with.
const RENEWED: &str = "2026-01-01T00:00:00.000000Z";

/// The elector reads the lease, held by `holder` since `renewed`.
fn get_lease(holder: &str, renewed: &str) -> Step {
    step("GET", LEASE, 200, lease(holder, renewed))
}

/// The elector replaces the lease; the server answers it as `holder`'s.
fn put_lease(holder: &str) -> Step {
    step("PUT", LEASE, 200, lease(holder, RENEWED))
}

/// One round of `me`'s elector against a server playing `steps`: whether it leads, and what
/// the server saw.
async fn acquire(me: &str, steps: Vec<Step>) -> (bool, Vec<Seen>) {
    let (client, task) = server(steps);
    let elector = LeaderElector::new(
        client,
        "ferry-system",
        "ferry-operator",
        me.into(),
        Duration::from_secs(15),
    );
    let leads = elector.try_acquire_or_renew().await.unwrap();
    (leads, finish(task).await)
}

#[tokio::test]
async fn a_missing_lease_is_created_and_won() {
    let created = step("POST", LEASES, 201, lease("op-a", RENEWED));
    let (leads, seen) = acquire("op-a", vec![not_found("GET", LEASE), created]).await;
    assert!(leads);
    assert_eq!(seen[1].body["spec"]["holderIdentity"], "op-a");
}

#[tokio::test]
async fn a_fresh_lease_of_another_holder_is_respected() {
    let fresh = k8s_openapi::jiff::Timestamp::now().to_string();
    let (leads, seen) = acquire("op-a", vec![get_lease("op-b", &fresh)]).await;
    assert!(!leads);
    assert_eq!(seen.len(), 1, "no write");
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_its_resource_version() {
    let steps = vec![get_lease("op-b", EXPIRED), put_lease("op-a")];
    let (leads, seen) = acquire("op-a", steps).await;
    assert!(leads);
    assert_eq!(seen[1].body["spec"]["holderIdentity"], "op-a");
    assert_eq!(seen[1].body["spec"]["leaseTransitions"], 4);
    assert_eq!(seen[1].body["metadata"]["resourceVersion"], "42");
}

#[tokio::test]
async fn losing_the_race_is_not_an_error() {
    let conflict = step("PUT", LEASE, 409, status(409, "Conflict"));
    let (leads, _) = acquire("op-a", vec![get_lease("op-b", EXPIRED), conflict]).await;
    assert!(!leads);
}

#[tokio::test]
async fn the_holder_renews() {
    let steps = vec![get_lease("op-a", EXPIRED), put_lease("op-a")];
    let (leads, seen) = acquire("op-a", steps).await;
    assert!(leads);
    assert_eq!(
        seen[1].body["spec"]["leaseTransitions"], 3,
        "renewal is not a transition"
    );
}

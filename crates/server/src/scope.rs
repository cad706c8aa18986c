//! Where objects are kept: queues, priority classes and cohorts are named across namespaces (a
//! job's `spec.queue` and `spec.priority`, a queue's `spec.cohort`, give a name only;
//! `ResourceKind::is_cluster_scoped`), so the control plane keeps one object of each name, under the one namespace key [`CLUSTER`],
//! whatever `metadata.namespace` or the request's path says. Versions before kept them per
//! namespace; [`gather`] moves such objects at start.

use std::collections::BTreeMap;

use ferry_spec::ResourceKind;
use ferry_store::{ObjectRecord, Store, StoreError};
use serde_json::Value;

/// The namespace key cluster-scoped objects are stored under.
pub(crate) const CLUSTER: &str = "";

/// The namespace key an object of `kind` named in `namespace` is stored under.
pub(crate) fn namespace_key(kind: ResourceKind, namespace: &str) -> &str {
    if kind.is_cluster_scoped() {
        CLUSTER
    } else {
        namespace
    }
}

/// The namespace an object is reported in: `None` for cluster-scoped kinds.
pub(crate) fn reported_namespace(kind: ResourceKind, namespace: String) -> Option<String> {
    (!kind.is_cluster_scoped()).then_some(namespace)
}

/// `namespace/name`, or `name` for cluster-scoped kinds (for messages).
pub(crate) fn qualified(kind: ResourceKind, namespace: &str, name: &str) -> String {
    match namespace_key(kind, namespace) {
        CLUSTER => name.to_owned(),
        ns => format!("{ns}/{name}"),
    }
}

/// The document as stored: a cluster-scoped object's `metadata.namespace` is dropped, as the
/// Kubernetes API server drops it, so nothing claims a namespace the object does not have.
pub(crate) fn stored_doc(kind: ResourceKind, mut doc: Value) -> Value {
    if kind.is_cluster_scoped()
        && let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("namespace");
    }
    doc
}

/// A record of `ferry up`'s own that is not stored (its priority classes, its `default`
/// queue), served as `list` and `get` serve stored ones: `spec` under a document of `kind`
/// named `name` marked `status.builtIn`, kept under [`CLUSTER`], with no uid and no time of its
/// own (`ferry get` shows no age).
pub(crate) fn built_in(kind: ResourceKind, name: &str, spec: Value) -> ObjectRecord {
    let doc = serde_json::json!({
        "apiVersion": ferry_spec::API_VERSION,
        "kind": kind.as_str(),
        "metadata": {"name": name},
        "spec": spec,
        "status": {"builtIn": true},
    });
    ObjectRecord {
        uid: String::new(),
        kind: kind.as_str().to_owned(),
        namespace: CLUSTER.to_owned(),
        name: name.to_owned(),
        doc,
        generation: 0,
        created_at: chrono::DateTime::UNIX_EPOCH,
        updated_at: chrono::DateTime::UNIX_EPOCH,
    }
}

/// Moves the cluster-scoped objects an older version stored per namespace to [`CLUSTER`],
/// keeping their uid, generation and times. Of several with one name the most recently updated
/// is kept (the later stored on a tie); each other one is deleted, with a warning naming it,
/// and returned. Objects of other kinds are left alone. Runs at start, before the API serves.
pub(crate) async fn gather(store: &dyn Store) -> Result<Vec<ObjectRecord>, StoreError> {
    let mut dropped = Vec::new();
    for kind in ResourceKind::ALL
        .into_iter()
        .filter(|k| k.is_cluster_scoped())
    {
        let mut by_name: BTreeMap<String, Vec<ObjectRecord>> = BTreeMap::new();
        for rec in store.list_objects(kind.as_str(), None).await? {
            by_name.entry(rec.name.clone()).or_default().push(rec);
        }
        for (name, mut records) in by_name {
            if records.iter().all(|r| r.namespace == CLUSTER) {
                continue;
            }
            // Listed oldest stored first; `max_by_key` takes the last of equals.
            let newest = records
                .iter()
                .enumerate()
                .max_by_key(|(_, r)| r.updated_at)
                .map_or(0, |(i, _)| i);
            let keep = records.remove(newest);
            for old in records {
                tracing::warn!(
                    kind = kind.as_str(),
                    %name,
                    dropped_namespace = %old.namespace,
                    dropped_updated = %old.updated_at,
                    kept_namespace = %keep.namespace,
                    kept_updated = %keep.updated_at,
                    "{} `{name}` is named across namespaces now and an older Ferry stored one per \
                     namespace; keeping the most recently updated, dropping the one from \
                     namespace `{}` (its document: {})",
                    kind.as_str(),
                    old.namespace,
                    old.doc
                );
                store
                    .delete_object(kind.as_str(), &old.namespace, &name)
                    .await?;
                dropped.push(old);
            }
            if keep.namespace != CLUSTER {
                let doc = stored_doc(kind, keep.doc.clone());
                store
                    .move_object(kind.as_str(), &keep.namespace, &name, CLUSTER, &doc)
                    .await?;
                tracing::info!(
                    kind = kind.as_str(),
                    %name,
                    from_namespace = %keep.namespace,
                    "kept across namespaces now"
                );
            }
        }
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tests::{call, plane_in};
    use serde_json::json;

    fn queue(namespace: &str, nominal: u32) -> Value {
        json!({
            "apiVersion": "ferry.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "a", "namespace": namespace},
            "spec": {"quotas": [{"flavor": "any", "nominal": nominal}]},
        })
    }

    /// A store file written the old way (queues and classes per namespace, two queues named
    /// `a`) is gathered when a control plane starts on it: the most recently updated `a` kept
    /// with its identity, the other dropped, nothing else lost; a second start changes nothing.
    #[tokio::test]
    async fn a_control_plane_gathers_what_an_older_one_stored_per_namespace() {
        let home = tempfile::tempdir().unwrap();
        let pause = || tokio::time::sleep(std::time::Duration::from_millis(5));
        let old = ferry_store::open(&home.path().join("ferry.db").to_string_lossy())
            .await
            .unwrap();
        old.put_object("Queue", "x", "a", &queue("x", 1), false)
            .await
            .unwrap();
        pause().await;
        let dropped = old
            .put_object("Queue", "y", "a", &queue("y", 2), false)
            .await
            .unwrap();
        pause().await;
        // Stored first, updated last: the one kept.
        let newest = old
            .put_object("Queue", "x", "a", &queue("x", 3), false)
            .await
            .unwrap();
        old.put_object("Queue", "default", "b", &queue("default", 1), false)
            .await
            .unwrap();
        let class = json!({"apiVersion": "ferry.dev/v1alpha1", "kind": "PriorityClass",
            "metadata": {"name": "urgent", "namespace": "default"}, "spec": {"value": 1000}});
        old.put_object("PriorityClass", "default", "urgent", &class, false)
            .await
            .unwrap();
        let deployment = json!({"kind": "ModelDeployment", "metadata": {"name": "chat"}});
        let chat = old
            .put_object("ModelDeployment", "default", "chat", &deployment, false)
            .await
            .unwrap();
        old.close().await;

        for _ in 0..2 {
            let plane = plane_in(home.path()).await;
            let store = plane.store();
            let queues = store.list_objects("Queue", None).await.unwrap();
            let names: Vec<(&str, &str)> = queues
                .iter()
                .map(|q| (q.namespace.as_str(), q.name.as_str()))
                .collect();
            assert_eq!(names, [(CLUSTER, "a"), (CLUSTER, "b")], "{queues:?}");
            let a = &queues[0];
            assert_eq!((&a.uid, a.generation), (&newest.uid, 2));
            assert_eq!(a.created_at, newest.created_at);
            assert_eq!(a.updated_at, newest.updated_at);
            assert_eq!(a.doc["spec"]["quotas"][0]["nominal"], 3);
            assert!(a.doc["metadata"].get("namespace").is_none(), "{a:?}");
            assert!(!queues.iter().any(|q| q.uid == dropped.uid));
            let classes = store.list_objects("PriorityClass", None).await.unwrap();
            assert_eq!(classes.len(), 1);
            assert_eq!(
                (classes[0].namespace.as_str(), classes[0].generation),
                (CLUSTER, 1)
            );
            assert_eq!(
                store
                    .get_object("ModelDeployment", "default", "chat")
                    .await
                    .unwrap(),
                Some(chat.clone())
            );
            let app = crate::api::router(plane.clone());
            let (status, got) = call(&app, "GET", "/api/v1/namespaces/y/queues/a", None).await;
            assert_eq!(status, axum::http::StatusCode::OK, "{got}");
            assert_eq!(got["doc"]["spec"]["quotas"][0]["nominal"], 3, "{got}");
            plane.store().close().await;
        }
    }

    /// The kept one of several is the most recently updated, returned with the others dropped.
    #[tokio::test]
    async fn gathering_drops_all_but_the_newest_of_a_name() {
        let store = ferry_store::open("sqlite::memory:").await.unwrap();
        store
            .put_object("Queue", CLUSTER, "a", &queue("x", 1), false)
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let newest = store
            .put_object("Queue", "z", "a", &queue("z", 2), false)
            .await
            .unwrap();
        let dropped = gather(&*store).await.unwrap();
        assert_eq!(
            dropped
                .iter()
                .map(|d| d.namespace.as_str())
                .collect::<Vec<_>>(),
            [CLUSTER]
        );
        let kept = store.list_objects("Queue", None).await.unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            (kept[0].namespace.as_str(), &kept[0].uid),
            (CLUSTER, &newest.uid)
        );
        assert!(gather(&*store).await.unwrap().is_empty());
    }
}

//! Bar 3: end to end against a real cluster (kind or k3d; see docs/kubernetes.md). Runs only
//! when `KUBECONFIG` is set, otherwise returns early saying why.
//!
//! Installs the CRDs, creates a namespace with the three claims, runs the operator in
//! process, submits a 2-node CPU TrainJob whose ranks check their wiring (rank 1 resolves
//! `MASTER_ADDR` and reaches rank 0 on `MASTER_PORT`), waits for `Succeeded`, then deletes
//! it and waits for the finalizer to clean up.

use std::time::Duration;

use ferry_k8s::crd::TrainJobResource;
use ferry_k8s::{FIELD_MANAGER, RenderOptions};
use ferry_spec::JobPhase;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const NS: &str = "ferry-e2e";

#[tokio::test]
async fn e2e_two_node_gang_on_a_real_cluster() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("e2e skipped: KUBECONFIG is not set (see docs/kubernetes.md: kind or k3d)");
        return;
    }
    let client = kube::Client::try_default()
        .await
        .expect("KUBECONFIG points at a reachable cluster");
    let ssa = PatchParams::apply(FIELD_MANAGER).force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in ferry_k8s::crds().unwrap() {
        let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
        crds.patch(&name, &ssa, &Patch::Apply(&crd)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await; // CRDs become served
    let dynamic = |api_version: &str, kind: &str, plural: &str| {
        let (g, v) = api_version.split_once('/').unwrap_or(("", api_version));
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural)
    };
    let ns_api: Api<DynamicObject> =
        Api::all_with(client.clone(), &dynamic("v1", "Namespace", "namespaces"));
    ns_api
        .patch(
            NS,
            &ssa,
            &Patch::Apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
            ),
        )
        .await
        .unwrap();
    let pvcs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &dynamic("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    );
    for claim in ["ferry-data", "ferry-models", "ferry-checkpoints"] {
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": NS},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Mi"}}}});
        pvcs.patch(claim, &ssa, &Patch::Apply(&pvc)).await.unwrap();
    }

    let mut opts = RenderOptions::default();
    opts.images.trainer = "busybox:1.36".into();
    opts.shm_size = "64Mi".into();
    let operator = tokio::spawn(ferry_k8s::operator::run(
        client.clone(),
        opts,
        ferry_sched::Options::default(),
        "default",
        "e2e".into(),
    ));

    let script = "set -e; echo rank $NODE_RANK of $NNODES master $MASTER_ADDR:$MASTER_PORT; \
        if [ \"$NODE_RANK\" = 0 ]; then nc -l -p $MASTER_PORT -w 120 >/dev/null; \
        else until nc -w 2 $MASTER_ADDR $MASTER_PORT </dev/null; do sleep 1; done; fi";
    let job = json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "wiring", "namespace": NS},
        "spec": {"engine": "command", "command": ["sh", "-c", script],
                 "resources": {"nodes": 2, "gpusPerNode": 0}, "onFailure": {"maxRestarts": 1}},
    });
    let jobs: Api<TrainJobResource> = Api::namespaced(client.clone(), NS);
    let _ = jobs.delete("wiring", &DeleteParams::default()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(job).unwrap(),
    )
    .await
    .unwrap();

    let mut phase = None;
    for _ in 0..180 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let j = jobs.get("wiring").await.unwrap();
        phase = j.status.as_ref().and_then(|s| s.phase);
        if phase.is_some_and(JobPhase::is_terminal) {
            break;
        }
    }
    assert_eq!(
        phase,
        Some(JobPhase::Succeeded),
        "the 2-node gang rendezvoused and finished"
    );

    jobs.delete("wiring", &DeleteParams::default())
        .await
        .unwrap();
    let gangs: Api<Job> = Api::namespaced(client.clone(), NS);
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if jobs.get_opt("wiring").await.unwrap().is_none() {
            break;
        }
    }
    assert!(
        jobs.get_opt("wiring").await.unwrap().is_none(),
        "the finalizer was removed"
    );
    let left = gangs.get_opt("wiring-0").await.unwrap();
    assert!(
        left.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "the gang was deleted"
    );
    operator.abort();
}

//! CRDs: generated from the spec types, checked in under `deploy/crds/` and the chart, valid
//! `apiextensions.k8s.io/v1` objects, and strict about the resources they describe.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::schema::{assert_valid, validate};
use crate::specs::*;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn checked_in_crds_are_fresh() {
    let files = ferry_k8s::crd_files().unwrap();
    assert_eq!(files.len(), 4);
    let update = std::env::var_os("FERRY_UPDATE_CRDS").is_some();
    let mut stale = Vec::new();
    for dir in ["deploy/crds", "charts/ferry/crds"] {
        for (name, body) in &files {
            let path = workspace().join(dir).join(name);
            if update {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, body).unwrap();
            }
            if std::fs::read_to_string(&path).ok().as_deref() != Some(body.as_str()) {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "stale CRDs (regenerate with `ferry crds`, or FERRY_UPDATE_CRDS=1 cargo test -p ferry-k8s): {stale:?}"
    );
}

#[test]
fn crds_are_valid_custom_resource_definitions() {
    let crds = ferry_k8s::crds().unwrap();
    assert_valid(&crds);
    for crd in &crds {
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], "v1alpha1");
        let schema = &v["schema"]["openAPIV3Schema"];
        // Structural: no refs, no unions left.
        let text = schema.to_string();
        assert!(
            !text.contains("$ref") && !text.contains("oneOf") && !text.contains("anyOf"),
            "{}",
            crd["metadata"]["name"]
        );
    }
    let tj = crds
        .iter()
        .find(|c| c["spec"]["names"]["kind"] == "TrainJob")
        .unwrap();
    assert_eq!(
        tj["spec"]["versions"][0]["subresources"],
        json!({"status": {}})
    );
    // Queues of every namespace name a cohort by name alone, as with Kueue's Cohort.
    let scopes: Vec<(&Value, &Value)> = crds
        .iter()
        .map(|c| (&c["spec"]["names"]["kind"], &c["spec"]["scope"]))
        .collect();
    assert!(
        scopes.contains(&(&json!("Cohort"), &json!("Cluster"))),
        "{scopes:?}"
    );
    assert!(
        scopes.contains(&(&json!("Queue"), &json!("Namespaced"))),
        "{scopes:?}"
    );
}

/// A Ferry Cohort document is valid against its CRD, and a misspelt field is not.
#[test]
fn cohorts_validate_against_their_crd() {
    let doc = |spec: Value| {
        json!({"apiVersion": "ferry.dev/v1alpha1", "kind": "Cohort",
        "metadata": {"name": "research"}, "spec": spec})
    };
    assert_valid(&[doc(json!({"parent": "org", "weight": 2.5, "quotas": [
        {"flavor": "H100-80GB", "nominal": 8, "borrowingLimit": 16, "lendingLimit": 40}]}))]);
    assert_valid(&[doc(json!({}))]);
    let errors = validate(&doc(json!({"parentName": "org"}))).unwrap_err();
    assert!(
        errors.iter().any(|e| e.contains("parentName")),
        "{errors:?}"
    );
    let errors = validate(&doc(json!({"weight": "heavy"}))).unwrap_err();
    assert!(errors.iter().any(|e| e.contains("weight")), "{errors:?}");
}

fn as_custom_resource(text: &str) -> Value {
    let mut v = serde_json::to_value(parse(text).remove(0)).unwrap();
    v["metadata"] = json!({"name": v["metadata"]["name"], "namespace": v["metadata"]["namespace"]});
    v
}

#[test]
fn resources_validate_against_the_generated_crds() {
    let objs: Vec<Value> = [
        SINGLE_NODE_LORA,
        TWO_NODE_FULL,
        SIXTEEN_NODE_MEGATRON,
        DEPLOY_FIXED,
    ]
    .iter()
    .map(|t| as_custom_resource(t))
    .chain(parse(QUEUES).into_iter().map(|q| {
        let mut v = serde_json::to_value(q).unwrap();
        v["metadata"] =
            json!({"name": v["metadata"]["name"], "namespace": v["metadata"]["namespace"]});
        v
    }))
    .collect();
    assert_valid(&objs);
    let mut typo = as_custom_resource(TWO_NODE_FULL);
    typo["spec"]["resources"]["gpusPerNodes"] = 8.into();
    assert!(
        validate(&typo)
            .unwrap_err()
            .iter()
            .any(|e| e.contains("gpusPerNodes"))
    );
    let mut bad_enum = as_custom_resource(TWO_NODE_FULL);
    bad_enum["spec"]["method"] = "fulll".into();
    assert!(validate(&bad_enum).is_err());
}

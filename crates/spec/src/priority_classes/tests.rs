use std::collections::BTreeSet;
use std::path::Path;

use super::*;

/// What `kubectl get priorityclasses -o yaml` prints on a cluster with two classes of its own:
/// Kubernetes' two system classes first, server-set metadata on every item.
const KUBECTL_LIST: &str = r#"
apiVersion: v1
items:
- apiVersion: scheduling.k8s.io/v1
  description: Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.
  kind: PriorityClass
  metadata:
    creationTimestamp: "2025-01-10T09:12:44Z"
    generation: 1
    name: system-cluster-critical
    resourceVersion: "83"
    uid: 4e0f6a8e-0d4b-4d1c-9b0e-1f2a3b4c5d6e
  preemptionPolicy: PreemptLowerPriority
  value: 2000000000
- apiVersion: scheduling.k8s.io/v1
  description: Used for system critical pods that must not be moved from their current node.
  kind: PriorityClass
  metadata:
    creationTimestamp: "2025-01-10T09:12:44Z"
    generation: 1
    name: system-node-critical
    resourceVersion: "82"
    uid: 7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
  preemptionPolicy: PreemptLowerPriority
  value: 2000001000
- apiVersion: scheduling.k8s.io/v1
  description: Customer-facing training runs.
  globalDefault: false
  kind: PriorityClass
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"production"},"value":1000}
    creationTimestamp: "2025-02-01T12:00:00Z"
    generation: 1
    name: production
    resourceVersion: "51234"
    uid: 0b8c7d6e-5f4a-4b3c-2d1e-0f9a8b7c6d5e
  preemptionPolicy: PreemptLowerPriority
  value: 1000
- apiVersion: scheduling.k8s.io/v1
  globalDefault: true
  kind: PriorityClass
  metadata:
    name: overnight
  preemptionPolicy: Never
  value: -50
kind: List
metadata:
  resourceVersion: ""
"#;

fn class(name: &str, value: i32, preempting: bool) -> ClusterPriorityClass {
    ClusterPriorityClass {
        name: name.into(),
        value,
        preempting,
        description: None,
    }
}

/// The classes of `text`, descriptions left out.
fn classes(text: &str) -> Vec<ClusterPriorityClass> {
    let read = read_priority_classes(text, "pc.yaml").unwrap();
    read.classes
        .into_iter()
        .map(|c| ClusterPriorityClass {
            description: None,
            ..c
        })
        .collect()
}

/// Every problem of `text`, which must be refused.
fn problems(text: &str) -> Vec<String> {
    match read_priority_classes(text, "pc.yaml") {
        Ok(read) => panic!("accepted: {read:?}"),
        Err(e) => e.problems().into_iter().map(ToString::to_string).collect(),
    }
}

/// A Kubernetes PriorityClass named `name` with `fields` (a YAML flow mapping's inside) added.
fn kubernetes(name: &str, fields: &str) -> String {
    format!(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\n{}",
        fields
            .split(", ")
            .filter(|f| !f.is_empty())
            .map(|f| format!("{f}\n"))
            .collect::<String>()
    )
}

#[test]
fn a_kubectl_list_reads_without_the_system_classes() {
    let read = read_priority_classes(KUBECTL_LIST, "pc.yaml").unwrap();
    assert_eq!(
        read,
        ClusterPriorityClasses {
            classes: vec![
                ClusterPriorityClass {
                    description: Some("Customer-facing training runs.".into()),
                    ..class("production", 1000, true)
                },
                class("overnight", -50, false),
            ],
            global_default: Some("overnight".into()),
            notes: vec![
                "skipped Kubernetes' own system-cluster-critical, system-node-critical (for the \
                 cluster's critical pods, not for jobs)"
                    .into()
            ],
        }
    );
    // `kubectl get priorityclasses -o json` says the same.
    let value: Value = serde_saphyr::from_str(KUBECTL_LIST).unwrap();
    let json = serde_json::to_string_pretty(&value).unwrap();
    assert_eq!(read_priority_classes(&json, "pc.json").unwrap(), read);
}

#[test]
fn kueue_and_ferry_classes_read_beside_kubernetes_ones() {
    let text = r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: sample-priority}
value: 10000
description: "Sample priority"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: batch}
value: -10
---
apiVersion: ferry.dev/v1alpha1
kind: PriorityClass
metadata: {name: urgent}
spec: {value: 5000, preemptionPolicy: Never, description: deadline work}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: normal}
value: 0
"#;
    let read = read_priority_classes(text, "pc.yaml").unwrap();
    assert_eq!(
        classes(text),
        [
            class("sample-priority", 10000, true),
            class("batch", -10, true),
            class("urgent", 5000, false),
            class("normal", 0, true),
        ]
    );
    assert_eq!(
        read.classes[0].description.as_deref(),
        Some("Sample priority")
    );
    assert_eq!(
        read.classes[2].description.as_deref(),
        Some("deadline work")
    );
    assert_eq!(read.global_default, None);
    assert_eq!(
        read.notes,
        [
            "WorkloadPriorityClasses are read as preempting (PreemptLowerPriority): Kueue gives \
             a class no policy and leaves preemption to each ClusterQueue's spec.preemption"
        ]
    );
}

#[test]
fn unknown_fields_and_kinds_are_refused_with_the_closest_name() {
    assert_eq!(
        problems(&kubernetes("a", "valeu: 10, preemptionpolicy: Never")),
        [
            "PriorityClass/a: valeu: not a field of Kubernetes' PriorityClass; did you mean `value`?",
            "PriorityClass/a: preemptionpolicy: not a field of Kubernetes' PriorityClass; did you \
             mean `preemptionPolicy`?",
            "PriorityClass/a: value: is required: a whole number from -1000000000 to 1000000000; \
             higher runs first",
        ]
    );
    assert_eq!(
        problems(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: b}\nvalue: 1\nglobalDefault: true\n"
        ),
        ["WorkloadPriorityClass/b: globalDefault: not a field of Kueue's WorkloadPriorityClass"]
    );
    // Ferry's form under Kubernetes' apiVersion.
    assert_eq!(
        problems(&kubernetes("c", "spec: {value: 10}")),
        [
            "PriorityClass/c: spec: this kind has no spec: write value, preemptionPolicy, \
             globalDefault and description at the top level (a spec is for apiVersion \
             ferry.dev/v1alpha1)",
            "PriorityClass/c: value: is required: a whole number from -1000000000 to 1000000000; \
             higher runs first",
        ]
    );
    assert_eq!(
        problems(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClas\nmetadata: {name: d}\nvalue: 1\n"
        ),
        [
            "PriorityClas/d: kind: PriorityClas (`scheduling.k8s.io/v1`) is not a priority \
             class; keep only PriorityClass (scheduling.k8s.io/v1 or ferry.dev/v1alpha1) and \
             WorkloadPriorityClass (kueue.x-k8s.io/v1beta2) objects in this file; did you mean \
             `PriorityClass`?"
        ]
    );
    assert_eq!(
        problems(&format!(
            "{}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: q}}\n---\n[1, 2]\n",
            kubernetes("ok", "value: 1")
        )),
        [
            "ClusterQueue/q: kind: ClusterQueue (`kueue.x-k8s.io/v1beta2`) is not a priority \
             class; keep only PriorityClass (scheduling.k8s.io/v1 or ferry.dev/v1alpha1) and \
             WorkloadPriorityClass (kueue.x-k8s.io/v1beta2) objects in this file",
            "document 3: must be a mapping with apiVersion, kind, metadata and value",
        ]
    );
    assert_eq!(
        problems(
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PriorityClass\nmetadata: {name: e}\nvalue: 1\n---\nkind: WorkloadPriorityClass\nmetadata: {name: f}\nvalue: 1\n---\nmetadata: {name: g}\nvalue: 1\n"
        ),
        [
            "PriorityClass/e: apiVersion: `scheduling.k8s.io/v1beta1` is not read; write \
             scheduling.k8s.io/v1 (Kubernetes' PriorityClass) or ferry.dev/v1alpha1 (Ferry's)",
            "WorkloadPriorityClass/f: apiVersion: no apiVersion is not read; write \
             kueue.x-k8s.io/v1beta2 or v1beta1",
            "document 3: kind: is required: PriorityClass or WorkloadPriorityClass",
        ]
    );
}

#[test]
fn bad_values_and_names_are_refused_naming_the_field_and_the_fix() {
    assert_eq!(
        problems(&kubernetes("a", "value: \"1000\"")),
        [
            "PriorityClass/a: value: must be a whole number from -1000000000 to 1000000000, not \
             text (got \"1000\"); write it without quotes"
        ]
    );
    assert_eq!(
        problems(&kubernetes("a", "value: 1.5")),
        ["PriorityClass/a: value: must be a whole number from -1000000000 to 1000000000 (got 1.5)"]
    );
    assert_eq!(
        problems(&kubernetes("a", "value: 2000000000")),
        [
            "PriorityClass/a: value: must be between -1000000000 and 1000000000 (got \
             2000000000); larger values are for system classes"
        ]
    );
    assert_eq!(
        problems(&kubernetes("a", "value: 18446744073709551615")),
        [
            "PriorityClass/a: value: must be between -1000000000 and 1000000000 (got \
             18446744073709551615); larger values are for system classes"
        ]
    );
    assert_eq!(
        problems(&kubernetes(
            "a",
            "value: 1, preemptionPolicy: Sometimes, globalDefault: maybe, description: [x]"
        )),
        [
            "PriorityClass/a: description: must be text (got [\"x\"]); quote it",
            "PriorityClass/a: globalDefault: must be true or false (got \"maybe\")",
            "PriorityClass/a: preemptionPolicy: must be PreemptLowerPriority (the default) or \
             Never (got \"Sometimes\")",
        ]
    );
    assert_eq!(
        problems(&kubernetes("High.Priority", "value: 1")),
        [
            "PriorityClass/High.Priority: metadata.name: must be lowercase letters, digits and \
             '-', starting and ending with a letter or digit (got \"High.Priority\"); rename the \
             class, e.g. `high-priority`, in the file and in jobs"
        ]
    );
    // Only Kubernetes' own classes are `system-`: another's is refused, not skipped.
    assert_eq!(
        problems(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: system-batch}\nvalue: 1\n"
        ),
        [
            "WorkloadPriorityClass/system-batch: metadata.name: names starting with `system-` \
             are reserved for the cluster's own classes (got \"system-batch\"); choose another \
             name"
        ]
    );
    assert_eq!(
        problems("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nvalue: 1\n"),
        ["document 1 (PriorityClass): metadata.name: is required: the class's name"]
    );
    // Ferry's own documents are checked as `ferry apply` checks them, `system-` names too.
    assert_eq!(
        problems(
            "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: huge}\nspec: {value: 2000000000}\n---\napiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: system-x}\nspec: {value: 1}\n"
        ),
        [
            "PriorityClass/huge: spec.value: must be between -1000000000 and 1000000000 (got \
             2000000000); larger values are for system classes",
            "PriorityClass/system-x: metadata.name: names starting with `system-` are reserved \
             for the cluster's own classes (got \"system-x\"); choose another name",
        ]
    );
}

#[test]
fn a_name_given_twice_or_two_defaults_are_refused() {
    let text = format!(
        "{}---\n{}---\n{}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {{name: a}}\nvalue: 3\n",
        kubernetes("a", "value: 1, globalDefault: true"),
        kubernetes("b", "value: 2, globalDefault: true"),
        kubernetes("c", "value: 3, globalDefault: true"),
    );
    assert_eq!(
        problems(&text),
        [
            "WorkloadPriorityClass/a: metadata.name: `a` is defined again (first by \
             PriorityClass/a); keep one",
            "PriorityClass/c: globalDefault: `a`, `b`, `c` each have globalDefault: true (the \
             first at PriorityClass/a); a cluster has one default class, so keep globalDefault: \
             true on one only",
        ]
    );
}

#[test]
fn a_file_without_a_class_is_refused() {
    let system_only = KUBECTL_LIST
        .split("- apiVersion: scheduling.k8s.io/v1\n  description: Customer")
        .next()
        .unwrap()
        .to_owned()
        + "kind: List\n";
    assert_eq!(
        problems(&system_only),
        [
            "no priority class found besides Kubernetes' own system- classes; the file needs a \
             PriorityClass (scheduling.k8s.io/v1 or ferry.dev/v1alpha1) or a \
             WorkloadPriorityClass (kueue.x-k8s.io/v1beta2)"
        ]
    );
    assert!(problems("")[0].starts_with("no priority class found; the file needs"));
    assert!(matches!(
        read_priority_classes("value: [", "pc.yaml"),
        Err(SpecError::Syntax { .. })
    ));
}

/// The fields of `schema`'s `properties` at the JSON pointer `at` in the fixture at `path`
/// (under the shared fixtures), each of the documents' versions.
fn schema_fields(path: &str, at: &[&str]) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/k8s")
        .join(path);
    let text = std::fs::read_to_string(&path).unwrap();
    let schema: Value = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).unwrap()
    } else {
        serde_saphyr::from_str(&text).unwrap()
    };
    let mut fields = BTreeSet::new();
    let versions = match schema.pointer("/spec/versions").and_then(Value::as_array) {
        Some(versions) => versions.iter().collect(),
        None => vec![&schema],
    };
    for version in versions {
        let properties = at.iter().fold(version, |v, key| &v[*key]);
        fields.extend(properties.as_object().unwrap().keys().cloned());
    }
    fields
}

/// Every field of a PriorityClass in Kubernetes' OpenAPI document of the fixtures is one this
/// reader knows: a new one would be refused as a typo.
#[test]
fn the_known_fields_are_kubernetes() {
    let fields = schema_fields(
        "kubernetes/v1.35/openapi-v3/apis__scheduling.k8s.io__v1_openapi.json",
        &[
            "components",
            "schemas",
            "io.k8s.api.scheduling.v1.PriorityClass",
            "properties",
        ],
    );
    let known: BTreeSet<String> = PRIORITY_CLASS_FIELDS.map(String::from).into();
    assert_eq!(fields, known);
}

/// Every field of a WorkloadPriorityClass in the Kueue release of the fixtures (both served
/// versions) is one this reader knows.
#[test]
fn the_known_fields_are_kueues() {
    let fields = schema_fields(
        "crds/kueue/v0.19.2/kueue.x-k8s.io_workloadpriorityclasses.yaml",
        &["schema", "openAPIV3Schema", "properties"],
    );
    let known: BTreeSet<String> = WORKLOAD_PRIORITY_CLASS_FIELDS.map(String::from).into();
    assert_eq!(fields, known);
}

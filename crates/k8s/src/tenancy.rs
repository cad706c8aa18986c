//! Ferry `Queue`s → tenancy objects: a Namespace per team with a GPU `ResourceQuota` and a
//! `LimitRange`, Ferry's `PriorityClass`es, and — when Kueue is installed — Kueue's
//! `ResourceFlavor`, `ClusterQueue`, `LocalQueue` and `WorkloadPriorityClass`.

use std::collections::{BTreeMap, BTreeSet};

use ferry_spec::Queue;
use serde_json::{Value, json};

use crate::options::{MANAGED_BY, PRIORITIES, RenderOptions, flavor_object_name};

/// Kueue API version rendered (the storage version of Kueue 0.19).
pub const KUEUE_API: &str = "kueue.x-k8s.io/v1beta2";
/// The resource every quota counts.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

fn managed() -> Value {
    json!({MANAGED_BY.0: MANAGED_BY.1})
}

/// The PriorityClass objects for Ferry's named priorities.
pub fn priority_classes(kueue: bool) -> Vec<Value> {
    PRIORITIES
        .into_iter()
        .flat_map(|(name, value)| {
            class_objects(
                &format!("ferry-{name}"),
                value,
                true,
                &format!("Ferry priority `{name}`: higher classes may preempt lower ones"),
                kueue,
            )
        })
        .collect()
}

/// A Ferry `PriorityClass` document as the cluster's own class of the same name (what a job's
/// `spec.priority` then puts in its pods' `priorityClassName`), with Kueue's
/// `WorkloadPriorityClass` beside it when Kueue admits.
pub fn applied_priority_class(class: &ferry_spec::PriorityClass, kueue: bool) -> Vec<Value> {
    let description = class
        .spec
        .description
        .clone()
        .unwrap_or_else(|| format!("Ferry priority `{}`", class.metadata.name));
    class_objects(
        &class.metadata.name,
        class.spec.value,
        class.preempting(),
        &description,
        kueue,
    )
}

fn class_objects(
    name: &str,
    value: i32,
    preempting: bool,
    description: &str,
    kueue: bool,
) -> Vec<Value> {
    let mut out = vec![json!({
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": managed()},
        "value": value,
        "globalDefault": false,
        "preemptionPolicy": if preempting { "PreemptLowerPriority" } else { "Never" },
        "description": description,
    })];
    if kueue {
        out.push(json!({
            "apiVersion": KUEUE_API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name, "labels": managed()},
            "value": value,
            "description": description,
        }));
    }
    out
}

/// GPUs a queue may hold at once: its nominal quota plus what it may borrow, bounded by
/// its cohort's total.
fn gpu_ceiling(q: &Queue, cohort_total: i64) -> i64 {
    q.spec
        .quotas
        .iter()
        .map(|f| {
            let nominal = i64::from(f.nominal.max(0));
            match f.borrowing_limit {
                Some(b) => nominal + i64::from(b.max(0)),
                None if q.spec.cohort.is_some() => cohort_total.max(nominal),
                None => nominal,
            }
        })
        .sum()
}

/// The ClusterQueue name of a Ferry queue (cluster-scoped, so namespaced when needed).
pub fn cluster_queue_name(q: &Queue) -> String {
    if q.metadata.name == q.metadata.namespace {
        q.metadata.name.clone()
    } else {
        format!("{}-{}", q.metadata.namespace, q.metadata.name)
    }
}

/// Renders every tenancy object for `queues`.
pub fn render(queues: &[&Queue], opts: &RenderOptions) -> Vec<Value> {
    let mut out = Vec::new();
    let namespaces: BTreeSet<&str> = queues
        .iter()
        .map(|q| q.metadata.namespace.as_str())
        .collect();
    let mut cohort_total: BTreeMap<&str, i64> = BTreeMap::new();
    for q in queues {
        if let Some(c) = &q.spec.cohort {
            *cohort_total.entry(c.as_str()).or_default() += q
                .spec
                .quotas
                .iter()
                .map(|f| i64::from(f.nominal.max(0)))
                .sum::<i64>();
        }
    }
    for ns in &namespaces {
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {MANAGED_BY.0: MANAGED_BY.1, "ferry.dev/team": ns}},
        }));
    }
    out.extend(priority_classes(opts.cluster.kueue));
    for ns in &namespaces {
        let gpus: i64 = queues
            .iter()
            .filter(|q| q.metadata.namespace == *ns)
            .map(|q| {
                let total = q
                    .spec
                    .cohort
                    .as_deref()
                    .and_then(|c| cohort_total.get(c))
                    .copied()
                    .unwrap_or(0);
                gpu_ceiling(q, total)
            })
            .sum();
        out.push(json!({
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "ferry-gpus", "namespace": ns, "labels": managed()},
            "spec": {"hard": {format!("requests.{GPU_RESOURCE}"): gpus.to_string()}},
        }));
        out.push(json!({
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "ferry-limits", "namespace": ns, "labels": managed()},
            "spec": {"limits": [{
                "type": "Container",
                "max": {GPU_RESOURCE: opts.cluster.gpus_per_node.to_string()},
                "defaultRequest": {"cpu": "1", "memory": "4Gi"},
            }]},
        }));
    }
    if !opts.cluster.kueue {
        return out;
    }
    let flavors: BTreeSet<&str> = queues
        .iter()
        .flat_map(|q| q.spec.quotas.iter().map(|f| f.flavor.as_str()))
        .collect();
    for flavor in &flavors {
        let spec = if *flavor == "any" {
            json!({})
        } else {
            json!({"nodeLabels": {opts.cluster.flavor_label.clone(): flavor}})
        };
        out.push(json!({
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor_object_name(flavor), "labels": managed()},
            "spec": spec,
        }));
    }
    for q in queues {
        let flavors: Vec<Value> = q
            .spec
            .quotas
            .iter()
            .map(|f| {
                let mut res =
                    json!({"name": GPU_RESOURCE, "nominalQuota": f.nominal.max(0).to_string()});
                if let Some(b) = f.borrowing_limit {
                    res["borrowingLimit"] = b.max(0).to_string().into();
                }
                if let Some(l) = f.lending_limit {
                    res["lendingLimit"] = l.max(0).to_string().into();
                }
                json!({"name": flavor_object_name(&f.flavor), "resources": [res]})
            })
            .collect();
        let mut spec = json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": q.metadata.namespace}},
            "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": flavors}],
            // Kueue's own values, under its name for the queue's field.
            "preemption": {
                "withinClusterQueue": q.spec.preemption.within_queue,
                "reclaimWithinCohort": q.spec.preemption.reclaim_within_cohort,
            },
            "fairSharing": {"weight": format!("{}", q.spec.weight)},
        });
        // Kueue's own shape and values; its default (`policy: Never`) is left to Kueue.
        let borrow = q.spec.preemption.borrow_within_cohort;
        if !borrow.is_never() {
            spec["preemption"]["borrowWithinCohort"] =
                serde_json::to_value(borrow).expect("a plain struct");
        }
        if let Some(c) = &q.spec.cohort {
            spec["cohortName"] = c.clone().into();
        }
        // Kueue's own field and values: a held queue admits nothing (and drains).
        if !q.spec.stop_policy.is_none() {
            spec["stopPolicy"] = serde_json::to_value(q.spec.stop_policy).expect("an enum");
        }
        let cq = cluster_queue_name(q);
        out.push(json!({
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": cq, "labels": managed()},
            "spec": spec,
        }));
        out.push(json!({
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": q.metadata.name, "namespace": q.metadata.namespace, "labels": managed()},
            "spec": {"clusterQueue": cq},
        }));
    }
    out
}

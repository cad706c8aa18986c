//! Ferry `Queue`s and `Cohort`s → tenancy objects: a Namespace per team with a GPU
//! `ResourceQuota` and a `LimitRange`, Ferry's `PriorityClass`es, and — when Kueue is installed
//! — Kueue's `ResourceFlavor`, `Cohort`, `ClusterQueue`, `LocalQueue` and
//! `WorkloadPriorityClass`.

use std::collections::{BTreeMap, BTreeSet};

use ferry_spec::{Cohort, Queue};
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
/// its cohort tree's total.
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

/// The root of `cohort`'s tree among `cohorts` (itself when no Cohort gives it a parent; a
/// parent loop, which `render::check` refuses, ends where it closes).
fn root_of<'a>(cohort: &'a str, cohorts: &[&'a Cohort]) -> &'a str {
    let mut at = cohort;
    let mut seen = BTreeSet::new();
    while seen.insert(at) {
        match cohorts
            .iter()
            .find(|c| c.metadata.name == at)
            .and_then(|c| c.spec.parent.as_deref())
        {
            Some(parent) => at = parent,
            None => break,
        }
    }
    at
}

/// Renders every tenancy object for `queues` and the cohort trees `cohorts` they are in.
pub fn render(queues: &[&Queue], cohorts: &[&Cohort], opts: &RenderOptions) -> Vec<Value> {
    let mut out = Vec::new();
    let namespaces: BTreeSet<&str> = queues
        .iter()
        .map(|q| q.metadata.namespace.as_str())
        .collect();
    // GPUs of each cohort tree (by its root): its queues' nominal quotas and its cohorts' own.
    let mut cohort_total: BTreeMap<&str, i64> = BTreeMap::new();
    let nominal = |f: i32| i64::from(f.max(0));
    for q in queues {
        if let Some(c) = &q.spec.cohort {
            *cohort_total.entry(root_of(c, cohorts)).or_default() += q
                .spec
                .quotas
                .iter()
                .map(|f| nominal(f.nominal))
                .sum::<i64>();
        }
    }
    for c in cohorts {
        *cohort_total
            .entry(root_of(&c.metadata.name, cohorts))
            .or_default() += c
            .spec
            .quotas
            .iter()
            .map(|f| nominal(f.nominal))
            .sum::<i64>();
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
                    .and_then(|c| cohort_total.get(root_of(c, cohorts)))
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
    let flavors: BTreeSet<&str> = (queues.iter())
        .flat_map(|q| q.spec.quotas.iter().map(|f| f.flavor.as_str()))
        .chain(
            cohorts
                .iter()
                .flat_map(|c| c.spec.quotas.iter().map(|f| f.flavor.as_str())),
        )
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
    // Cohorts before the ClusterQueues that name them, parents before their children, as
    // Kueue's documentation creates a tree.
    let mut ordered: Vec<&Cohort> = cohorts.to_vec();
    ordered.sort_by_key(|c| depth(c, cohorts));
    for c in ordered {
        out.push(kueue_cohort(c));
    }
    for q in queues {
        let flavors = flavor_quotas(
            q.spec
                .quotas
                .iter()
                .map(|f| (&f.flavor, f.nominal, f.borrowing_limit, f.lending_limit)),
        );
        let mut spec = json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": q.metadata.namespace}},
            "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": flavors}],
            // Kueue's own values, under its name for the queue's field.
            "preemption": {
                "withinClusterQueue": q.spec.preemption.within_queue,
                "reclaimWithinCohort": q.spec.preemption.reclaim_within_cohort,
            },
            "fairSharing": fair_sharing(q.spec.weight),
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

/// Kueue's `resourceGroups[].flavors` for GPU quotas `(flavor, nominal, borrowing limit,
/// lending limit)`, each flavor under its ResourceFlavor's name.
fn flavor_quotas<'a>(
    quotas: impl Iterator<Item = (&'a String, i32, Option<i32>, Option<i32>)>,
) -> Vec<Value> {
    quotas
        .map(|(flavor, nominal, borrowing_limit, lending_limit)| {
            let mut res = json!({"name": GPU_RESOURCE, "nominalQuota": nominal.max(0).to_string()});
            if let Some(b) = borrowing_limit {
                res["borrowingLimit"] = b.max(0).to_string().into();
            }
            if let Some(l) = lending_limit {
                res["lendingLimit"] = l.max(0).to_string().into();
            }
            json!({"name": flavor_object_name(flavor), "resources": [res]})
        })
        .collect()
}

/// Kueue's `fairSharing` of a ClusterQueue or a Cohort: the weight as a quantity (a decimal
/// string, e.g. `"0.5"`).
fn fair_sharing(weight: f64) -> Value {
    json!({"weight": format!("{weight}")})
}

/// How many parents above `c` among `cohorts` (a loop counts until it closes).
fn depth(c: &Cohort, cohorts: &[&Cohort]) -> usize {
    let mut seen = BTreeSet::from([c.metadata.name.as_str()]);
    let mut at = c;
    while let Some(parent) = at.spec.parent.as_deref() {
        match cohorts.iter().find(|p| p.metadata.name == parent) {
            Some(p) if seen.insert(parent) => at = p,
            // A parent no Cohort defines is a root Kueue creates: one level more.
            None => return seen.len(),
            Some(_) => break,
        }
    }
    seen.len() - 1
}

/// A Ferry `Cohort` as Kueue's `Cohort` (cluster-scoped, as Ferry's): its parent as
/// `spec.parentName`, its weight as `spec.fairSharing.weight` (always, as a ClusterQueue's),
/// its own GPUs and limits as a `resourceGroups` entry for the GPU resource (none when it has
/// no quota: Kueue wants at least one flavor in a group).
pub fn kueue_cohort(c: &Cohort) -> Value {
    let mut spec = json!({"fairSharing": fair_sharing(c.spec.weight)});
    if let Some(parent) = &c.spec.parent {
        spec["parentName"] = parent.clone().into();
    }
    if !c.spec.quotas.is_empty() {
        let flavors = flavor_quotas(
            c.spec
                .quotas
                .iter()
                .map(|f| (&f.flavor, f.nominal, f.borrowing_limit, f.lending_limit)),
        );
        spec["resourceGroups"] = json!([{"coveredResources": [GPU_RESOURCE], "flavors": flavors}]);
    }
    json!({
        "apiVersion": KUEUE_API,
        "kind": "Cohort",
        "metadata": {"name": c.metadata.name, "labels": managed()},
        "spec": spec,
    })
}

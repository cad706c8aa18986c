//! Volcano's `Queue` objects (`scheduling.volcano.sh/v1beta1`) read as Ferry queue specs, so a
//! platform team on Volcano can replay its queues (`ferry sim --queues`). Volcano lets every
//! queue use idle GPUs up to its `capability`, which is one cohort shared by all; `deserved`
//! is what a queue is owed (its nominal quota), `guarantee` what is kept for it and never lent,
//! and `weight` splits what no `deserved` covers, as Ferry's entitlements do. Preemption and
//! reclaim are actions of `volcano-scheduler.conf`, not of a queue; they are replayed off, as in
//! Volcano's default configuration, and said so.

use serde_json::{Map, Value};

use crate::error::{FieldError, SpecError};
use crate::foreign::{finish, kubernetes_objects, unknown_fields};
use crate::quantity::whole_gpus;
use crate::queue::{FlavorQuota, Preemption, QueueSpec, ReclaimWithinCohort, WithinQueue};

/// Volcano's API group, the prefix of the `apiVersion` of the queues this reader takes.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// The cohort all Volcano queues share: the cluster's idle GPUs are any queue's to use.
pub const VOLCANO_COHORT: &str = "volcano";

/// The `spec` fields of a Volcano Queue (v1beta1): a field outside them is refused.
pub const VOLCANO_QUEUE_FIELDS: [&str; 11] = [
    "affinity",
    "capability",
    "dequeueStrategy",
    "deserved",
    "extendClusters",
    "guarantee",
    "parent",
    "priority",
    "reclaimable",
    "type",
    "weight",
];

/// The Volcano Queue fields that change scheduling and that Ferry does not replay.
const NOT_MODELLED: [&str; 5] = [
    "affinity",
    "dequeueStrategy",
    "extendClusters",
    "priority",
    "type",
];

/// What a file of Volcano Queues says about queues.
#[derive(Debug, Clone, PartialEq)]
pub struct VolcanoQueues {
    /// Each queue, in file order.
    pub queues: Vec<VolcanoQueue>,
    /// What was read but is not replayed, one line each, for the user to see beside results.
    pub not_modelled: Vec<String>,
}

/// One Volcano Queue's GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct VolcanoQueue {
    /// Its name, what a job's `queue` names.
    pub name: String,
    /// GPUs it is owed (`spec.deserved`); unset, the proportion plugin's weighted share.
    pub deserved: Option<i32>,
    /// The most GPUs it may hold (`spec.capability`).
    pub capability: Option<i32>,
    /// GPUs kept for it and never lent (`spec.guarantee.resource`).
    pub guarantee: Option<i32>,
    /// Its share of what no `deserved` covers (`spec.weight`, 1 to 65535).
    pub weight: u32,
}

impl VolcanoQueues {
    /// The queues as Ferry queue specs on a cluster of `cluster_gpus` GPUs, all in the cohort
    /// [`VOLCANO_COHORT`]: a queue without `deserved` is owed its weight's share of the GPUs no
    /// `deserved` covers (up to its capability, the rest going to the others, as Volcano's
    /// proportion plugin divides them), may borrow up to its capability (no more than the
    /// others can lend), and lends all but its guarantee; nothing preempts.
    pub fn queue_specs(&self, cluster_gpus: u32) -> Vec<(String, QueueSpec)> {
        let nominal = self.owed(i64::from(cluster_gpus));
        let lendable: Vec<i64> = self
            .queues
            .iter()
            .zip(&nominal)
            .map(|(q, n)| n - i64::from(q.guarantee.unwrap_or(0)).min(*n))
            .collect();
        let all_lendable: i64 = lendable.iter().sum();
        self.queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let n = nominal[i];
                let others = all_lendable - lendable[i];
                let spec = QueueSpec {
                    cohort: Some(VOLCANO_COHORT.to_owned()),
                    quotas: vec![FlavorQuota {
                        flavor: "any".into(),
                        nominal: clamp(n),
                        borrowing_limit: q
                            .capability
                            .map(|c| clamp((i64::from(c) - n).clamp(0, others))),
                        lending_limit: q.guarantee.map(|_| clamp(lendable[i])),
                    }],
                    weight: f64::from(q.weight),
                    stop_policy: Default::default(),
                    preemption: Preemption {
                        within_queue: WithinQueue::Never,
                        reclaim_within_cohort: ReclaimWithinCohort::Never,
                    },
                };
                (q.name.clone(), spec)
            })
            .collect()
    }

    /// Each queue's owed GPUs: its `deserved` (else its guarantee), and for the queues without
    /// `deserved` a weighted share of the rest, filled up to their capabilities in rounds and
    /// rounded by largest remainder.
    fn owed(&self, cluster: i64) -> Vec<i64> {
        let mut owed: Vec<i64> = self
            .queues
            .iter()
            .map(|q| i64::from(q.deserved.or(q.guarantee).unwrap_or(0)))
            .collect();
        let mut open: Vec<usize> = (0..self.queues.len())
            .filter(|&i| self.queues[i].deserved.is_none())
            .collect();
        let cap = |i: usize| self.queues[i].capability.map_or(i64::MAX, i64::from);
        loop {
            let pool = cluster - owed.iter().sum::<i64>();
            let weights: i64 = open.iter().map(|&i| i64::from(self.queues[i].weight)).sum();
            if pool <= 0 || weights == 0 {
                return owed;
            }
            let mut shares: Vec<(usize, i64, i64)> = open
                .iter()
                .map(|&i| {
                    let w = i64::from(self.queues[i].weight);
                    (i, pool * w / weights, pool * w % weights)
                })
                .collect();
            let mut left = pool - shares.iter().map(|s| s.1).sum::<i64>();
            shares.sort_by_key(|&(i, _, rem)| (std::cmp::Reverse(rem), i));
            for s in &mut shares {
                if left > 0 {
                    s.1 += 1;
                    left -= 1;
                }
            }
            let capped: Vec<usize> = shares
                .iter()
                .filter(|&&(i, share, _)| owed[i] + share >= cap(i))
                .map(|s| s.0)
                .collect();
            if capped.is_empty() {
                for (i, share, _) in shares {
                    owed[i] += share;
                }
                return owed;
            }
            // Queues that reach their capability take it and leave the rest to the others.
            for i in capped {
                owed[i] = owed[i].max(cap(i));
                open.retain(|&o| o != i);
            }
        }
    }
}

/// A GPU count as a quota field holds it.
fn clamp(n: i64) -> i32 {
    n.clamp(0, i64::from(i32::MAX)) as i32
}

/// Reads every Volcano `Queue` in `text` (YAML documents, JSON, or a `List`); `source_name`
/// labels errors. Other objects are skipped and said so.
pub fn read_volcano_queues(text: &str, source_name: &str) -> Result<VolcanoQueues, SpecError> {
    let mut queues: Vec<VolcanoQueue> = Vec::new();
    let mut notes = vec![
        "preemption and reclaim (volcano-scheduler.conf actions, off by default) are replayed \
         off: no queue preempts"
            .to_owned(),
    ];
    let mut skipped = std::collections::BTreeMap::<String, usize>::new();
    let mut problems = Vec::new();
    for object in kubernetes_objects(text, source_name)? {
        let (kind, api) = (object.kind.as_str(), object.api_version.as_str());
        if kind != "Queue" || !api.starts_with(&format!("{VOLCANO_GROUP}/")) {
            *skipped.entry(format!("{kind} ({api})")).or_default() += 1;
            continue;
        }
        let (name, at, obj) = (object.name(), object.label(), &object.body);
        let mut problem = |field: &str, message: String| {
            problems.push(FieldError::new(format!("{at}: {field}"), message));
        };
        if api != format!("{VOLCANO_GROUP}/v1beta1") {
            problem(
                "apiVersion",
                format!("{api} is not read; write {VOLCANO_GROUP}/v1beta1"),
            );
            continue;
        }
        if name.is_empty() {
            problem("metadata.name", "is required".into());
            continue;
        }
        let empty = Map::new();
        let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
        let before = problems.len();
        match read_queue(&at, name, spec, &mut notes) {
            Ok(q) if problems.len() == before => queues.push(q),
            Ok(_) => {}
            Err(mut found) => problems.append(&mut found),
        }
    }
    finish(
        source_name,
        problems,
        !queues.is_empty(),
        &format!("no {VOLCANO_GROUP} Queue found; the file needs at least one"),
        skipped,
        &mut notes,
    )?;
    Ok(VolcanoQueues {
        queues,
        not_modelled: notes,
    })
}

/// One Queue's spec; `Err` lists every problem.
fn read_queue(
    at: &str,
    name: &str,
    spec: &Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<VolcanoQueue, Vec<FieldError>> {
    let mut problems = unknown_fields(
        &format!("{at}: spec."),
        spec.keys(),
        &VOLCANO_QUEUE_FIELDS,
        "a Volcano Queue field",
    );
    let mut problem = |field: &str, message: String| {
        problems.push(FieldError::new(format!("{at}: spec.{field}"), message));
    };
    for field in NOT_MODELLED {
        if spec.get(field).is_some_and(|v| !v.is_null()) {
            notes.push(format!("{at}: spec.{field}"));
        }
    }
    if spec.get("reclaimable") == Some(&Value::Bool(false)) {
        notes.push(format!(
            "{at}: spec.reclaimable false (what it borrows is taken back like any loan)"
        ));
    }
    match spec.get("parent").and_then(Value::as_str) {
        None | Some("root") => {}
        Some(parent) => problem(
            "parent",
            format!(
                "queue trees are not modelled (parent `{parent}`); replay the leaf queues \
                 under root"
            ),
        ),
    }
    let mut gpus = |field: &str, list: Option<&Value>| -> Option<i32> {
        let list = list?.as_object()?;
        let (resource, v) = list.iter().find(|(r, _)| r.ends_with("/gpu"))?;
        let n = whole_gpus(v);
        if n.is_none() {
            problem(
                &format!("{field}[{resource}]"),
                format!("must be a whole number of GPUs, 0 or more, such as \"8\" (got {v})"),
            );
        }
        n
    };
    let deserved = gpus("deserved", spec.get("deserved"));
    let capability = gpus("capability", spec.get("capability"));
    let guarantee = gpus(
        "guarantee.resource",
        spec.get("guarantee").and_then(|g| g.get("resource")),
    );
    let nominal = deserved.or(guarantee).unwrap_or(0);
    if let Some(g) = guarantee.filter(|g| deserved.is_some_and(|d| *g > d)) {
        problem(
            "guarantee.resource",
            format!("{g} GPUs guaranteed, more than the {nominal} deserved; lower it"),
        );
    }
    if let Some(c) = capability.filter(|c| *c < nominal) {
        problem(
            "capability",
            format!("{c} GPUs, fewer than the {nominal} deserved or guaranteed; raise it"),
        );
    }
    let weight = match spec.get("weight") {
        None | Some(Value::Null) => 1,
        Some(w) => match w.as_u64().filter(|w| (1..=65_535).contains(w)) {
            Some(w) => w as u32,
            None => {
                problem(
                    "weight",
                    format!("must be a whole number from 1 to 65535 (got {w})"),
                );
                1
            }
        },
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(VolcanoQueue {
        name: name.to_owned(),
        deserved,
        capability,
        guarantee,
        weight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_read_as_one_cohort_with_deserved_capability_and_guarantee() {
        let text = r#"
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec:
  weight: 4
  reclaimable: false
  deserved: {cpu: "256", nvidia.com/gpu: "64"}
  capability: {nvidia.com/gpu: 96}
  guarantee: {resource: {nvidia.com/gpu: "16"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
spec: {weight: 1, parent: root}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j}
"#;
        let q = read_volcano_queues(text, "vq.yaml").unwrap();
        let specs = q.queue_specs(160);
        let research = &specs[0].1;
        assert_eq!(specs[0].0, "research");
        assert_eq!(research.cohort.as_deref(), Some(VOLCANO_COHORT));
        assert_eq!(research.weight, 4.0);
        assert_eq!(
            research.quotas,
            [FlavorQuota {
                flavor: "any".into(),
                nominal: 64,
                borrowing_limit: Some(32),
                lending_limit: Some(48),
            }]
        );
        assert_eq!(
            research.preemption.reclaim_within_cohort,
            ReclaimWithinCohort::Never
        );
        // Nothing deserved: owed what no queue deserves (160 - 64), lending all of it.
        let default = &specs[1].1.quotas[0];
        assert_eq!(
            (
                default.nominal,
                default.borrowing_limit,
                default.lending_limit
            ),
            (96, None, None)
        );
        assert_eq!(
            q.not_modelled[1..],
            [
                "Queue/research: spec.reclaimable false (what it borrows is taken back like any loan)",
                "1 Job (batch.volcano.sh/v1alpha1) object(s) skipped",
            ]
        );
    }

    /// Without `deserved`, queues are owed shares by weight, filled up to their capabilities
    /// (the GPUs a capped queue cannot take go to the others), rounded to whole GPUs that add
    /// up to the cluster; a capability above what the others can lend is cut to it.
    #[test]
    fn weights_divide_what_no_queue_deserves() {
        let q = |name: &str, weight: u32, capability: Option<i32>| VolcanoQueue {
            name: name.into(),
            deserved: None,
            capability,
            guarantee: None,
            weight,
        };
        let nominal = |queues: Vec<VolcanoQueue>, gpus: u32| -> Vec<i32> {
            VolcanoQueues {
                queues,
                not_modelled: Vec::new(),
            }
            .queue_specs(gpus)
            .iter()
            .map(|(_, s)| s.quotas[0].nominal)
            .collect()
        };
        assert_eq!(
            nominal(vec![q("a", 1, None), q("b", 2, None)], 100),
            [33, 67]
        );
        assert_eq!(
            nominal(vec![q("a", 1, None), q("b", 1, None), q("c", 1, None)], 8),
            [3, 3, 2]
        );
        assert_eq!(
            nominal(vec![q("a", 1, Some(10)), q("b", 1, None)], 100),
            [10, 90]
        );
        let specs = VolcanoQueues {
            queues: vec![q("a", 1, Some(1000)), q("b", 1, None)],
            not_modelled: Vec::new(),
        }
        .queue_specs(100);
        assert_eq!(
            specs[0].1.quotas[0].borrowing_limit,
            Some(50),
            "b lends its 50"
        );
    }

    #[test]
    fn bad_queues_are_refused_naming_the_field_and_the_fix() {
        let queue = |spec: &str| {
            let text = format!(
                "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: q}}\nspec: {spec}\n"
            );
            read_volcano_queues(&text, "vq.yaml")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            queue("{capabilty: {nvidia.com/gpu: 8}}"),
            "vq.yaml: Queue/q: spec.capabilty: not a Volcano Queue field; did you mean `capability`?"
        );
        assert_eq!(
            queue("{deserved: {nvidia.com/gpu: 500m}}"),
            "vq.yaml: Queue/q: spec.deserved[nvidia.com/gpu]: must be a whole number of GPUs, 0 \
             or more, such as \"8\" (got \"500m\")"
        );
        assert!(
            queue("{deserved: {nvidia.com/gpu: 8}, capability: {nvidia.com/gpu: 4}}")
                .contains("raise it")
        );
        assert!(
            queue("{deserved: {nvidia.com/gpu: 8}, guarantee: {resource: {nvidia.com/gpu: 9}}}")
                .contains("lower it")
        );
        assert!(queue("{weight: 0}").contains("from 1 to 65535"));
        assert!(queue("{parent: org}").contains("queue trees are not modelled"));
    }

    /// Every Queue `spec` field of the Volcano release in the fixtures is one this reader knows.
    #[test]
    fn the_known_fields_are_volcanos() {
        let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../../../shared/fixtures/k8s/crds/volcano/v1.15.1/scheduling.volcano.sh_queues.yaml",
        );
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&crd).unwrap()).unwrap();
        let mut fields = std::collections::BTreeSet::new();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
            fields.extend(spec.as_object().unwrap().keys().cloned());
        }
        let known: std::collections::BTreeSet<String> =
            VOLCANO_QUEUE_FIELDS.iter().map(|f| f.to_string()).collect();
        assert_eq!(fields, known);
    }
}

//! Another system's objects as Ferry's resources, for `ferry apply`: a platform team's Kueue
//! ClusterQueues and Cohorts, Volcano Queues, its namespaces' ResourceQuotas or its cluster's
//! priority classes, as `kubectl get … -o yaml` prints them, become the Queues, Cohorts and
//! PriorityClasses that run the same policy here, read by the same readers `ferry sim --queues`
//! and `ferry up --priority-classes` use. What does not carry over is said, never dropped
//! silently; Ferry's own documents in the same file are read as `ferry apply` reads them and
//! applied beside what is adopted.

use serde::Serialize;
use serde_json::json;

use crate::cohort::CohortSpec;
use crate::error::{FieldError, SpecError};
use crate::foreign::{Object, QueueObjects, kubernetes_objects};
use crate::kueue::kueue_queues_of;
use crate::meta::API_VERSION;
use crate::parse::{Resource, parse_value};
use crate::priority_class::{PreemptionPolicy, PriorityClassSpec};
use crate::priority_classes::{holds_foreign_priority_classes, priority_classes_of};
use crate::queue::QueueSpec;
use crate::resource_quota::resource_quotas_of;
use crate::volcano::volcano_queues_of;

/// Ferry's resources for a file of another system's objects, and what did not carry over.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    /// The resources, in the file's order (queues before cohorts for Kueue's), then Ferry's own
    /// documents of the file in theirs.
    pub resources: Vec<Resource>,
    /// What was read but is not taken over, one line each, for the user to see.
    pub notes: Vec<String>,
    /// The priority class marked `globalDefault: true`, which Ferry does not make its default.
    pub global_default: Option<String>,
}

/// Ferry's resources for `text` when it holds Kueue's queue objects, Kubernetes ResourceQuotas,
/// Volcano Queues (their shares fixed at `cluster_gpus`, which Volcano's depend on; refused
/// without it), or Kubernetes / Kueue priority classes, with Ferry's own documents beside them
/// (`None` for anything else, a file of Ferry's documents alone included); `Err` with every
/// problem when such a file cannot be taken over whole.
pub fn adopt(
    text: &str,
    source_name: &str,
    cluster_gpus: Option<u32>,
) -> Option<Result<Adopted, SpecError>> {
    let (own, objects): (Vec<Object>, Vec<Object>) = kubernetes_objects(text, source_name)
        .ok()?
        .into_iter()
        .partition(Object::is_ferrys);
    // A file of classes alone is classes, Kueue's WorkloadPriorityClasses included.
    let adopted = if holds_foreign_priority_classes(&objects) {
        priority_classes(&objects, source_name)
    } else {
        foreign_queues(objects, source_name, cluster_gpus)?
    };
    // Ferry's own documents, each named by where it is in the file as `parse_values` does.
    let own = own.into_iter().map(|o| {
        let at = format!("{source_name} ({})", o.at);
        parse_value(o.body, &at)
    });
    Some(match adopted {
        Ok(a) => {
            let made = a.resources.into_iter().map(Ok).chain(own).collect();
            Adopted::of(made, a.notes, a.global_default)
        }
        Err(e) => {
            let errors = std::iter::once(e)
                .chain(own.filter_map(Result::err))
                .collect();
            Err(SpecError::gathered(errors).expect("one error at least"))
        }
    })
}

/// [`adopt`] of a file's queue objects: Kueue's, ResourceQuotas or Volcano's (`None`: none).
fn foreign_queues(
    objects: Vec<Object>,
    source_name: &str,
    cluster_gpus: Option<u32>,
) -> Option<Result<Adopted, SpecError>> {
    let adopted = match QueueObjects::among(&objects) {
        Some(QueueObjects::Kueue) => kueue(objects, source_name),
        Some(QueueObjects::ResourceQuotas) => resource_quotas(objects, source_name),
        Some(QueueObjects::Volcano) => match cluster_gpus {
            Some(gpus) => volcano(objects, source_name, gpus),
            None => Err(SpecError::Invalid {
                source_name: source_name.to_owned(),
                problems: vec![FieldError::new(
                    "",
                    "Volcano Queues are owed shares of the cluster's GPUs, and its size is not \
                     known here; apply them to a running control plane, or write Ferry Queues \
                     (spec.quotas, spec.cohort)",
                )],
            }),
        },
        None => return None,
    };
    Some(adopted)
}

/// One of Ferry's documents of `kind`, named `name`, with `spec`, checked as `ferry apply`
/// checks any document (a name Ferry cannot use is refused here).
fn document(kind: &str, name: &str, spec: &impl Serialize) -> Result<Resource, SpecError> {
    let spec = serde_json::to_value(spec).expect("specs serialize");
    let doc = json!({
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    });
    parse_value(doc, &format!("{kind} {name}"))
}

/// A Queue document per queue and a Cohort document per cohort, in that order.
fn queues_and_cohorts(
    queues: &[(String, QueueSpec)],
    cohorts: &[(String, CohortSpec)],
) -> Vec<Result<Resource, SpecError>> {
    (queues.iter())
        .map(|(name, spec)| document("Queue", name, spec))
        .chain((cohorts.iter()).map(|(name, spec)| document("Cohort", name, spec)))
        .collect()
}

impl Adopted {
    /// Every document of `made` with `notes`, or one error with every refused document's
    /// problems.
    fn of(
        made: Vec<Result<Resource, SpecError>>,
        notes: Vec<String>,
        global_default: Option<String>,
    ) -> Result<Adopted, SpecError> {
        let (mut resources, mut errors) = (Vec::new(), Vec::new());
        for r in made {
            match r {
                Ok(r) => resources.push(r),
                Err(e) => errors.push(e),
            }
        }
        match SpecError::gathered(errors) {
            None => Ok(Adopted {
                resources,
                notes,
                global_default,
            }),
            Some(e) => Err(e),
        }
    }
}

/// A Queue per ClusterQueue and a Cohort per Kueue Cohort; a LocalQueue has no counterpart
/// (a Ferry job names its queue), so each is said with the queue its jobs should name.
fn kueue(objects: Vec<Object>, source_name: &str) -> Result<Adopted, SpecError> {
    let read = kueue_queues_of(objects, source_name)?;
    let made = queues_and_cohorts(&read.cluster_queues, &read.cohorts);
    let mut notes = read.not_modelled;
    // A flavor with node labels keeps its ResourceFlavor's name, which a control plane's GPUs
    // may not carry.
    let named: std::collections::BTreeSet<&str> = (read.cluster_queues.iter())
        .flat_map(|(_, spec)| spec.quotas.iter().map(|q| q.flavor.as_str()))
        .filter(|f| !f.eq_ignore_ascii_case(crate::kueue::ANY_FLAVOR))
        .collect();
    if !named.is_empty() {
        notes.push(format!(
            "flavors {} keep their ResourceFlavor names: a control plane applies a quota whose \
             flavor names its GPUs (`ferry get gpus`) or `any`, so rename them to match",
            named
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.extend(read.local_queues.iter().map(|lq| {
        format!(
            "LocalQueue {}/{}: a Ferry job names its queue itself (spec.queue: {})",
            lq.namespace, lq.name, lq.cluster_queue
        )
    }));
    Adopted::of(made, notes, None)
}

/// A Queue per namespace with a GPU cap, its nominal quota the cap, in no cohort: a hard cap
/// as before, which the note says how to turn into shared quota.
fn resource_quotas(objects: Vec<Object>, source_name: &str) -> Result<Adopted, SpecError> {
    let read = resource_quotas_of(objects, source_name)?;
    let made = queues_and_cohorts(&read.queues, &[]);
    let mut notes = read.not_modelled;
    notes.push(
        "ResourceQuotas are hard caps: each namespace's queue neither lends nor borrows; give \
         the queues one spec.cohort to share idle GPUs (jobs name the queue of their namespace \
         in spec.queue)"
            .to_owned(),
    );
    Adopted::of(made, notes, None)
}

/// Volcano's Queues on a cluster of `gpus` GPUs as `ferry sim --queues` replays them (one cohort,
/// or a cohort per parent queue), each owed what it deserves there: fixed quotas, which the
/// note says.
fn volcano(objects: Vec<Object>, source_name: &str, gpus: u32) -> Result<Adopted, SpecError> {
    let read = volcano_queues_of(objects, source_name)?;
    let made = queues_and_cohorts(&read.queue_specs(gpus), &read.cohort_specs(gpus));
    let mut notes = read.replayed;
    notes.extend(read.not_modelled);
    notes.push(format!(
        "Volcano's shares are fixed here as quotas on this control plane's {gpus} GPUs: apply \
         the queues again if that changes"
    ));
    Adopted::of(made, notes, None)
}

/// A PriorityClass per class of the file, Kubernetes' `system-` classes left out.
fn priority_classes(objects: &[Object], source_name: &str) -> Result<Adopted, SpecError> {
    let read = priority_classes_of(objects, source_name)?;
    let made = (read.classes.iter())
        .map(|c| {
            let spec = PriorityClassSpec {
                value: c.value,
                preemption_policy: if c.preempting {
                    PreemptionPolicy::PreemptLowerPriority
                } else {
                    PreemptionPolicy::Never
                },
                description: c.description.clone(),
            };
            document("PriorityClass", &c.name, &spec)
        })
        .collect();
    Adopted::of(made, read.notes, read.global_default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A ResourceQuota capping `namespace` at `gpus` GPUs, as `kubectl get -o yaml` prints one.
    fn resource_quota(namespace: &str, gpus: u32) -> String {
        format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: gpus, namespace: \
             {namespace}}}\nspec: {{hard: {{requests.nvidia.com/gpu: \"{gpus}\"}}}}\n"
        )
    }

    /// A resource's spec as JSON, to read its fields back.
    fn spec_of(r: &Resource) -> Value {
        r.to_value()["spec"].clone()
    }

    fn adopted(text: &str) -> Adopted {
        adopt(text, "f.yaml", None)
            .expect("a foreign file")
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn kueue_cluster_queues_and_cohorts_become_queues_and_cohorts() {
        let text = "\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: org
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohort: org
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: research}
spec: {clusterQueue: team-a}
";
        let a = adopted(text);
        let kinds: Vec<(&str, &str)> = a
            .resources
            .iter()
            .map(|r| (r.kind().as_str(), r.metadata().name.as_str()))
            .collect();
        assert_eq!(kinds, [("Queue", "team-a"), ("Queue", "team-b")]);
        let spec = spec_of(&a.resources[0]);
        assert_eq!(spec["cohort"], "org");
        assert_eq!(spec["quotas"][0]["nominal"], 16);
        assert_eq!(spec["quotas"][0]["borrowingLimit"], 8);
        assert!(
            a.notes.iter().any(|n| n
                == "LocalQueue research/main: a Ferry job names its queue itself \
                            (spec.queue: team-a)"),
            "{:?}",
            a.notes
        );
        // No ResourceFlavor in the file: `h100` is kept by name, and said.
        assert!(
            a.notes.iter().any(|n| n.starts_with("flavors `h100` keep")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn resource_quotas_become_capped_queues() {
        let a = adopted(&resource_quota("nlp", 12));
        assert_eq!(a.resources.len(), 1);
        assert_eq!(a.resources[0].metadata().name, "nlp");
        let spec = spec_of(&a.resources[0]);
        assert_eq!(spec["quotas"][0]["nominal"], 12);
        assert!(spec.get("cohort").is_none_or(Value::is_null), "{spec}");
        assert!(
            a.notes.iter().any(|n| n.contains("hard caps")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn ferry_documents_are_not_adopted_and_volcano_queues_need_the_cluster_size() {
        let ferry = "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\n\
                     spec: {quotas: [{flavor: any, nominal: 1}]}\n";
        assert!(adopt(ferry, "f.yaml", Some(8)).is_none());
        let volcano = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n\
                       metadata: {name: a}\nspec: {weight: 1}\n";
        let err = adopt(volcano, "v.yaml", None)
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(err.contains("write Ferry Queues"), "{err}");
        // On a control plane of 16 GPUs, a second queue of twice the weight: 16 GPUs shared
        // 1:2 in one cohort.
        let two = format!(
            "{volcano}---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n\
             metadata: {{name: b}}\nspec: {{weight: 2}}\n"
        );
        let a = adopt(&two, "v.yaml", Some(16)).unwrap().unwrap();
        let owed: Vec<(String, Value, Value)> = a
            .resources
            .iter()
            .map(|r| {
                let spec = spec_of(r);
                (
                    r.metadata().name.clone(),
                    spec["quotas"][0]["nominal"].clone(),
                    spec["cohort"].clone(),
                )
            })
            .collect();
        assert_eq!(owed.len(), 2, "{owed:?}");
        let total: i64 = owed.iter().map(|(_, n, _)| n.as_i64().unwrap()).sum();
        assert!(
            total <= 16 && owed[1].1.as_i64() > owed[0].1.as_i64(),
            "{owed:?}"
        );
        assert_eq!(owed[0].2, owed[1].2, "{owed:?}");
        assert!(
            a.notes.iter().any(|n| n.contains("16 GPUs")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn ferrys_own_documents_beside_foreign_objects_are_applied_with_them() {
        assert!(API_VERSION.starts_with(&format!("{}/", crate::meta::API_GROUP)));
        let job = |name: &str, gpus: &str| {
            format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\n\
                 spec:\n  engine: command\n  command: [\"true\"]\n  queue: nlp\n  \
                 resources: {{nodes: 1, procsPerNode: 1, gpusPerNode: {gpus}}}\n"
            )
        };
        let class = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n\
                     metadata: {name: urgent}\nvalue: 1000\n";
        for foreign in [resource_quota("nlp", 4), class.to_owned()] {
            let text = format!("{foreign}---\n{}", job("a", "1"));
            let a = adopted(&text);
            let kinds: Vec<&str> = a.resources.iter().map(|r| r.kind().as_str()).collect();
            assert_eq!(kinds[1..], ["TrainJob"], "{kinds:?}");
            assert!(
                !a.notes.iter().any(|n| n.contains("skipped")),
                "{:?}",
                a.notes
            );
        }
        // A file of Ferry's documents alone is not adopted, and a bad document of Ferry's beside
        // a bad foreign object is reported with it, by where it is in the file.
        assert!(adopt(&job("a", "1"), "f.yaml", None).is_none());
        let text = format!("{}---\n{}", resource_quota("NLP_Team", 4), job("b", "-1"));
        let err = adopt(&text, "f.yaml", None).unwrap().unwrap_err();
        let said = err.to_string();
        assert!(
            said.contains("NLP_Team") && said.contains("f.yaml (document 2)"),
            "{said}"
        );
        assert!(
            err.problems()
                .iter()
                .any(|p| p.path.contains("gpusPerNode")),
            "{said}"
        );
    }

    #[test]
    fn a_name_ferry_cannot_use_refuses_the_whole_file() {
        let err = adopt(&resource_quota("NLP_Team", 4), "q.yaml", None)
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(err.contains("NLP_Team"), "{err}");
    }
}

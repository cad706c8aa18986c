//! Kubernetes `ResourceQuota` objects read as hard GPU caps per namespace: what most teams
//! sharing a GPU cluster run today (a namespace per team, `requests.nvidia.com/gpu: "32"`), so
//! `ferry sim --queues` can replay it against queues that lend and borrow. A namespace's cap
//! becomes a queue with that nominal quota and no cohort (nothing lent, nothing borrowed).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{FieldError, SpecError};
use crate::foreign::{Object, finish, kubernetes_objects};
use crate::quantity::whole_gpus;
use crate::queue::{FlavorQuota, QueueSpec};

/// The GPU caps of a file of ResourceQuotas, and what in it is not replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceQuotas {
    /// Each namespace with a GPU cap, by name, as a queue with that nominal quota and no cohort.
    pub queues: Vec<(String, QueueSpec)>,
    /// What was read but is not replayed, one line each, for the user to see beside results.
    pub not_modelled: Vec<String>,
}

/// Reads the GPU caps of every `v1` `ResourceQuota` in `text` (YAML documents, JSON, or a
/// `List`); `source_name` labels errors. Several quotas in one namespace all hold, so the
/// smallest cap counts; scoped quotas (a priority class's pods, say) and other objects are
/// skipped and said so.
pub fn read_resource_quotas(text: &str, source_name: &str) -> Result<NamespaceQuotas, SpecError> {
    resource_quotas_of(kubernetes_objects(text, source_name)?, source_name)
}

/// [`read_resource_quotas`] of a file's objects already read.
pub(crate) fn resource_quotas_of(
    objects: Vec<Object>,
    source_name: &str,
) -> Result<NamespaceQuotas, SpecError> {
    let mut caps: BTreeMap<String, i32> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for Object {
        at,
        kind,
        api_version: api,
        body: obj,
    } in objects
    {
        if (kind.as_str(), api.as_str()) != ("ResourceQuota", "v1") {
            *skipped.entry(format!("{kind} ({api})")).or_default() += 1;
            continue;
        }
        let meta = obj.get("metadata");
        let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str);
        let namespace = field("namespace").unwrap_or("default").to_owned();
        let at = match field("name") {
            Some(name) => format!("ResourceQuota/{namespace}/{name}"),
            None => format!("{at} (ResourceQuota)"),
        };
        let spec = obj.get("spec");
        if spec
            .and_then(|s| s.get("scopes"))
            .is_some_and(|v| !v.is_null())
            || spec
                .and_then(|s| s.get("scopeSelector"))
                .is_some_and(|v| !v.is_null())
        {
            notes.push(format!(
                "{at}: skipped, its scopes limit only some pods (a trace has no pod classes)"
            ));
            continue;
        }
        let Some(hard) = spec.and_then(|s| s.get("hard")).and_then(Value::as_object) else {
            continue;
        };
        for (resource, value) in hard {
            let gpu = match resource.strip_prefix("requests.") {
                Some(r) => r,
                None if resource.starts_with("limits.") => continue,
                None => resource,
            };
            if !gpu.ends_with("/gpu") {
                continue;
            }
            if gpu == resource {
                notes.push(format!(
                    "{at}: spec.hard[{resource}] read as requests.{resource} (Kubernetes takes \
                     extended resources in a quota only with the `requests.` prefix)"
                ));
            }
            let Some(cap) = whole_gpus(value) else {
                problems.push(FieldError::new(
                    format!("{at}: spec.hard[{resource}]"),
                    format!(
                        "must be a whole number of GPUs, 0 or more, such as \"32\" (got {value})"
                    ),
                ));
                continue;
            };
            match caps.get_mut(&namespace) {
                Some(c) => *c = (*c).min(cap),
                None => {
                    order.push(namespace.clone());
                    caps.insert(namespace.clone(), cap);
                }
            }
        }
    }
    finish(
        source_name,
        problems,
        !caps.is_empty(),
        "no v1 ResourceQuota with a GPU cap (spec.hard[requests.nvidia.com/gpu]) found",
        skipped,
        &mut notes,
    )?;
    Ok(NamespaceQuotas {
        queues: order
            .into_iter()
            .map(|ns| {
                let cap = caps[&ns];
                let spec = QueueSpec {
                    quotas: vec![FlavorQuota {
                        flavor: "any".into(),
                        nominal: cap,
                        borrowing_limit: None,
                        lending_limit: None,
                    }],
                    ..QueueSpec::default()
                };
                (ns, spec)
            })
            .collect(),
        not_modelled: notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_caps_read_as_queues_without_a_cohort() {
        // As the seed article writes it (without the prefix Kubernetes wants), a second
        // namespace with two quotas, a scoped quota, and other objects.
        let text = r#"
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpu-quota, namespace: team-a}
spec: {hard: {nvidia.com/gpu: "32", memory: 500Gi, cpu: "64"}}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ResourceQuota
  metadata: {name: gpus, namespace: team-b}
  spec: {hard: {requests.nvidia.com/gpu: 16}}
- apiVersion: v1
  kind: ResourceQuota
  metadata: {name: tighter, namespace: team-b}
  spec: {hard: {requests.nvidia.com/gpu: "8", limits.nvidia.com/gpu: "99"}}
- apiVersion: v1
  kind: ResourceQuota
  metadata: {name: urgent, namespace: team-a}
  spec:
    hard: {requests.nvidia.com/gpu: "4"}
    scopeSelector: {matchExpressions: [{scopeName: PriorityClass, operator: In, values: [high]}]}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-priority}
value: 1000000
"#;
        let q = read_resource_quotas(text, "rq.yaml").unwrap();
        let caps: Vec<(&str, i32, Option<&str>)> = q
            .queues
            .iter()
            .map(|(ns, s)| (ns.as_str(), s.quotas[0].nominal, s.cohort.as_deref()))
            .collect();
        assert_eq!(caps, [("team-a", 32, None), ("team-b", 8, None)]);
        assert_eq!(q.queues[0].1.quotas[0].flavor, "any");
        assert_eq!(
            q.not_modelled,
            [
                "ResourceQuota/team-a/gpu-quota: spec.hard[nvidia.com/gpu] read as \
                 requests.nvidia.com/gpu (Kubernetes takes extended resources in a quota only \
                 with the `requests.` prefix)",
                "ResourceQuota/team-a/urgent: skipped, its scopes limit only some pods (a trace \
                 has no pod classes)",
                "1 PriorityClass (scheduling.k8s.io/v1) object(s) skipped",
            ]
        );
    }

    #[test]
    fn bad_caps_and_files_without_one_are_refused() {
        let err = read_resource_quotas(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: t}\nspec: {hard: {requests.nvidia.com/gpu: 500m}}\n",
            "rq.yaml",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "rq.yaml: ResourceQuota/t/q: spec.hard[requests.nvidia.com/gpu]: must be a whole \
             number of GPUs, 0 or more, such as \"32\" (got \"500m\")"
        );
        let err = read_resource_quotas(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: t}\nspec: {hard: {cpu: 4}}\n",
            "rq.yaml",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("no v1 ResourceQuota with a GPU cap"),
            "{err}"
        );
    }
}

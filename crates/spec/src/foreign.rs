//! What the readers of other systems' objects (Kueue's, Volcano's, Kubernetes' ResourceQuotas
//! and PriorityClasses) share: the objects of a file, `List`s opened, how an object is named in
//! errors, unknown fields refused with a "did you mean", and the one way a read ends, every
//! problem in one error or the skipped objects counted into the notes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::error::{FieldError, SpecError};
use crate::parse::documents;
use crate::schema::closest;

/// The objects of a file of Kubernetes objects: its documents, with the items of a `List`
/// (what `kubectl get -o yaml` prints) in place of the list, each labelled for errors
/// (`document 2`, `document 1 items[3]`); empty documents are left out.
pub(crate) fn kubernetes_objects(text: &str, source_name: &str) -> Result<Vec<Object>, SpecError> {
    fn flatten(at: String, doc: Value, out: &mut Vec<(String, Value)>) {
        let is_list = doc
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        match doc {
            Value::Null => {}
            Value::Object(mut obj) if is_list => match obj.remove("items") {
                Some(Value::Array(items)) => {
                    for (i, item) in items.into_iter().enumerate() {
                        flatten(format!("{at} items[{i}]"), item, out);
                    }
                }
                other => {
                    if let Some(items) = other {
                        obj.insert("items".into(), items);
                    }
                    out.push((at, Value::Object(obj)));
                }
            },
            doc => out.push((at, doc)),
        }
    }
    let mut out = Vec::new();
    for (i, doc) in documents(text, source_name)?.into_iter().enumerate() {
        flatten(format!("document {}", i + 1), doc, &mut out);
    }
    Ok(out
        .into_iter()
        .map(|(at, body)| {
            let field = |f: &str| {
                body.get(f)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            Object {
                kind: field("kind"),
                api_version: field("apiVersion"),
                at,
                body,
            }
        })
        .collect())
}

/// One object of a file, with what readers pick it by.
pub(crate) struct Object {
    /// Where it is in the file, for errors: `document 2`, `document 1 items[3]`.
    pub at: String,
    /// Its `kind`, empty when it has none.
    pub kind: String,
    /// Its `apiVersion`, empty when it has none.
    pub api_version: String,
    /// The whole object.
    pub body: Value,
}

impl Object {
    /// Its `metadata.name`, empty when it has none.
    pub fn name(&self) -> &str {
        self.body
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Whether its `apiVersion` is of API `group` (`kueue.x-k8s.io`), whatever the version.
    pub fn in_group(&self, group: &str) -> bool {
        (self.api_version.strip_prefix(group)).is_some_and(|v| v.starts_with('/'))
    }

    /// Whether it is one of Ferry's own documents, which a file of another system's objects
    /// may carry beside them.
    pub fn is_ferrys(&self) -> bool {
        self.in_group(crate::meta::API_GROUP)
    }

    /// How errors name it: `Kind/name`, else where it is in the file and its kind
    /// (`document 2 (Queue)`).
    pub fn label(&self) -> String {
        match (self.kind.as_str(), self.name()) {
            ("", _) => self.at.clone(),
            (kind, "") => format!("{} ({kind})", self.at),
            (kind, name) => format!("{kind}/{name}"),
        }
    }
}

/// A problem for each of `fields` that is not one of `known`, with the closest known one as a
/// "did you mean"; `at` starts each path (`ClusterQueue/a: spec.`), `what` says whose field it
/// is not (`a Volcano Queue field`).
pub(crate) fn unknown_fields<'a>(
    at: &str,
    fields: impl IntoIterator<Item = &'a String>,
    known: &[&str],
    what: &str,
) -> Vec<FieldError> {
    fields
        .into_iter()
        .filter(|field| !known.contains(&field.as_str()))
        .map(|field| {
            let hint = closest(field, known.iter().copied())
                .map(|best| format!("; did you mean `{best}`?"))
                .unwrap_or_default();
            FieldError::new(format!("{at}{field}"), format!("not {what}{hint}"))
        })
        .collect()
}

/// Whether `text` holds Kubernetes-style objects: some document, or item of a `List`, has an
/// `apiVersion` or a `kind`. For a command that also takes a plainer format of its own (`ferry
/// up --priority-classes`: such objects, or a mapping of names to values, which are never
/// strings), told apart by what the file holds; text that does not parse holds none.
pub fn holds_kubernetes_objects(text: &str) -> bool {
    kubernetes_objects(text, "").is_ok_and(|objects| {
        objects
            .iter()
            .any(|o| !o.kind.is_empty() || !o.api_version.is_empty())
    })
}

/// Ends a read of `source_name`: `Err` with every problem (or `none_found` when nothing was
/// found and nothing was wrong), else the objects of each kind `skipped` counted into `notes`.
pub(crate) fn finish(
    source_name: &str,
    mut problems: Vec<FieldError>,
    found_any: bool,
    none_found: &str,
    skipped: BTreeMap<String, usize>,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    if !found_any && problems.is_empty() {
        problems.push(FieldError::new("", none_found));
    }
    if !problems.is_empty() {
        return Err(SpecError::Invalid {
            source_name: source_name.to_owned(),
            problems,
        });
    }
    notes.extend(
        skipped
            .into_iter()
            .map(|(what, n)| format!("{n} {what} object(s) skipped")),
    );
    Ok(())
}

/// One node of a tree of objects read from a file (Kueue's Cohorts, Volcano's Queues): its
/// name, how errors name it (`Cohort/org`), and its parent's name (`None`: a root).
pub(crate) type TreeNode<'a> = (&'a str, &'a str, Option<&'a str>);

/// Problems of a tree of `kind` objects (`Cohort`, `Queue`) read from a file: one defined twice,
/// and one that is its own ancestor, each loop reported once, at the first of its objects in the
/// file, at its `parent_field` (`spec.parentName`) with the objects of the loop and `why_and_fix`.
pub(crate) fn tree_problems(
    nodes: &[TreeNode<'_>],
    kind: &str,
    parent_field: &str,
    why_and_fix: &str,
) -> Vec<FieldError> {
    let mut problems = Vec::new();
    let mut parent_of: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for &(name, at, parent) in nodes {
        if parent_of.insert(name, parent).is_some() {
            problems.push(FieldError::new(
                format!("{at}: metadata.name"),
                format!("{kind} `{name}` is defined twice; keep one"),
            ));
        }
    }
    let mut reported = BTreeSet::new();
    for &(name, at, _) in nodes {
        let mut path = vec![name];
        while let Some(Some(p)) = parent_of.get(path[path.len() - 1]) {
            if let Some(start) = path.iter().position(|c| c == p) {
                let ring: BTreeSet<&str> = path[start..].iter().copied().collect();
                if start == 0 && reported.insert(ring) {
                    path.push(p);
                    problems.push(FieldError::new(
                        format!("{at}: {parent_field}"),
                        format!(
                            "{kind} `{name}` is its own ancestor ({}); {why_and_fix}",
                            path.join(" -> ")
                        ),
                    ));
                }
                break;
            }
            path.push(p);
        }
    }
    problems
}

/// Whose queue objects a file holds, for a caller that takes several formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueObjects {
    /// Kueue's (`kueue.x-k8s.io`): read with [`crate::read_kueue_queues`].
    Kueue,
    /// Kubernetes `v1` `ResourceQuota`s: read with [`crate::read_resource_quotas`].
    ResourceQuotas,
    /// Volcano's (`scheduling.volcano.sh`): read with [`crate::read_volcano_queues`].
    Volcano,
}

impl QueueObjects {
    /// The format of the objects in `text`, judged by their `apiVersion` and `kind` (not by
    /// words in comments): Kueue's if any object is, else ResourceQuotas if any is one, else
    /// Volcano's if any object is; `None` for anything else, text that does not parse included.
    pub fn of(text: &str) -> Option<QueueObjects> {
        QueueObjects::among(&kubernetes_objects(text, "").ok()?)
    }

    /// [`QueueObjects::of`] a file's objects already read.
    pub(crate) fn among(objects: &[Object]) -> Option<QueueObjects> {
        let in_group = |group: &str| objects.iter().any(|o| o.in_group(group));
        if in_group(crate::kueue::KUEUE_GROUP) {
            Some(QueueObjects::Kueue)
        } else if objects
            .iter()
            .any(|o| o.kind == "ResourceQuota" && o.api_version == "v1")
        {
            Some(QueueObjects::ResourceQuotas)
        } else if in_group(crate::volcano::VOLCANO_GROUP) {
            Some(QueueObjects::Volcano)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_objects_not_words() {
        let rq = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: t}\n";
        assert_eq!(QueueObjects::of(rq), Some(QueueObjects::ResourceQuotas));
        let list = r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue"}]}"#;
        assert_eq!(QueueObjects::of(list), Some(QueueObjects::Kueue));
        assert_eq!(
            QueueObjects::of("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"),
            Some(QueueObjects::Volcano)
        );
        // A Ferry Queue whose comment names other systems is a Ferry Queue.
        let ferry = "# like a ResourceQuota, or a kueue.x-k8s.io/v1beta2 ClusterQueue\n\
                     apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\n";
        assert_eq!(QueueObjects::of(ferry), None);
        assert_eq!(QueueObjects::of("{not yaml"), None);
    }

    #[test]
    fn objects_are_told_from_a_mapping_of_names() {
        let list = r#"{"apiVersion": "v1", "kind": "List", "items": [{"kind": "PriorityClass"}]}"#;
        assert!(holds_kubernetes_objects(list));
        assert!(holds_kubernetes_objects(
            "production: 1000\n---\napiVersion: scheduling.k8s.io/v1\n"
        ));
        assert!(!holds_kubernetes_objects(
            "production: 1000\novernight: {value: 2000, preempting: false}\n"
        ));
        // A class named `kind` has a number, not a kind.
        assert!(!holds_kubernetes_objects("kind: 5\n"));
        assert!(!holds_kubernetes_objects(""));
        assert!(!holds_kubernetes_objects("{not yaml"));
    }

    #[test]
    fn unknown_fields_are_named_with_the_closest_known_one() {
        let given: Vec<String> = ["value", "valeu", "zzz"].map(String::from).to_vec();
        let found: Vec<String> = unknown_fields("PriorityClass/a: ", &given, &["value"], "a field")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "PriorityClass/a: valeu: not a field; did you mean `value`?",
                "PriorityClass/a: zzz: not a field",
            ]
        );
    }
}

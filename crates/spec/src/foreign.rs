//! What the readers of other systems' queue objects (Kueue's, Volcano's, Kubernetes'
//! ResourceQuotas) share: the objects of a file, `List`s opened, and the one way they end,
//! every problem in one error or the skipped objects counted into the notes.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{FieldError, SpecError};
use crate::parse::documents;

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
        let objects = kubernetes_objects(text, "").ok()?;
        let in_group = |group: &str| {
            objects.iter().any(|o| {
                o.api_version
                    .strip_prefix(group)
                    .is_some_and(|v| v.starts_with('/'))
            })
        };
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
}

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

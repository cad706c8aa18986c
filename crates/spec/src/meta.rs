//! Object metadata shared by every resource, Kubernetes-style.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// The only API version this release understands.
pub const API_VERSION: &str = "ferry.dev/v1alpha1";

/// The API group of Ferry's documents, `API_VERSION`'s first part.
pub const API_GROUP: &str = "ferry.dev";

/// Name, namespace and labels of a resource; `uid` and `creationTimestamp` are set by
/// the control plane.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMeta {
    /// Unique within the namespace and kind: lowercase letters, digits and `-`, at most 63.
    pub name: String,
    /// Team or project the resource belongs to; `default` when omitted.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Free-form key/value labels for selection.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form key/value annotations, not used for selection.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Identifier assigned by the control plane when the resource is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// RFC 3339 time the control plane stored the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
}

fn default_namespace() -> String {
    "default".to_owned()
}

/// Checks a name against the DNS-1123 label rules that Kubernetes also enforces, so
/// that every Ferry name is usable as a pod, service and directory name.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty; use lowercase letters, digits and '-'".into());
    }
    if name.len() > 63 {
        return Err(format!(
            "must be at most 63 characters (got {}); shorten it",
            name.len()
        ));
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let ok_ends = !name.starts_with('-') && !name.ends_with('-');
    if !ok_chars || !ok_ends {
        return Err(format!(
            "must be lowercase letters, digits and '-', starting and ending with a letter or digit (got {name:?})"
        ));
    }
    Ok(())
}

/// Longest name part of a label key, and longest label value (Kubernetes' limit).
const MAX_LABEL_NAME: usize = 63;
/// Longest DNS-subdomain prefix of a label key.
const MAX_LABEL_PREFIX: usize = 253;

/// Checks a label key as Kubernetes does (an optional DNS-subdomain prefix and `/`, then a
/// name), so labels survive the trip to Kubernetes objects and selectors can name them.
pub(crate) fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if name.contains('/') {
            return Err(format!(
                "may hold one '/', between a prefix and a name (got {key:?}); write prefix/name"
            ));
        }
        if !is_dns_subdomain(prefix) {
            return Err(format!(
                "its prefix before '/' must be a DNS subdomain: lowercase letters, digits, '-' and \
                 '.', at most {MAX_LABEL_PREFIX} characters, such as example.com (got {prefix:?})"
            ));
        }
    }
    if name.is_empty() {
        return Err(format!(
            "needs a name{}; use letters, digits, '-', '_' and '.'",
            if prefix.is_some() { " after '/'" } else { "" }
        ));
    }
    check_label_word(name).map_err(|why| format!("its name {why}"))
}

/// Checks a label value as Kubernetes does: empty, or at most 63 letters, digits, `-`, `_`
/// and `.` that start and end with a letter or digit.
pub(crate) fn validate_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_label_word(value)
}

/// The rule label names and values share.
fn check_label_word(word: &str) -> Result<(), String> {
    if word.len() > MAX_LABEL_NAME {
        return Err(format!(
            "must be at most {MAX_LABEL_NAME} characters (got {}); shorten it",
            word.len()
        ));
    }
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = word.starts_with(|c: char| c.is_ascii_alphanumeric())
        && word.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ends || !word.chars().all(inner) {
        return Err(format!(
            "must be letters, digits, '-', '_' and '.', starting and ending with a letter or \
             digit (got {word:?})"
        ));
    }
    Ok(())
}

/// Whether `text` is a DNS-1123 subdomain: dot-separated lowercase labels.
fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_LABEL_PREFIX
        && text.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

impl ObjectMeta {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        if let Err(msg) = validate_name(&self.name) {
            problems.push("metadata.name", msg);
        }
        if let Err(msg) = validate_name(&self.namespace) {
            problems.push("metadata.namespace", msg);
        }
        for (key, value) in &self.labels {
            let path = format!("metadata.labels[{key:?}]");
            if let Err(msg) = validate_label_key(key) {
                problems.push(&path, format!("invalid key: {msg}"));
            }
            if let Err(msg) = validate_label_value(value) {
                problems.push(&path, format!("invalid value {value:?}: {msg}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dns_labels() {
        assert!(validate_name("qwen-sft-2").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("Qwen").is_err());
        assert!(validate_name("-a").is_err());
        assert!(validate_name("a_b").is_err());
        assert!(validate_name(&"a".repeat(64)).is_err());
        assert!(validate_name(&"a".repeat(63)).is_ok());
    }

    #[test]
    fn label_keys_follow_kubernetes_qualified_names() {
        for ok in [
            "team",
            "Team_2",
            "a.b-c",
            "x",
            "ferry.dev/sweep",
            "a-1.example.com/lr",
        ] {
            assert_eq!(validate_label_key(ok), Ok(()), "{ok}");
        }
        assert!(validate_label_key(&"k".repeat(63)).is_ok());
        let cases = [
            ("", "needs a name"),
            ("bad key", "its name must be letters, digits"),
            ("-team", "starting and ending with a letter or digit"),
            ("team.", "starting and ending with a letter or digit"),
            (
                "Example.com/x",
                "its prefix before '/' must be a DNS subdomain",
            ),
            ("a..b/x", "its prefix before '/' must be a DNS subdomain"),
            ("/x", "its prefix before '/' must be a DNS subdomain"),
            ("a.com/", "needs a name after '/'"),
            ("a/b/c", "may hold one '/'"),
        ];
        for (key, expect) in cases {
            let err = validate_label_key(key).unwrap_err();
            assert!(err.contains(expect), "{key:?}: {err}");
        }
        let long = "k".repeat(64);
        assert!(
            validate_label_key(&long)
                .unwrap_err()
                .contains("at most 63 characters (got 64)")
        );
        let long_prefix = format!("{}/x", "a".repeat(254));
        assert!(validate_label_key(&long_prefix).is_err());
    }

    #[test]
    fn label_values_may_be_empty() {
        assert_eq!(validate_label_value(""), Ok(()));
        assert_eq!(validate_label_value("v1.2_rc-3"), Ok(()));
        assert!(validate_label_value("a b").is_err());
        assert!(validate_label_value("a/b").is_err());
        assert!(validate_label_value("_a").is_err());
        assert!(validate_label_value(&"v".repeat(64)).is_err());
    }
}

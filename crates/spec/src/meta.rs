//! Object metadata shared by every resource, Kubernetes-style.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// The only API version this release understands.
pub const API_VERSION: &str = "ferry.dev/v1alpha1";

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

impl ObjectMeta {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        if let Err(msg) = validate_name(&self.name) {
            problems.push("metadata.name", msg);
        }
        if let Err(msg) = validate_name(&self.namespace) {
            problems.push("metadata.namespace", msg);
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
}

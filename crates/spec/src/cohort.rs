//! `Cohort`: a node of a cohort tree (Kueue's hierarchical cohorts). Queues name a cohort in
//! `spec.cohort` and lend each other unused quota there; a `Cohort` document gives such a cohort
//! GPUs of its own, which its queues and child cohorts share, and a parent it borrows from and
//! lends to within limits. A cohort no document defines is a root with no GPUs of its own.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::validate::Problems;

/// A cohort of a cohort tree, with its own GPUs and its place in the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cohort {
    /// Always `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Cohort`.
    pub kind: String,
    /// The cohort's name is what Queues put in `spec.cohort` and child cohorts in `spec.parent`.
    pub metadata: ObjectMeta,
    /// Its parent and its own GPUs.
    #[serde(default)]
    pub spec: CohortSpec,
}

/// Parent, quotas and fair-sharing weight of a [`Cohort`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CohortSpec {
    /// The cohort it borrows from and lends to; a root of its tree when omitted. A parent no
    /// `Cohort` defines is a root with no GPUs of its own (as in Kueue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Its own GPUs per flavor, and limits on what its subtree borrows from and lends to its
    /// parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<CohortQuota>,
    /// Its weight against its siblings (the queues and cohorts under the same parent) when they
    /// share GPUs no quota covers (Kueue's `fairSharing.weight`): fair sharing compares
    /// subtrees, not teams, so a department of many teams gets no more of its parent's spare
    /// GPUs than one of few unless weighted so. A positive number; 1 by default.
    #[serde(default = "crate::queue::one")]
    pub weight: f64,
}

/// A cohort with no `spec:` is a root with no GPUs of its own and weight 1 (as serde fills it).
impl Default for CohortSpec {
    fn default() -> Self {
        Self {
            parent: None,
            quotas: Vec::new(),
            weight: crate::queue::one(),
        }
    }
}

/// One GPU flavor's quota of a [`Cohort`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CohortQuota {
    /// GPU flavor, e.g. `H100-80GB`; `any` matches every flavor not named.
    pub flavor: String,
    /// GPUs of the cohort's own, shared by its queues and child cohorts before they borrow
    /// from its parent.
    pub nominal: i32,
    /// Most GPUs its subtree may borrow from its parent beyond the subtree's own; unlimited
    /// when omitted. Needs `spec.parent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<i32>,
    /// Most of its subtree's GPUs it lends to its parent; all when omitted. It may exceed
    /// `nominal`: the subtree's queues' and child cohorts' lent GPUs count too. Needs
    /// `spec.parent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<i32>,
}

impl Cohort {
    pub(crate) fn validate(&self, p: &mut Problems) {
        self.metadata.validate(p);
        self.spec.validate(&self.metadata.name, p);
    }
}

impl CohortSpec {
    /// The rules of a cohort named `name`: a valid parent name that is not its own, a positive
    /// weight (as a Queue's), each flavor once, counts of 0 or more, and limits only under a
    /// parent (a root has none to borrow from or lend to; Kueue refuses them there too, so a
    /// Cohort Ferry admits renders to one Kueue admits).
    pub(crate) fn validate(&self, name: &str, p: &mut Problems) {
        if let Some(parent) = &self.parent {
            if let Err(msg) = crate::meta::validate_name(parent) {
                p.push("spec.parent", msg);
            } else if parent == name {
                p.push(
                    "spec.parent",
                    format!(
                        "a cohort cannot be its own parent (got {parent:?}); name another \
                         cohort, or remove spec.parent to make it a root"
                    ),
                );
            }
        }
        p.positive_weight("spec.weight", self.weight);
        let mut seen = std::collections::BTreeSet::new();
        for (i, q) in self.quotas.iter().enumerate() {
            let limits = [
                ("borrowingLimit", q.borrowing_limit),
                ("lendingLimit", q.lending_limit),
            ];
            let at = p.quota_row(i, &mut seen, &q.flavor, q.nominal, limits);
            for (field, limit) in limits {
                let Some(limit) = limit else { continue };
                if self.parent.is_none() {
                    p.push(
                        format!("{at}.{field}"),
                        format!(
                            "is only allowed on a cohort with a parent (got {limit} on a root); \
                             set spec.parent or remove {field}"
                        ),
                    );
                }
            }
        }
    }
}

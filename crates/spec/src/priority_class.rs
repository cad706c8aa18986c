//! `PriorityClass`: a named priority jobs give in `spec.priority`, applied like any other
//! resource so a platform team can add or re-rank classes without restarting the control
//! plane (Kubernetes' `scheduling.k8s.io/v1` PriorityClass, with Ferry's envelope).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::validate::Problems;

/// The largest value a user-defined class may have, as in Kubernetes: higher values are for
/// the cluster's own system classes.
pub const MAX_PRIORITY_VALUE: i32 = 1_000_000_000;

/// A named priority: higher values go first in their queue and may preempt lower ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityClass {
    /// Always `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Always `PriorityClass`.
    pub kind: String,
    /// The class's name is what jobs put in `spec.priority`.
    pub metadata: ObjectMeta,
    /// Its value and whether it preempts.
    pub spec: PriorityClassSpec,
}

/// Value and preemption policy of a [`PriorityClass`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityClassSpec {
    /// Higher runs first; `low` is -100, `normal` 0 and `high` 100 unless redefined.
    pub value: i32,
    /// Whether its jobs may preempt lower-priority work of their queue.
    #[serde(default)]
    pub preemption_policy: PreemptionPolicy,
    /// What the class is for, shown by `ferry get priorityclasses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Kubernetes' `preemptionPolicy` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PreemptionPolicy {
    /// Its jobs preempt lower-priority work of their queue when they cannot start otherwise.
    #[default]
    PreemptLowerPriority,
    /// Its jobs only go first; they never preempt.
    Never,
}

impl PriorityClass {
    pub(crate) fn validate(&self, p: &mut Problems) {
        self.metadata.validate(p);
        if let Some(problem) = reserved(&self.metadata.name) {
            p.push("metadata.name", problem);
        }
        if let Some(problem) = out_of_range(i128::from(self.spec.value)) {
            p.push("spec.value", problem);
        }
    }

    /// Whether its jobs may preempt lower-priority work.
    pub fn preempting(&self) -> bool {
        self.spec.preemption_policy == PreemptionPolicy::PreemptLowerPriority
    }
}

/// What is wrong with `name` as a user-defined class's, if anything: Ferry's documents and the
/// classes of other systems read for `ferry up` leave `system-` names to the cluster.
pub(crate) fn reserved(name: &str) -> Option<String> {
    name.starts_with("system-").then(|| {
        format!(
            "names starting with `system-` are reserved for the cluster's own classes (got \
             {name:?}); choose another name"
        )
    })
}

/// What is wrong with `value` as a user-defined class's, if anything: Ferry's documents and the
/// classes of other systems read for `ferry up` are held to the same range.
pub(crate) fn out_of_range(value: i128) -> Option<String> {
    let max = i128::from(MAX_PRIORITY_VALUE);
    (!(-max..=max).contains(&value)).then(|| {
        format!(
            "must be between -{max} and {max} (got {value}); larger values are for system classes"
        )
    })
}

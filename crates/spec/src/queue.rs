//! `Queue`: a team's share of the cluster. The scheduler gives it its meaning.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::validate::Problems;

/// A team queue with GPU quotas per flavor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Queue {
    /// Always `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Queue`.
    pub kind: String,
    /// The queue's name is what jobs put in `spec.queue`.
    pub metadata: ObjectMeta,
    /// Quotas and sharing rules.
    #[serde(default)]
    pub spec: QueueSpec,
}

/// Quotas and sharing rules of a [`Queue`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueSpec {
    /// Queues in one cohort lend each other unused quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Quota per GPU flavor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<FlavorQuota>,
    /// Share of contended capacity relative to other queues.
    #[serde(default = "one")]
    pub weight: f64,
    /// Whether the queue admits work (Kueue's ClusterQueue `stopPolicy`): `None` (default),
    /// `Hold` (no new admissions; running jobs keep running) or `HoldAndDrain` (running jobs
    /// are also preempted, and resume from their checkpoint once the queue is released).
    #[serde(default, skip_serializing_if = "StopPolicy::is_none")]
    pub stop_policy: StopPolicy,
    /// What the queue's waiting jobs may preempt to start (Kueue's ClusterQueue `preemption`):
    /// by default lower priorities within the queue and any work that borrows its lent quota.
    #[serde(default, skip_serializing_if = "Preemption::is_default")]
    pub preemption: Preemption,
}

/// What a queue's waiting jobs may preempt (Kueue's ClusterQueue `preemption`, its values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Preemption {
    /// Which of the queue's own running jobs: `LowerPriority` (default; the job's priority
    /// class must preempt), `LowerOrNewerEqualPriority` (also its own priority's jobs created
    /// after it) or `Never`. Kueue calls it `withinClusterQueue`.
    #[serde(default)]
    pub within_queue: WithinQueue,
    /// Which jobs of other queues in its cohort that borrow its lent quota: `Any` (default; of
    /// any priority), `LowerPriority` or `Never` (what it lent comes back as they finish).
    #[serde(default)]
    pub reclaim_within_cohort: ReclaimWithinCohort,
    /// Whether a job that must borrow to start may preempt other cohort members' borrowing
    /// jobs of a lower priority (Kueue's `borrowWithinCohort`); omitted: `policy: Never`.
    #[serde(default, skip_serializing_if = "BorrowWithinCohort::is_never")]
    pub borrow_within_cohort: BorrowWithinCohort,
}

/// Kueue's ClusterQueue `preemption.borrowWithinCohort`, in Kueue's shape, so a Queue reads
/// like the ClusterQueue it renders to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BorrowWithinCohort {
    /// `Never` (default; a borrowing job preempts no one in the cohort) or `LowerPriority`
    /// (it may preempt other queues' borrowing jobs of a lower priority).
    #[serde(default)]
    pub policy: BorrowPolicy,
    /// With `LowerPriority`: only jobs whose priority value is at most this may be preempted;
    /// any lower priority when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

impl BorrowWithinCohort {
    /// `policy: Never` with no threshold: Kueue's default, left out when printed.
    pub fn is_never(&self) -> bool {
        *self == BorrowWithinCohort::default()
    }
}

/// Kueue's `borrowWithinCohort.policy` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BorrowPolicy {
    /// A job that must borrow waits for free quota.
    #[default]
    Never,
    /// A job that must borrow may preempt lower-priority borrowing jobs of other queues.
    LowerPriority,
}

impl Preemption {
    /// Whether every field has its default (left out when printed).
    pub fn is_default(&self) -> bool {
        *self == Preemption::default()
    }

    /// `borrowWithinCohort`'s rules: LowerPriority needs reclaiming (Kueue's CRD refuses it
    /// otherwise, so a Queue Ferry admits renders to a ClusterQueue Kueue admits), a threshold
    /// needs LowerPriority (it does nothing else) and the class values' range.
    fn validate(&self, p: &mut Problems) {
        let at = "spec.preemption.borrowWithinCohort";
        let b = self.borrow_within_cohort;
        if let Some(t) = b.max_priority_threshold {
            if b.policy == BorrowPolicy::Never {
                p.push(
                    format!("{at}.maxPriorityThreshold"),
                    format!(
                        "is only used with policy LowerPriority (got {t} with policy Never); \
                         set {at}.policy to LowerPriority or remove the threshold"
                    ),
                );
            }
            if let Some(msg) = crate::priority_class::out_of_range(i128::from(t)) {
                p.push(format!("{at}.maxPriorityThreshold"), msg);
            }
        }
        if b.policy == BorrowPolicy::LowerPriority
            && self.reclaim_within_cohort == ReclaimWithinCohort::Never
        {
            p.push(
                format!("{at}.policy"),
                "LowerPriority needs spec.preemption.reclaimWithinCohort to preempt in the \
                 cohort at all (Kueue refuses it with Never); set reclaimWithinCohort to Any or \
                 LowerPriority, or borrowWithinCohort.policy to Never",
            );
        }
    }
}

/// Kueue's `withinClusterQueue` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WithinQueue {
    /// Lower-priority jobs of the queue.
    #[default]
    LowerPriority,
    /// Lower-priority jobs, and jobs of its own priority created after it.
    LowerOrNewerEqualPriority,
    /// None: the queue's jobs wait their turn.
    Never,
}

/// Kueue's `reclaimWithinCohort` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReclaimWithinCohort {
    /// Borrowing jobs of any priority.
    #[default]
    Any,
    /// Borrowing jobs of a lower priority.
    LowerPriority,
    /// None: lent quota comes back as the borrowers finish.
    Never,
}

/// Kueue's ClusterQueue `stopPolicy` values: whether a queue admits work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StopPolicy {
    /// The queue admits work.
    #[default]
    None,
    /// No new admissions; running jobs keep running.
    Hold,
    /// No new admissions, and running jobs are preempted (gracefully, to a checkpoint) and
    /// wait in the queue until it is released.
    HoldAndDrain,
}

impl StopPolicy {
    /// `None`: the queue admits work.
    pub fn is_none(&self) -> bool {
        *self == StopPolicy::None
    }
}

/// The default fair-sharing weight of a Queue and of a Cohort.
pub(crate) fn one() -> f64 {
    1.0
}

/// A queue with no `spec:` has no quota and the default weight 1 (as serde fills it).
impl Default for QueueSpec {
    fn default() -> Self {
        Self {
            cohort: None,
            quotas: Vec::new(),
            weight: one(),
            stop_policy: StopPolicy::None,
            preemption: Preemption::default(),
        }
    }
}

/// Quota of one GPU flavor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlavorQuota {
    /// GPU flavor, e.g. `H100-80GB`; `any` matches every flavor.
    pub flavor: String,
    /// GPUs guaranteed to the queue.
    pub nominal: i32,
    /// Extra GPUs it may borrow from its cohort; unlimited when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<i32>,
    /// GPUs of its nominal quota it may lend; all when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<i32>,
}

impl Queue {
    pub(crate) fn validate(&self, p: &mut Problems) {
        self.metadata.validate(p);
        if let Some(c) = &self.spec.cohort
            && let Err(msg) = crate::meta::validate_name(c)
        {
            p.push("spec.cohort", msg);
        }
        p.positive_weight("spec.weight", self.spec.weight);
        let mut seen = std::collections::BTreeSet::new();
        for (i, q) in self.spec.quotas.iter().enumerate() {
            let at = p.quota_row(
                i,
                &mut seen,
                &q.flavor,
                q.nominal,
                [
                    ("borrowingLimit", q.borrowing_limit),
                    ("lendingLimit", q.lending_limit),
                ],
            );
            if let Some(l) = q.lending_limit
                && l > q.nominal
            {
                p.push(
                    format!("{at}.lendingLimit"),
                    format!("must not exceed nominal ({}) (got {l})", q.nominal),
                );
            }
        }
        self.spec.preemption.validate(p);
    }
}

//! A Queue's policies as the scheduler takes them (feature `sched`): the server and the
//! Kubernetes operator both turn Queue documents into scheduler queues, and the values are the
//! same on both sides, so the mapping lives once, beside the types it reads.

use crate::queue::{Preemption, ReclaimWithinCohort, StopPolicy, WithinQueue};

impl From<StopPolicy> for ferry_sched::StopPolicy {
    fn from(policy: StopPolicy) -> Self {
        match policy {
            StopPolicy::None => ferry_sched::StopPolicy::None,
            StopPolicy::Hold => ferry_sched::StopPolicy::Hold,
            StopPolicy::HoldAndDrain => ferry_sched::StopPolicy::HoldAndDrain,
        }
    }
}

impl From<Preemption> for ferry_sched::PreemptionPolicy {
    fn from(p: Preemption) -> Self {
        ferry_sched::PreemptionPolicy {
            within_queue: match p.within_queue {
                WithinQueue::LowerPriority => ferry_sched::WithinQueue::LowerPriority,
                WithinQueue::LowerOrNewerEqualPriority => {
                    ferry_sched::WithinQueue::LowerOrNewerEqualPriority
                }
                WithinQueue::Never => ferry_sched::WithinQueue::Never,
            },
            reclaim_within_cohort: match p.reclaim_within_cohort {
                ReclaimWithinCohort::Any => ferry_sched::ReclaimWithinCohort::Any,
                ReclaimWithinCohort::LowerPriority => {
                    ferry_sched::ReclaimWithinCohort::LowerPriority
                }
                ReclaimWithinCohort::Never => ferry_sched::ReclaimWithinCohort::Never,
            },
        }
    }
}

//! A Queue's policies as the scheduler takes them (feature `sched`): the server and the
//! Kubernetes operator both turn Queue documents into scheduler queues, and the values are the
//! same on both sides, so the mapping lives once, beside the types it reads.

use crate::queue::{BorrowPolicy, Preemption, ReclaimWithinCohort, StopPolicy, WithinQueue};

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
            borrow_within_cohort: match p.borrow_within_cohort.policy {
                BorrowPolicy::Never => None,
                BorrowPolicy::LowerPriority => Some(ferry_sched::BorrowWithinCohort {
                    max_priority_threshold: p.borrow_within_cohort.max_priority_threshold,
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::queue::{BorrowPolicy, BorrowWithinCohort, Preemption};

    /// `borrowWithinCohort: LowerPriority` is the scheduler's `Some`, its threshold kept;
    /// `Never` is `None`.
    #[test]
    fn borrow_within_cohort_reaches_the_scheduler() {
        let with = |policy, max_priority_threshold| Preemption {
            borrow_within_cohort: BorrowWithinCohort {
                policy,
                max_priority_threshold,
            },
            ..Preemption::default()
        };
        let sched = ferry_sched::PreemptionPolicy::from(with(BorrowPolicy::LowerPriority, Some(7)));
        assert_eq!(
            sched.borrow_within_cohort,
            Some(ferry_sched::BorrowWithinCohort {
                max_priority_threshold: Some(7)
            })
        );
        let sched = ferry_sched::PreemptionPolicy::from(with(BorrowPolicy::LowerPriority, None));
        assert_eq!(
            sched.borrow_within_cohort,
            Some(ferry_sched::BorrowWithinCohort::default())
        );
        let sched = ferry_sched::PreemptionPolicy::from(Preemption::default());
        assert_eq!(sched, ferry_sched::PreemptionPolicy::default());
    }
}

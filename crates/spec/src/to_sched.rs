//! A Queue's quotas and policies and a Cohort as the scheduler takes them (feature `sched`): the server,
//! the Kubernetes operator and `ferry sim` all turn these documents into the scheduler's
//! configuration, and the values are the same on every side, so the mapping lives once, beside
//! the types it reads.

use crate::cohort::{Cohort, CohortSpec};
use crate::queue::{
    BorrowPolicy, FlavorQuota, Preemption, ReclaimWithinCohort, StopPolicy, WithinQueue,
};

/// A quota of `nominal` GPUs of `flavor` with its limits, as the scheduler takes it (`any` in
/// any case is the scheduler's `any`; counts below 0, which validation refuses, as 0): a
/// Queue's and a Cohort's quotas alike.
fn sched_quota(
    flavor: &str,
    nominal: i32,
    borrowing_limit: Option<i32>,
    lending_limit: Option<i32>,
) -> ferry_sched::FlavorQuota {
    let count = |v: i32| u32::try_from(v).unwrap_or(0);
    ferry_sched::FlavorQuota {
        flavor: if flavor.eq_ignore_ascii_case(ferry_sched::ANY_FLAVOR) {
            ferry_sched::ANY_FLAVOR.to_owned()
        } else {
            flavor.to_owned()
        },
        nominal: count(nominal),
        borrowing_limit: borrowing_limit.map(count),
        lending_limit: lending_limit.map(count),
    }
}

impl From<&FlavorQuota> for ferry_sched::FlavorQuota {
    fn from(q: &FlavorQuota) -> Self {
        sched_quota(&q.flavor, q.nominal, q.borrowing_limit, q.lending_limit)
    }
}

impl CohortSpec {
    /// The scheduler's cohort named `name` with this parent, these quotas and this weight.
    pub fn to_sched(&self, name: &str) -> ferry_sched::CohortSpec {
        ferry_sched::CohortSpec {
            name: name.to_owned(),
            parent: self.parent.clone(),
            quotas: self
                .quotas
                .iter()
                .map(|q| sched_quota(&q.flavor, q.nominal, q.borrowing_limit, q.lending_limit))
                .collect(),
            fair_share_weight: self.weight,
        }
    }
}

impl From<&Cohort> for ferry_sched::CohortSpec {
    fn from(c: &Cohort) -> Self {
        c.spec.to_sched(&c.metadata.name)
    }
}

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
    use crate::cohort::{CohortQuota, CohortSpec};
    use crate::queue::{BorrowPolicy, BorrowWithinCohort, Preemption};

    /// A Cohort document becomes the scheduler's cohort of its name: parent, quotas, limits and
    /// weight kept, `ANY` read as `any`; no weight is weight 1.
    #[test]
    fn a_cohort_reaches_the_scheduler() {
        let docs = crate::parse_documents(
            "apiVersion: ferry.dev/v1alpha1\nkind: Cohort\nmetadata: {name: nlp}\n\
             spec: {parent: org, weight: 0.5, quotas: [{flavor: ANY, nominal: 4, borrowingLimit: 2, \
             lendingLimit: 6}, {flavor: h100, nominal: 8}]}\n",
            "c.yaml",
        )
        .unwrap();
        let crate::Resource::Cohort(c) = &docs[0] else {
            panic!("not a Cohort: {docs:?}")
        };
        let sched = ferry_sched::CohortSpec::from(c);
        assert_eq!(
            sched,
            ferry_sched::CohortSpec {
                name: "nlp".into(),
                parent: Some("org".into()),
                quotas: vec![
                    ferry_sched::FlavorQuota {
                        flavor: "any".into(),
                        nominal: 4,
                        borrowing_limit: Some(2),
                        lending_limit: Some(6),
                    },
                    ferry_sched::FlavorQuota {
                        flavor: "h100".into(),
                        nominal: 8,
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                ],
                fair_share_weight: 0.5,
            }
        );
        let root = CohortSpec {
            quotas: vec![CohortQuota {
                flavor: "a100".into(),
                nominal: 3,
                borrowing_limit: None,
                lending_limit: None,
            }],
            ..CohortSpec::default()
        };
        assert_eq!(root.to_sched("org").parent, None);
        assert_eq!(root.to_sched("org").quotas[0].nominal, 3);
        assert_eq!(root.to_sched("org").fair_share_weight, 1.0);
    }

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

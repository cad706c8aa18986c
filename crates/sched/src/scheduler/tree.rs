//! Cohort trees (Kueue's hierarchical cohorts): each cohort pools what its queues and child
//! cohorts lend, plus GPUs of its own, and takes from its parent's pool only what its members
//! use beyond that; a flat cohort is a root with no GPUs of its own.

use super::Scheduler;

/// A cohort of a tree (a lone flat cohort is a root with no GPUs of its own), per flavor.
#[derive(Debug, Clone)]
pub(super) struct Cohort {
    /// Its name, for messages.
    pub(super) name: String,
    /// The cohort it borrows from and lends to (`None`: a root).
    pub(super) parent: Option<u32>,
    /// Cohorts above it.
    pub(super) depth: u32,
    /// For a root, every queue of its tree; empty below a root.
    pub(super) members: Vec<u32>,
    /// GPUs its queues and child cohorts share: its own, plus what each of them lends.
    pub(super) cap: Vec<u64>,
    /// Of `cap`, what is pooled in its parent's (all of it without a lending limit).
    pub(super) lend: Vec<u64>,
    /// Most it may take from its parent beyond `cap` (`None`: no limit but the parent's).
    pub(super) borrow: Vec<Option<u64>>,
    /// GPUs its queues and child cohorts use beyond what each keeps to itself.
    pub(super) used: Vec<u64>,
    /// Its fair-share weight against its siblings (`CohortSpec::fair_share_weight`).
    pub(super) weight: f64,
    /// Nominal GPUs of its subtree: its own, its child cohorts' and its queues'.
    pub(super) nominal: Vec<u64>,
    /// GPUs its subtree's queues use.
    pub(super) usage: Vec<u64>,
}

impl Cohort {
    /// What `used` GPUs of flavor `f` here take from the parent's pool.
    pub(super) fn pooled(&self, f: usize, used: u64) -> u64 {
        used.saturating_sub(self.cap[f] - self.lend[f])
    }

    /// Most GPUs of flavor `f` its queues and child cohorts may use beyond what they keep,
    /// before the parent's own limit.
    fn limit(&self, f: usize) -> u64 {
        match (self.parent, self.borrow[f]) {
            (None, _) => self.cap[f],
            (Some(_), Some(b)) => self.cap[f].saturating_add(b),
            (Some(_), None) => u64::MAX,
        }
    }
}

/// Most GPUs of flavor `f` cohort `c`'s queues and child cohorts could use beyond what they
/// keep, with the rest of its tree idle.
pub(super) fn room(cohorts: &[Cohort], c: u32, f: usize) -> u64 {
    let co = &cohorts[c as usize];
    match co.parent {
        None => co.cap[f],
        Some(p) => co
            .limit(f)
            .min(co.cap[f] - co.lend[f] + room(cohorts, p, f)),
    }
}

impl Scheduler {
    /// Records that a queue pools `new` GPUs of flavor `f` in cohort `c` instead of `old`,
    /// up the tree while what each cohort takes from its parent's pool changes.
    pub(super) fn pool_change(&mut self, f: usize, mut c: u32, mut old: u64, mut new: u64) {
        while old != new {
            let co = &mut self.cohorts[c as usize];
            let before = co.used[f];
            co.used[f] = before + new - old;
            let Some(p) = co.parent else { break };
            (old, new, c) = (co.pooled(f, before), co.pooled(f, co.used[f]), p);
        }
    }

    /// The first cohort from `c` up whose pool cannot take a change of what a queue pools in
    /// `c` from `old` to `new` GPUs of flavor `f`: the cohort, what its members pool in it now,
    /// and its limit (`None`: every cohort up to the root can take it).
    pub(super) fn binding_cohort(
        &self,
        f: usize,
        mut c: u32,
        mut old: u64,
        mut new: u64,
    ) -> Option<(u32, u64, u64)> {
        while new != old {
            let co = &self.cohorts[c as usize];
            let before = co.used[f];
            let after = before + new - old;
            if new > old && after > co.limit(f) {
                return Some((c, before, co.limit(f)));
            }
            let Some(p) = co.parent else { break };
            (old, new, c) = (co.pooled(f, before), co.pooled(f, after), p);
        }
        None
    }

    /// `binding_cohort` for changes in several cohorts at once (whether all of them fit): each applied bottom-up, so a
    /// parent sees all of its children's.
    pub(super) fn changes_fit(&self, f: usize, mut changes: Vec<(u32, i64)>) -> bool {
        while let Some(i) =
            (0..changes.len()).max_by_key(|&i| self.cohorts[changes[i].0 as usize].depth)
        {
            let (c, d) = changes.swap_remove(i);
            let co = &self.cohorts[c as usize];
            let before = co.used[f];
            let after = before
                .checked_add_signed(d)
                .expect("a cohort's pooled usage stays non-negative");
            if d > 0 && after > co.limit(f) {
                return false;
            }
            if let Some(p) = co.parent {
                let up = co.pooled(f, after) as i64 - co.pooled(f, before) as i64;
                Self::add_change(&mut changes, p, up);
            }
        }
        true
    }

    pub(super) fn add_change(changes: &mut Vec<(u32, i64)>, c: u32, d: i64) {
        if d == 0 {
            return;
        }
        match changes.iter_mut().find(|(x, _)| *x == c) {
            Some((_, e)) => *e += d,
            None => changes.push((c, d)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{
        Cluster, CohortSpec, FlavorQuota, Options, PreemptReason, PriorityClass, QueueSpec,
        Workload,
    };
    use crate::error::SchedError;
    use crate::scheduler::{Decision, Scheduler};

    fn queue(name: &str, cohort: &str, nominal: u32) -> QueueSpec {
        QueueSpec::any_flavor(name, Some(cohort), nominal)
    }

    fn cohort(
        name: &str,
        parent: Option<&str>,
        quotas: &[(u32, Option<u32>, Option<u32>)],
    ) -> CohortSpec {
        CohortSpec {
            quotas: quotas
                .iter()
                .map(|&(nominal, borrowing_limit, lending_limit)| FlavorQuota {
                    borrowing_limit,
                    lending_limit,
                    ..FlavorQuota::unlimited("any", nominal)
                })
                .collect(),
            ..CohortSpec::under(name, parent)
        }
    }

    fn build(
        gpus: u32,
        queues: Vec<QueueSpec>,
        cohorts: &[CohortSpec],
    ) -> Result<Scheduler, SchedError> {
        Scheduler::with_cohorts(
            Cluster::uniform(gpus as usize / 4, 4, "gpu"),
            queues,
            cohorts,
            PriorityClass::standard(),
            Options::default(),
        )
    }

    /// Most GPUs queue `q` may use with the rest of the tree idle.
    fn most(s: &Scheduler, q: &str) -> u64 {
        s.quota_limits(q, "gpu").expect("queue has a quota").1
    }

    fn job(id: &str, q: &str, pods: u32, t: u64) -> Workload {
        Workload {
            pods,
            ..Workload::single(id, q, None, 4, t)
        }
    }

    fn admitted(d: &[Decision]) -> Vec<&str> {
        d.iter()
            .filter_map(|x| match x {
                Decision::Admit { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Org `root` holds departments `a` (queues a1, a2, 4 GPUs each, borrowing at most 4 from
    /// the root) and `b` (queue b1 of 16 GPUs, lending at most 8 to the root), on 24 GPUs.
    fn org(gpus: u32) -> Scheduler {
        build(
            gpus,
            vec![
                queue("a1", "a", 4),
                queue("a2", "a", 4),
                queue("b1", "b", 16),
            ],
            &[
                cohort("a", Some("root"), &[(0, Some(4), None)]),
                cohort("b", Some("root"), &[(0, None, Some(8))]),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_queue_borrows_first_in_its_cohort_then_from_the_parent_within_the_limits() {
        let s = org(24);
        // a1: its own 4, a2's 4, and 4 more borrowed by its department from the root.
        assert_eq!(most(&s, "a1"), 12);
        // b1: its own 16 and what department a lends (8); a lends all of it.
        assert_eq!(most(&s, "b1"), 24);
        // Without the department's borrowing limit, a1 could take all b lends: 16.
        let s = build(
            24,
            vec![
                queue("a1", "a", 4),
                queue("a2", "a", 4),
                queue("b1", "b", 16),
            ],
            &[
                cohort("a", Some("root"), &[]),
                cohort("b", Some("root"), &[(0, None, Some(8))]),
            ],
        )
        .unwrap();
        assert_eq!(most(&s, "a1"), 16);
    }

    #[test]
    fn the_limits_hold_while_the_tree_is_busy() {
        let mut s = org(32);
        // b1 uses 8 of its 16: what b keeps to itself, so the root's 16 are all free.
        s.submit(job("b", "b1", 2, 0)).unwrap();
        assert_eq!(admitted(&s.cycle(0)), ["b"]);
        // a1 may take its department's 8 and borrow 4 from the root: a 12-GPU job fits.
        s.submit(job("a-big", "a1", 3, 1)).unwrap();
        assert_eq!(admitted(&s.cycle(1)), ["a-big"]);
        // Another 4 for a1 would take its department past its borrowing limit, though the
        // root has 4 unused and 12 GPUs are free; b1's next 4 fit without a preemption.
        s.submit(job("a-more", "a1", 1, 2)).unwrap();
        s.submit(job("b-more", "b1", 1, 3)).unwrap();
        let d = s.cycle(3);
        assert_eq!((admitted(&d), d.len()), (vec!["b-more"], 1), "{d:?}");
        assert!(
            admitted(&s.cycle(4)).is_empty(),
            "a is at its department's borrowing limit"
        );
        // The department's limit is a1's own: a1 may never use more than 12.
        let why = s.waiting("a-more").expect("a-more waits").to_string();
        assert!(
            why.starts_with("needs 4 GPU(s); queue a1 uses 12 of the 12 it may use"),
            "{why}"
        );
        let usage: Vec<u64> = s.queue_usage().iter().map(|u| u.usage[0].1).collect();
        assert_eq!(usage, [12, 0, 12]);
        // A job larger than the tree can ever give a2 is refused at once, naming the limit.
        let err = s.submit(job("a-huge", "a2", 4, 4)).unwrap_err().to_string();
        assert!(err.contains("at most 12"), "{err}");
    }

    /// A queue below what it may use, in a cohort whose shared GPUs its neighbour uses: the
    /// waiting reason names the cohort, not the queue order.
    #[test]
    fn a_cohort_with_nothing_to_spare_is_named_as_the_reason() {
        let mut s = build(16, vec![queue("x", "c", 4), queue("y", "c", 4)], &[]).unwrap();
        s.submit(job("x1", "x", 1, 0)).unwrap();
        s.submit(job("y1", "y", 1, 0)).unwrap();
        assert_eq!(admitted(&s.cycle(0)).len(), 2);
        s.submit(job("x2", "x", 1, 1)).unwrap();
        assert!(admitted(&s.cycle(1)).is_empty(), "y uses its own quota");
        let why = s.waiting("x2").expect("x2 waits").to_string();
        assert!(
            why.starts_with(
                "needs 4 GPU(s); its queue may use them, but cohort c has none to spare: 8 of \
                 the 8 GPU(s) its queues share"
            ),
            "{why}"
        );
    }

    #[test]
    fn a_cohorts_own_gpus_are_shared_by_its_queues() {
        // A root with 8 GPUs of its own and two queues of 4: each may use 4 + 4 + 8.
        let s = build(
            16,
            vec![queue("x", "pool", 4), queue("y", "pool", 4)],
            &[cohort("pool", None, &[(8, None, None)])],
        )
        .unwrap();
        assert_eq!(most(&s, "x"), 16);
        // One queue alone in a cohort with GPUs of its own has someone to borrow from.
        let s = build(
            8,
            vec![queue("x", "pool", 4)],
            &[cohort("pool", None, &[(4, None, None)])],
        )
        .unwrap();
        assert_eq!(most(&s, "x"), 8);
    }

    #[test]
    fn an_owner_reclaims_across_the_tree() {
        let mut s = org(24);
        // a1 borrows from b's lendable GPUs while b is idle.
        s.submit(job("a-big", "a1", 3, 0)).unwrap();
        s.submit(job("a-small", "a1", 1, 1)).unwrap();
        assert_eq!(admitted(&s.cycle(1)), ["a-big"]);
        // b1's own 16 GPUs are now wanted: the 4 GPUs borrowed by a's department come back.
        s.submit(job("b", "b1", 4, 10)).unwrap();
        let d = s.cycle(10);
        assert!(
            d.iter().any(|x| matches!(x, Decision::Preempt { id, reason: PreemptReason::Reclaim { .. }, .. } if id == "a-big")),
            "{d:?}"
        );
    }

    #[test]
    fn bad_trees_are_refused_naming_the_field() {
        let queues = || vec![queue("a1", "a", 4), queue("b1", "b", 4)];
        let refused = |cohorts: &[CohortSpec]| match build(8, queues(), cohorts) {
            Err(SchedError::InvalidConfig {
                field,
                problem,
                fix,
            }) => (field, problem, fix),
            other => panic!("{other:?}"),
        };
        let (field, problem, _) =
            refused(&[cohort("a", Some("b"), &[]), cohort("b", Some("a"), &[])]);
        assert_eq!(field, "cohorts[0].parent");
        assert!(problem.contains("its own ancestor"), "{problem}");
        let (field, ..) = refused(&[cohort("a", Some("r"), &[]), cohort("a", Some("r"), &[])]);
        assert_eq!(field, "cohorts[1].name");
        let (field, problem, fix) = refused(&[cohort("a", None, &[(0, Some(2), None)])]);
        assert_eq!(field, "cohorts[0].quotas[0].borrowingLimit");
        assert!(problem.contains("no parent"), "{problem}");
        assert!(fix.contains("cohorts[0].parent"), "{fix}");
        // b lends 4; a may not be promised 6.
        let (field, problem, fix) = refused(&[
            cohort("a", Some("r"), &[(0, Some(6), None)]),
            cohort("b", Some("r"), &[]),
        ]);
        assert_eq!(field, "cohorts[0].quotas[0].borrowingLimit");
        assert!(problem.contains("lends only 4"), "{problem}");
        assert!(fix.contains("at most 4"), "{fix}");
        // A queue alone in a cohort no document defines, with nothing of the tree's own to
        // borrow: a typo. Alone in a defined tree (`a` under `r`), it is the tree's first team.
        let err = build(
            8,
            vec![queue("a1", "a", 4), queue("b1", "z", 4)],
            &[cohort("a", Some("r"), &[])],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("queues[1].cohort") && err.contains("`z` of queue `b1` is unknown"),
            "{err}"
        );
        assert!(build(8, vec![queue("a1", "a", 4)], &[cohort("a", Some("r"), &[])]).is_ok());
        let mut flavored = cohort("a", Some("r"), &[(1, None, None)]);
        flavored.quotas[0].flavor = "H100".into();
        let (field, problem, _) = refused(&[flavored, cohort("b", Some("r"), &[])]);
        assert_eq!(field, "cohorts[0].quotas[0].flavor");
        assert!(problem.contains("cohort `a`"), "{problem}");
    }

    /// Departments `a` (three queues of 4 GPUs) and `b` (one queue of `b_nominal`) under a
    /// root with `root_own` GPUs of its own; `a` has fair-share weight `wa`, `b` weight `wb`.
    fn departments(gpus: u32, b_nominal: u32, root_own: u32, wa: f64, wb: f64) -> Scheduler {
        build(
            gpus,
            vec![
                queue("a1", "a", 4),
                queue("a2", "a", 4),
                queue("a3", "a", 4),
                queue("b1", "b", b_nominal),
            ],
            &[
                cohort("root", None, &[(root_own, None, None)]),
                CohortSpec {
                    fair_share_weight: wa,
                    ..cohort("a", Some("root"), &[])
                },
                CohortSpec {
                    fair_share_weight: wb,
                    ..cohort("b", Some("root"), &[])
                },
            ],
        )
        .unwrap()
    }

    /// Whether `d` preempts work of department `a`.
    fn preempts_a(d: &[Decision]) -> bool {
        d.iter()
            .any(|x| matches!(x, Decision::Preempt { id, .. } if id.starts_with('a')))
    }

    /// How many of `d`'s admissions went to department `a` and to `b`.
    fn by_department(d: &[Decision]) -> (usize, usize) {
        let ids = admitted(d);
        let a = ids.iter().filter(|id| id.starts_with('a')).count();
        (a, ids.len() - a)
    }

    #[test]
    fn departments_share_spare_gpus_by_their_weights_not_by_their_queue_counts() {
        for (wb, want) in [(1.0, (2, 2)), (4.0, (1, 3))] {
            // 16 nominal GPUs used, then 16 of the root's own to share.
            let mut s = departments(32, 4, 16, 1.0, wb);
            for q in ["a1", "a2", "a3", "b1"] {
                s.submit(job(&format!("{q}-own"), q, 1, 0)).unwrap();
            }
            assert_eq!(admitted(&s.cycle(0)).len(), 4);
            for q in ["a1", "a2", "a3", "b1"] {
                for k in 0..4 {
                    s.submit(job(&format!("{q}-{k}"), q, 1, 1)).unwrap();
                }
            }
            // Queue by queue, a's three queues would take three of the four jobs' GPUs.
            let d = s.cycle(1);
            assert_eq!(by_department(&d), want, "b's weight {wb}: {d:?}");
        }
    }

    #[test]
    fn fair_preemption_compares_the_departments_not_the_queues() {
        for (wa, preempts) in [(1.0, true), (4.0, false)] {
            let mut s = departments(32, 8, 12, wa, 1.0);
            // Kueue's rule alone (the minimax rule evens use against nominal quota, unweighted).
            s.opts.fair_preemption_minimax = false;
            // Each of a's queues borrows 4 (a at 24 of its 12), b1 uses 4 of its 8.
            for q in ["a1", "a2", "a3", "b1"] {
                s.submit(job(&format!("{q}-0"), q, 1, 0)).unwrap();
            }
            assert_eq!(admitted(&s.cycle(0)).len(), 4);
            for q in ["a1", "a2", "a3"] {
                s.submit(job(&format!("{q}-1"), q, 1, 1)).unwrap();
            }
            assert_eq!(admitted(&s.cycle(1)).len(), 3);
            // b1's 8-GPU job takes it from 4 to 12 of its 8: its department would end at 1.5
            // of its quota, a is at 2 (weight 1, ahead of b) or 0.5 (weight 4, behind).
            s.submit(job("b1-big", "b1", 2, 10)).unwrap();
            let d = s.cycle(10);
            assert_eq!(preempts_a(&d), preempts, "a's weight {wa}: {d:?}");
        }
    }

    #[test]
    fn a_department_at_its_quota_takes_back_the_spare_it_is_owed() {
        // At weight 0.25, b's 4 borrowed GPUs weigh 16: more than a's 12 after the move.
        for (across, wb, preempts) in [(true, 1.0, true), (false, 1.0, false), (true, 0.25, false)]
        {
            // a's queues have 12 GPUs, b1 4, the root 16 that the departments share by weight.
            let mut s = departments(32, 4, 16, 1.0, wb);
            s.opts.tree_fair_preemption = across;
            for q in ["a1", "a2", "a3", "b1"] {
                s.submit(job(&format!("{q}-0"), q, 1, 0)).unwrap();
            }
            assert_eq!(admitted(&s.cycle(0)).len(), 4);
            // While b is idle, a borrows all 16 of the root's.
            for (k, q) in ["a1", "a2", "a3", "a1"].into_iter().enumerate() {
                s.submit(job(&format!("{q}-x{k}"), q, 1, 1)).unwrap();
            }
            assert_eq!(admitted(&s.cycle(1)).len(), 4);
            // b1, at its own 4, asks for 4 more: b would borrow 4, a keeps 12 after.
            s.submit(job("b1-more", "b1", 1, 10)).unwrap();
            let d = s.cycle(10);
            assert_eq!(
                preempts_a(&d),
                preempts,
                "tree_fair_preemption {across}, b's weight {wb}: {d:?}"
            );
        }
    }

    #[test]
    fn a_queue_without_gpus_of_its_own_takes_only_what_leaves_the_other_department_richer() {
        // a's queues have 12 GPUs, b1 none, the root 20; a borrows all 20 of the root's.
        for (gang, preempts) in [(true, false), (false, true)] {
            let mut s = departments(32, 0, 20, 1.0, 1.0);
            if gang {
                s.submit(job("a1-gang", "a1", 8, 0)).unwrap();
            } else {
                for (k, q) in ["a1", "a2", "a3", "a1"]
                    .into_iter()
                    .cycle()
                    .take(8)
                    .enumerate()
                {
                    s.submit(job(&format!("{q}-{k}"), q, 1, 0)).unwrap();
                }
            }
            s.cycle(0);
            let a = s
                .cohort_usage()
                .into_iter()
                .find(|c| c.name == "a")
                .unwrap();
            assert_eq!(a.usage[0].1, 32);
            // b1 asks for 4: b would borrow 4. Taking a 4-GPU job leaves a borrowing 16; taking
            // the gang leaves it 0, less than b, so b could never be asked to give it back.
            s.submit(job("b1-0", "b1", 1, 10)).unwrap();
            let d = s.cycle(10);
            assert_eq!(preempts_a(&d), preempts, "a runs a gang: {gang}: {d:?}");
        }
    }

    #[test]
    fn each_department_reports_its_use_against_its_quota_and_weight() {
        let mut s = departments(32, 4, 16, 1.0, 2.0);
        for (k, q) in ["a1", "a2", "a3", "b1", "a1", "b1"].into_iter().enumerate() {
            s.submit(job(&format!("{q}-{k}"), q, 1, 0)).unwrap();
        }
        s.cycle(0);
        let cohorts = s.cohort_usage();
        let get = |name: &str| cohorts.iter().find(|c| c.name == name).unwrap();
        // a: 16 GPUs on a nominal 12, weight 1; b: 8 on 4, weight 2.
        let (a, b, root) = (get("a"), get("b"), get("root"));
        assert_eq!(
            (a.usage[0].1, a.nominal[0].1, a.weighted_share),
            (16, 12, 4.0)
        );
        assert_eq!(
            (b.usage[0].1, b.nominal[0].1, b.weighted_share),
            (8, 4, 2.0)
        );
        assert_eq!(
            (b.parent.as_deref(), root.parent.as_deref()),
            (Some("root"), None)
        );
        // The root's own 16 count in its nominal: nothing is borrowed from outside the tree.
        assert_eq!(
            (root.usage[0].1, root.nominal[0].1, root.weighted_share),
            (24, 32, 0.0)
        );
        let queues = s.queue_usage();
        let a1 = queues.iter().find(|q| q.name == "a1").unwrap();
        assert_eq!(a1.weighted_share, 4.0);
    }
}

//! One scheduling cycle: the holders first, then the critical path, then queue heads merged by
//! fair share; each candidate is placed, backfilled, lent reserved nodes, or preempts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound;

use super::fairness::not_richer;
use super::preempt::Attempt;
use super::{Fit, Job, PKey, Reservation, Scheduler, St, stretched};
use crate::config::{Decision, Time, WithinQueue};

impl Scheduler {
    /// Runs one scheduling pass at time `now` and returns what to start and what to stop.
    pub fn cycle(&mut self, now: Time) -> Vec<Decision> {
        let mut out = Vec::new();
        self.accrue(now);
        self.fair_tried.clear();
        self.fair_tried.resize(self.queues.len(), false);
        // Preemptors whose victims are gone start first, on the GPUs promised to them.
        for j in std::mem::take(&mut self.ready) {
            self.start_nominated(j, now, &mut out);
        }
        // Queues stopped with `HoldAndDrain` stop their running work.
        self.drain_stopped(&mut out);
        let mut budget = self.opts.max_candidates_per_cycle.max(1);
        let mut preempt_budget = self.opts.max_preemption_attempts_per_cycle;
        let mut resv: Vec<Option<Reservation>> = vec![None; self.pools.len()];
        self.next_start.iter_mut().for_each(|s| *s = None);
        // The persistent head-of-line holder of each flavor goes first.
        for f in 0..self.pools.len() {
            let Some(h) = self.holder[f] else { continue };
            // Whatever the outcome, the holder has had its turn (and its reservation, if blocked).
            self.try_one(h, now, &mut resv, &mut preempt_budget, &mut out, Some(f));
        }
        // Jobs on the critical path go next: deferring them would stretch the makespan.
        self.critical = self.critical_jobs(now);
        for j in self.critical.clone() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            self.try_one(j, now, &mut resv, &mut preempt_budget, &mut out, None);
        }
        // Merge queue heads: fair share, then priority, then age.
        let mut heap: BinaryHeap<Reverse<(Vec<u64>, PKey, u32)>> = BinaryHeap::new();
        let mut cursor: Vec<Option<PKey>> = vec![None; self.queues.len()];
        for q in 0..self.queues.len() as u32 {
            if self.queues[q as usize].dirty {
                self.push_next(q, None, now, &mut heap);
            }
        }
        let mut stopped = false;
        while let Some(Reverse((order, key, q))) = heap.pop() {
            if self.in_subtree(q) {
                // Admissions since it was pushed may have moved its cohorts' shares.
                let now_order = self.head_order(q, &key, now);
                if now_order != order {
                    heap.push(Reverse((now_order, key, q)));
                    continue;
                }
            }
            if budget == 0 {
                stopped = true;
                break;
            }
            budget -= 1;
            cursor[q as usize] = Some(key);
            let j = key.3;
            let outcome = self.try_one(j, now, &mut resv, &mut preempt_budget, &mut out, None);
            if self.opts.strict_fifo && matches!(outcome, Outcome::Blocked) {
                // StrictFIFO: a blocked head blocks the rest of its queue.
                continue;
            }
            self.push_next(q, Some(key), now, &mut heap);
        }
        if !stopped {
            for q in &mut self.queues {
                q.dirty = false;
            }
        } else {
            // Queues whose scan completed are clean; the others resume next cycle.
            let open: Vec<u32> = heap.iter().map(|Reverse((_, _, q))| *q).collect();
            for (i, q) in self.queues.iter_mut().enumerate() {
                if !open.contains(&(i as u32)) && cursor[i].is_some() {
                    q.dirty = false;
                }
            }
        }
        for (f, r) in resv.into_iter().enumerate() {
            if let Some(r) = r {
                for n in r.nodes {
                    self.pools[f].index_insert(n);
                }
            }
        }
        self.snapshot();
        out
    }

    /// Starts a preemptor whose victims are gone on the GPUs nominated for it.
    pub(super) fn start_nominated(&mut self, j: u32, now: Time, out: &mut Vec<Decision>) {
        let Some(job) = self.jobs[j as usize].as_ref() else {
            return;
        };
        if job.state != St::Nominated {
            return;
        }
        let (f, q, prio, borrowed) = (job.flavor as usize, job.queue, job.prio, job.borrowed);
        let pods = job.pods_at.clone();
        for &(n, m) in &pods {
            let node = &mut self.pools[f].nodes[n as usize];
            debug_assert_eq!(node.held & m, m);
            node.held &= !m;
            node.nominated &= !m;
        }
        // A loan that had to preempt to start (`place_or_preempt`) is one from its start.
        let on_loan = self.jobs[j as usize].as_ref().is_some_and(|x| x.on_loan);
        self.start(j, f, pods, borrowed, now, out);
        if on_loan {
            self.loans[f].insert(j);
        }
        self.queues[q as usize].running.insert((prio, j));
    }

    fn push_next(
        &self,
        q: u32,
        after: Option<PKey>,
        now: Time,
        heap: &mut BinaryHeap<Reverse<(Vec<u64>, PKey, u32)>>,
    ) {
        let qs = &self.queues[q as usize];
        if !qs.stop.is_none() {
            // A held queue's waiting work is not tried.
            return;
        }
        let next = match after {
            None => qs.pending.iter().next(),
            Some(k) => qs
                .pending
                .range((Bound::Excluded(k), Bound::Unbounded))
                .next(),
        };
        if let Some(k) = next {
            heap.push(Reverse((self.head_order(q, k, now), *k, q)));
        }
    }

    /// Where queue `q`'s head `k` goes among the other queues' heads (lowest first; ties by
    /// priority, then age).
    fn head_order(&self, q: u32, k: &PKey, now: Time) -> Vec<u64> {
        if self.opts.multifactor.is_some() {
            // Highest priority first; within a queue age order is the priority order.
            vec![u64::MAX - (self.multifactor_priority(k.3, now) * 1e6) as u64]
        } else if self.opts.fair_sharing {
            // Fair share; in a tree, compared where two queues' paths part.
            self.fair_path(q).into_iter().map(|(_, s)| s).collect()
        } else {
            Vec::new()
        }
    }

    /// Whether queue `q`'s tree has departments: cohorts below its root, one of which may
    /// stand for `q` or for the other side in a fair-sharing comparison.
    fn in_department(&self, q: u32) -> bool {
        self.queues[q as usize].cohort.is_some_and(|r| {
            self.cohorts[r as usize]
                .members
                .iter()
                .any(|&m| self.queues[m as usize].pool != Some(r))
        })
    }

    /// Whether queue `q` is in a cohort below a tree's root, whose share other queues'
    /// admissions move (a queue's own share moves only with its own admissions).
    fn in_subtree(&self, q: u32) -> bool {
        self.opts.fair_sharing
            && self.opts.multifactor.is_none()
            && self.queues[q as usize]
                .pool
                .is_some_and(|c| self.cohorts[c as usize].parent.is_some())
    }

    /// Whether pending job `j` would start in flavor `f` within `patience` seconds of `now`
    /// without preempting: its nodes and its quota free up as running work ends (expected
    /// ends; work without one never frees).
    fn starts_soon(&self, j: u32, f: usize, now: Time, patience: u64) -> bool {
        if patience == 0 {
            return false;
        }
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (pods, g) = (u64::from(job.pods), job.g);
        let nodes_at = match job.required_within() {
            Some(level) => self.reserve_within(f, level, self.free_for_holder(f), pods, g, now),
            None => self.reserve_anywhere(f, self.free_for_holder(f), pods, g, now),
        }
        .1;
        nodes_at
            .zip(self.quota_shadow(j, f, now))
            .is_some_and(|(a, b)| a.max(b) < now + patience)
    }

    /// Whether pending job `j` is of a more urgent class than job `h` where classes decide the
    /// order between them: within one queue, or among queues not ordered by fair share.
    fn outranks(&self, j: u32, h: u32) -> bool {
        let (Some(a), Some(b)) = (
            self.jobs[j as usize].as_ref(),
            self.jobs[h as usize].as_ref(),
        ) else {
            return false;
        };
        j != h && a.prio > b.prio && (a.queue == b.queue || !self.opts.fair_sharing)
    }

    pub(super) fn shares_quota(&self, a: u32, b: u32) -> bool {
        a == b
            || self.queues[a as usize]
                .cohort
                .is_some_and(|c| self.queues[b as usize].cohort == Some(c))
    }

    /// Whether work that would outlast a reserved gang's start (`shadow`) in flavor `f` may run
    /// on its nodes on loan until then (`Options::lend_reserved_nodes`, `min_loan_s`). An unknown
    /// start lends too while some running job of the flavor has no expected end (the likely
    /// reason it is unknown): idling the nodes for a gang that may wait days costs more than the
    /// loans' graceful preemption when it can start.
    fn may_lend(&self, shadow: Option<Time>, f: usize, now: Time) -> bool {
        self.opts.lend_reserved_nodes
            && self.opts.preemption
            && shadow.map_or(self.endless[f] > 0, |s| s >= now + self.opts.min_loan_s)
    }

    fn try_one(
        &mut self,
        j: u32,
        now: Time,
        resv: &mut [Option<Reservation>],
        preempt_budget: &mut usize,
        out: &mut Vec<Decision>,
        only: Option<usize>,
    ) -> Outcome {
        let Some(job) = self.jobs[j as usize].as_ref() else {
            return Outcome::Skipped;
        };
        if job.state != St::Pending {
            return Outcome::Skipped;
        }
        let (q, r, pods, g, prio, expected, created) = (
            job.queue,
            job.gpus(),
            job.pods,
            job.g,
            job.prio,
            job.expected,
            job.created,
        );
        let flavors = match only {
            Some(f) => vec![f],
            None => self.flavors_of(j),
        };
        let ends_by = |s: Option<Time>| ends_before(expected, now, s);
        let mut blocked = false;
        for f in flavors {
            let fit = self.quota_fit(q, f, r, &[]);
            // A holder blocked by quota keeps that quota: work sharing it (same queue, or
            // borrowing from the same cohort) may only take what it returns before the holder's
            // turn, or take it on loan until then.
            let (quota_ok, loan) = if fit == Fit::No {
                (false, false)
            } else if fit == Fit::Borrow
                && self.opts.preemption
                && !self.drains(j, f)
                && self.reclaim_pending(q, f)
            {
                // Lending this would be reclaimed at once (a preemption loop in the making): the
                // owner's waiting work goes first, and this does not hold a reservation against it.
                continue;
            } else {
                match &resv[f] {
                    Some(rv) if self.holder[f] != Some(j) => match rv.quota_queue {
                        Some(hq)
                            if hq == q
                                || (rv.drain && self.shares_quota(hq, q))
                                || (fit == Fit::Borrow
                                    && self.shares_quota(hq, q)
                                    && (rv.quota_guaranteed
                                        || (self.opts.fair_sharing
                                            && not_richer(
                                                &rv.holder_path,
                                                &self.fair_path(q),
                                            )))) =>
                        {
                            if ends_by(rv.quota_shadow) {
                                (true, false)
                            } else {
                                let l = self.may_lend(rv.quota_shadow, f, now);
                                (l, l)
                            }
                        }
                        _ => (true, false),
                    },
                    _ => (true, false),
                }
            };
            let outcome =
                self.place_or_preempt(j, f, fit, quota_ok, loan, now, resv, preempt_budget, out);
            if let Some(o) = outcome {
                return o;
            }
            if resv[f].is_some() && fit != Fit::No {
                // Held back by another holder's reservation: not itself a head, unless it is
                // of a more urgent class than the holder, which it then displaces from next
                // cycle (else urgent work would wait behind a reservation it outranks).
                if self.opts.backfill
                    && self.holder[f].is_some_and(|h| self.outranks(j, h))
                    && !self.deficit_overserved(q, r)
                {
                    self.holder[f] = Some(j);
                }
                continue;
            }
            // A queue that got more than its due for a while does not take a new reservation:
            // draining the cluster for it would widen the gap (its deficit recovers by decay).
            let hold_ok = self.holder[f] == Some(j)
                || self.critical.contains(&j)
                || !self.deficit_overserved(q, r);
            if self.opts.backfill
                && resv[f].is_none()
                && self.holder[f].is_none_or(|h| h == j)
                && hold_ok
            {
                self.holder[f] = Some(j);
                let within = self.jobs[j as usize].as_ref().and_then(Job::within);
                let needs_nodes = fit != Fit::No || self.pools[f].find(pods, g, within).is_none();
                let mut rv = if needs_nodes {
                    self.reserve(j, f, now)
                } else {
                    Reservation::default()
                };
                if fit == Fit::No {
                    let qs = &self.queues[q as usize];
                    rv.quota_queue = Some(q);
                    rv.quota_guaranteed = qs.quota[f].is_some_and(|x| qs.usage[f] + r <= x.nominal);
                    rv.quota_shadow = self.quota_shadow(j, f, now);
                    rv.holder_path = self.fair_path(q);
                }
                // It starts when both its nodes and its quota are free.
                let nodes_at = if needs_nodes { rv.shadow } else { Some(now) };
                let quota_at = if fit == Fit::No {
                    rv.quota_shadow
                } else {
                    Some(now)
                };
                self.next_start[f] = Some((j, nodes_at.zip(quota_at).map(|(a, b)| a.max(b))));
                // Only a holder that must borrow needs others' nominal quota; one within its own
                // nominal gets it back through reclaim.
                let qs = &self.queues[q as usize];
                let must_borrow = qs.quota[f].is_some_and(|x| qs.usage[f] + r > x.nominal);
                rv.drain = must_borrow && self.drains(j, f);
                resv[f] = Some(rv);
                blocked = true;
            } else {
                if self.opts.backfill
                    && let Some(h) = self.holder[f]
                    && h != j
                    && let Some(hj) = self.jobs[h as usize].as_ref()
                    && if self.opts.multifactor.is_some() {
                        // Equal priorities (ages past the maximum) go by age, as Slurm's do.
                        let (pj, ph) = (
                            self.multifactor_priority(j, now),
                            self.multifactor_priority(h, now),
                        );
                        pj > ph || (pj == ph && created < hj.created)
                    } else if self.opts.reserve_by_key {
                        self.before_by_owed_then_key(
                            self.jobs[j as usize].as_ref().expect("job exists"),
                            hj,
                        )
                    } else {
                        (Reverse(prio), created) < (Reverse(hj.prio), hj.created)
                    }
                    && hold_ok
                {
                    // An older (or more urgent) blocked job takes the reservation from next cycle:
                    // fair-share order picks what runs, not who waits longest.
                    self.holder[f] = Some(j);
                }
                if fit != Fit::No || self.opts.strict_fifo {
                    blocked = true;
                }
            }
        }
        if only.is_some() && !blocked {
            for h in &mut self.holder {
                if *h == Some(j) {
                    *h = None;
                }
            }
        }
        if blocked {
            Outcome::Blocked
        } else {
            Outcome::Skipped
        }
    }

    /// Places `j` in flavor `f` (normally, before a reservation's start, or on loan), or
    /// preempts for it; `None` when neither is possible.
    #[allow(clippy::too_many_arguments)]
    fn place_or_preempt(
        &mut self,
        j: u32,
        f: usize,
        fit: Fit,
        quota_ok: bool,
        mut loan: bool,
        now: Time,
        resv: &[Option<Reservation>],
        preempt_budget: &mut usize,
        out: &mut Vec<Decision>,
    ) -> Option<Outcome> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        // Placed by its spec alone: whether to wait for one rack is decided on the plan.
        let (q, r, pods, g, prio, expected, within) = (
            job.queue,
            job.gpus(),
            job.pods,
            job.g,
            job.prio,
            job.expected,
            job.required_within(),
        );
        let ends_by = |s: Option<Time>| ends_before(expected, now, s);
        if quota_ok {
            let mut plan = self.pools[f].find(pods, g, within);
            if plan.is_none()
                && let Some(rv) = &resv[f]
                && !rv.nodes.is_empty()
                && self.holder[f] != Some(j)
            {
                // Ends before the reserved gang can start: may use the reserved nodes. Or will
                // not, but the gang is far off: borrow the nodes until its turn.
                let in_time = ends_by(rv.shadow);
                if in_time || self.may_lend(rv.shadow, f, now) {
                    let nodes = rv.nodes.clone();
                    for &n in &nodes {
                        self.pools[f].index_insert(n);
                    }
                    plan = self.pools[f].find(pods, g, within);
                    for &n in &nodes {
                        self.pools[f].index_remove(n);
                    }
                    // Split across racks it runs longer: it may no longer end in time.
                    let stretch = plan
                        .as_ref()
                        .map_or(0, |p| self.split_stretch(j, f, p.iter().map(|&(n, _)| n)));
                    let in_time = in_time
                        && (stretch == 0
                            || ends_before(
                                expected.map(|e| stretched(e, stretch)),
                                now,
                                rv.shadow,
                            ));
                    if !in_time && !self.may_lend(rv.shadow, f, now) {
                        plan = None;
                    }
                    loan |= plan.is_some() && !in_time;
                }
            }
            if let Some(plan) = plan.filter(|p| !self.waits_for_rack(j, f, p, now)) {
                self.admit(j, f, &plan, fit, now, out);
                if loan {
                    self.jobs[j as usize].as_mut().expect("job exists").on_loan = true;
                    self.loans[f].insert(j);
                }
                return Some(Outcome::Admitted);
            }
        }
        if self.holder[f] == Some(j)
            && self.opts.preemption
            && !self.loans[f].is_empty()
            && self.try_preempt(
                j,
                f,
                Attempt {
                    loans_only: true,
                    ..Attempt::default()
                },
                now,
                out,
            )
        {
            return Some(Outcome::Preempting);
        }
        let min_running = self.queues[q as usize].running.first().map(|x| x.0);
        let by_priority =
            min_running.is_some_and(|m| match self.queues[q as usize].preemption.within_queue {
                WithinQueue::LowerPriority => m < prio,
                WithinQueue::LowerOrNewerEqualPriority => m <= prio,
                WithinQueue::Never => false,
            }) && !self.starts_soon(j, f, now, self.opts.priority_patience_s);
        // Reclaiming costs the victims their grace period and a restart: not worth it when the
        // quota comes back by itself soon.
        let patient = !by_priority
            && self.opts.reclaim_patience_s > 0
            && self
                .quota_shadow(j, f, now)
                .is_some_and(|s| s < now + self.opts.reclaim_patience_s);
        let fair = !by_priority
            && self.opts.fair_preemption
            && self.fair_tried.get(q as usize) == Some(&false)
            && self.queues[q as usize].quota[f].is_some_and(|qq| {
                let u = self.queues[q as usize].usage[f];
                // Below its nominal quota; in a tree, also at or over it, against other
                // departments (`Options::tree_fair_preemption`).
                (u < qq.nominal || (self.opts.tree_fair_preemption && self.in_department(q)))
                    && u + r > qq.nominal
            });
        let may_preempt = self.opts.preemption
            && *preempt_budget > 0
            && (by_priority || (!patient && self.may_reclaim(j, q, f, r, fair)));
        if fair && may_preempt {
            // A queue's fair-sharing claim is tried once a cycle (its first blocked head), so
            // failed tries cannot use up the preemption budget of reclaims and priorities.
            self.fair_tried[q as usize] = true;
        }
        if may_preempt {
            *preempt_budget -= 1;
            let reserved = resv[f]
                .as_ref()
                .filter(|_| self.holder[f] != Some(j))
                .and_then(|rv| Some((rv.nodes.clone(), rv.shadow?)));
            // Work allowed only on loan that reclaims lent quota to start still runs on loan:
            // as ordinary work it would hold the quota a holder waits for past the holder's turn.
            let attempt = Attempt {
                loans_only: false,
                reserved: reserved.as_ref().map(|(n, s)| (n.as_slice(), *s)),
                as_loan: loan,
            };
            if self.try_preempt(j, f, attempt, now, out) {
                return Some(Outcome::Preempting);
            }
        }
        None
    }
}

/// Whether a job expected to run `expected` seconds from `now` ends by `shadow` (a reserved
/// gang's start): such work may use the reserved nodes without delaying the gang.
fn ends_before(expected: Option<u64>, now: Time, shadow: Option<Time>) -> bool {
    expected.is_some_and(|e| shadow.is_some_and(|s| now + e <= s))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Admitted,
    Preempting,
    Blocked,
    Skipped,
}

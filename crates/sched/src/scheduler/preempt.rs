//! Preemption: choosing victims that lose the least work, and the rules that keep
//! preemptions from chasing each other (priority, reclaim, fair sharing, loans).

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use super::fairness::Side;
use super::{Fit, Kind, Scheduler, St};

/// Victims chosen for a preemptor and where it will run.
struct Pick {
    /// Nodes and pod counts of the preemptor's placement.
    plan: Vec<(u32, u32)>,
    /// The victims, each with why it may be taken.
    keep: Vec<(u32, Kind)>,
    /// On nodes reserved for another gang: the only GPUs the placement may use there.
    late: Vec<(u32, u64)>,
}
use crate::config::{Decision, PreemptReason, ReclaimWithinCohort, Time, WithinQueue};

/// What one preemption attempt may take, and how its preemptor runs once started.
#[derive(Clone, Copy, Default)]
pub(super) struct Attempt<'a> {
    /// Only jobs running on nodes lent from the preemptor's reservation may go (a holder taking
    /// its loans back).
    pub(super) loans_only: bool,
    /// Another gang's reserved nodes and start time this cycle (see
    /// `Options::reclaim_through_reservation`).
    pub(super) reserved: Option<(&'a [u32], Time)>,
    /// The preemptor runs on loan: work of a blocked holder's queue that would outlast the
    /// holder's turn, which the holder takes back then.
    pub(super) as_loan: bool,
}

impl Scheduler {
    /// Tries to preempt for `j` in flavor `f` as `attempt` allows; returns true if victims were
    /// chosen (`j` is then nominated, or started at once when its victims were only admitted
    /// this cycle).
    pub(super) fn try_preempt(
        &mut self,
        j: u32,
        f: usize,
        attempt: Attempt<'_>,
        now: Time,
        out: &mut Vec<Decision>,
    ) -> bool {
        let Attempt {
            loans_only,
            reserved,
            as_loan,
        } = attempt;
        let cands = self.victim_candidates(j, f, loans_only);
        if cands.is_empty() {
            return false;
        }
        // Reclaiming within nominal quota may also use, on nodes reserved for another gang, the
        // GPUs of victims that would still run when that gang can start: the gang never counted
        // on them, so its start does not move.
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let qs = &self.queues[job.queue as usize];
        let through = reserved.filter(|_| {
            !loans_only
                && self.opts.reclaim_through_reservation
                && qs.quota[f].is_some_and(|qq| qs.usage[f] + job.gpus() <= qq.nominal)
        });
        let Some(pick) = self.pick_victims(j, f, &cands, through) else {
            return false;
        };
        if self.restart_costs_more(j, f, &pick.keep, now) {
            return false;
        }
        let drains = self.drains(j, f);
        if self.would_be_preempted_back(j, f, loans_only, drains, &pick.keep) {
            return false;
        }
        // Set before the commit, which may start `j` at once.
        self.jobs[j as usize].as_mut().expect("job exists").on_loan = as_loan;
        self.commit_preemption(j, f, pick, drains, now, out);
        true
    }

    /// Whether reclaiming `victims` for `j` costs more GPU-time in restarts
    /// (`Options::reclaim_restart_cost_s` per victim GPU) than `j` would wait, on its own GPUs,
    /// for its queue's quota to come back by itself. Only a job short of quota is weighed: for
    /// one that fits its quota the wait is for GPUs, which this cannot tell.
    fn restart_costs_more(&self, j: u32, f: usize, victims: &[(u32, Kind)], now: Time) -> bool {
        let cost = self.opts.reclaim_restart_cost_s;
        if cost == 0 {
            return false;
        }
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let reclaimed: u64 = victims
            .iter()
            .filter(|&&(_, kind)| kind == Kind::Reclaim)
            .map(|&(v, _)| {
                self.jobs[v as usize]
                    .as_ref()
                    .expect("victim exists")
                    .gpus()
            })
            .sum();
        reclaimed > 0
            && self.quota_fit(job.queue, f, job.gpus(), &[]) == Fit::No
            && self.quota_shadow(j, f, now).is_some_and(|back| {
                back < now.saturating_add(cost.saturating_mul(reclaimed) / job.gpus().max(1))
            })
    }

    /// Running jobs `j` may preempt in flavor `f`, least work lost first: lower priority, then
    /// most recently checkpointed, then youngest (at most 256).
    fn victim_candidates(&self, j: u32, f: usize, loans_only: bool) -> Vec<(u32, Kind)> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, prio, r) = (job.queue, job.prio, job.gpus());
        let guard = self.preemption_ancestors(j);
        let critical = self.critical.contains(&j);
        let qs = &self.queues[q as usize];
        let mut cands: Vec<(u32, Kind)> = Vec::new();
        if loans_only {
            cands.extend(self.loans[f].iter().map(|&v| (v, Kind::Loan)));
        } else {
            if job.preempts {
                // Lower priorities, and with `LowerOrNewerEqualPriority` its own priority's
                // work (the filter below keeps only what was created after it).
                let upto = match qs.preemption.within_queue {
                    WithinQueue::Never => (i32::MIN, 0),
                    WithinQueue::LowerPriority => (prio, 0),
                    WithinQueue::LowerOrNewerEqualPriority => (prio, u32::MAX),
                };
                for &(_, v) in qs.running.range(..upto) {
                    cands.push((v, Kind::Priority));
                }
            }
            // The holder takes back its loans too: its queue's loans count as already returned.
            let holder = self.holder[f] == Some(j);
            if holder {
                cands.extend(self.loans[f].iter().map(|&v| (v, Kind::Loan)));
            }
            let usage = qs.usage[f].saturating_sub(if holder { self.own_loans(q, f) } else { 0 });
            let within_nominal = qs.quota[f].is_some_and(|qq| usage + r <= qq.nominal);
            // Fair sharing: a queue below its nominal quota whose head would take it over may
            // take borrowed work from a queue whose share of its own quota is higher than the
            // preemptor's will be (checked again on the final victim set, see
            // `would_be_preempted_back`).
            let fair_after = (self.opts.fair_preemption && !within_nominal)
                .then(|| self.side_ratio(Side::Queue(q), f, r as i64))
                .flatten()
                .filter(|_| qs.quota[f].is_some_and(|qq| qs.usage[f] < qq.nominal));
            // Kueue's `borrowWithinCohort`: a job that must borrow may take lower-class
            // borrowed work of members above their quota (reclaims must be allowed at all).
            if let Some(bwc) = qs.preemption.borrow_within_cohort.filter(|_| {
                !within_nominal && qs.preemption.reclaim_within_cohort != ReclaimWithinCohort::Never
            }) && let Some(c) = qs.cohort
            {
                for &m in &self.cohorts[c as usize].members {
                    let ms = &self.queues[m as usize];
                    if m == q || ms.quota[f].is_none_or(|qq| ms.usage[f] <= qq.nominal) {
                        continue;
                    }
                    for &(vprio, v) in &ms.running {
                        if bwc.may_take(vprio, prio) {
                            cands.push((v, Kind::Borrow));
                        }
                    }
                }
            }
            // In a tree, between departments, also a queue at or over its nominal quota.
            let tree_fair =
                self.opts.fair_preemption && self.opts.tree_fair_preemption && !within_nominal;
            if (within_nominal || fair_after.is_some() || tree_fair)
                && let Some(c) = qs.cohort
            {
                for &m in &self.cohorts[c as usize].members {
                    let ms = &self.queues[m as usize];
                    if m == q || ms.quota[f].is_none_or(|qq| ms.usage[f] <= qq.nominal) {
                        continue;
                    }
                    // In a tree, compared where the two queues' paths part.
                    let sides = self.apart(q, m);
                    let fair = fair_after.is_some() || (tree_fair && Self::across(sides));
                    let richer = within_nominal
                        || (fair
                            && self
                                .side_shares(sides, f, r as i64, 0)
                                .is_some_and(|(after, v)| v > after));
                    // With `fair_preemption_minimax`, single-node jobs of any member above its
                    // quota may do too, if the final set brings the queues closer to their quotas.
                    let minimax = self.opts.fair_preemption_minimax && fair_after.is_some();
                    if !(richer || minimax) {
                        continue;
                    }
                    for &(_, v) in &ms.running {
                        let single = self.jobs[v as usize].as_ref().is_some_and(|x| x.pods == 1);
                        if richer || single {
                            cands.push((v, Kind::Reclaim));
                        }
                    }
                }
            }
        }
        // A borrowed job on loan is listed twice: it goes as a loan.
        let mut seen = HashSet::new();
        cands.retain(|&(v, _)| seen.insert(v));
        cands.retain(|&(v, kind)| {
            let vj = self.jobs[v as usize].as_ref().expect("running job exists");
            vj.state == St::Running
                && vj.flavor as usize == f
                && !guard.contains(&v)
                && !vj.preempted_by.contains(&j)
                && match kind {
                    // Its own priority's work only when created after it (an order no two jobs
                    // can both be ahead in, so no circle).
                    Kind::Priority => vj.prio < prio || vj.created > job.created,
                    // Lent quota is the owner's whatever the borrower's priority (Kueue's `Any`)
                    // unless the owner's queue says `LowerPriority`. Preemptions still cannot
                    // chase each other in a circle: the borrower cannot take it back (it would
                    // have to borrow again, and no one lends what its owner reclaims), and no
                    // one preempts its own preemptors (`preemption_ancestors`). With deficits,
                    // nominal quota is a time-averaged guarantee: a queue does not reclaim from
                    // one owed more GPU-time than itself.
                    Kind::Reclaim => {
                        vj.borrowed
                            && !vj.protected
                            && self.mostly_borrowed(vj.queue, f, vj.gpus())
                            && match qs.preemption.reclaim_within_cohort {
                                ReclaimWithinCohort::Any => true,
                                ReclaimWithinCohort::LowerPriority => vj.prio < prio,
                                ReclaimWithinCohort::Never => false,
                            }
                            && (critical || !self.deficit_ahead(vj.queue, q, vj.gpus()))
                    }
                    Kind::Borrow => {
                        vj.borrowed && !vj.protected && self.mostly_borrowed(vj.queue, f, vj.gpus())
                    }
                    Kind::Loan => vj.on_loan && vj.prio <= prio,
                }
        });
        cands.sort_by_key(|&(v, kind)| {
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            (
                kind != Kind::Loan,
                vj.prio,
                Reverse(vj.last_ckpt.unwrap_or(vj.admitted_at)),
                Reverse(vj.admitted_at),
                v,
            )
        });
        cands.truncate(256);
        cands
    }

    /// Whether queue `vq` borrows enough of flavor `f` for a job of `gpus` GPUs to be taken
    /// back (`Options::reclaim_min_borrowed_pct`): a reclaim returns lent GPUs; a job mostly
    /// inside its queue's own quota is not lent, and taking it would make its queue the owed one.
    fn mostly_borrowed(&self, vq: u32, f: usize, gpus: u64) -> bool {
        let vs = &self.queues[vq as usize];
        let over = vs.quota[f].map_or(0, |qq| vs.usage[f].saturating_sub(qq.nominal));
        over * 100 >= gpus * u64::from(self.opts.reclaim_min_borrowed_pct)
    }

    /// Takes candidates in order until `j`'s quota and a placement both fit, then drops those
    /// whose GPUs the placement does not use (if quota still fits without them). The pool is
    /// left as it was.
    fn pick_victims(
        &mut self,
        j: u32,
        f: usize,
        cands: &[(u32, Kind)],
        through: Option<(&[u32], Time)>,
    ) -> Option<Pick> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, r, pods, g, within) = (job.queue, job.gpus(), job.pods, job.g, job.within());
        let mut late: Vec<(u32, u64)> = Vec::new();
        let mut freed: Vec<(u32, u64)> = Vec::new();
        let mut chosen: Vec<(u32, Kind)> = Vec::new();
        let mut touched: Vec<(u32, u64)> = Vec::new();
        let mut plan = None;
        for &(v, reclaim) in cands {
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            freed.push((vj.queue, vj.gpus()));
            chosen.push((v, reclaim));
            // A single-node victim restarts by backfill; a gang would need a drain of its own.
            let runs_past =
                vj.pods == 1 && through.is_some_and(|(_, s)| vj.end().is_none_or(|e| e > s));
            for &(n, m) in &vj.pods_at.clone() {
                let node = &self.pools[f].nodes[n as usize];
                touched.push((n, node.free));
                let free = node.free | m;
                self.pools[f].set_free(n, free);
                if runs_past && through.is_some_and(|(rn, _)| rn.contains(&n)) {
                    match late.iter_mut().find(|(x, _)| *x == n) {
                        Some((_, b)) => *b |= m,
                        None => late.push((n, m)),
                    }
                }
            }
            if self.quota_fit(q, f, r, &freed) == Fit::No {
                continue;
            }
            if let Some(p) = self.pools[f].find(pods, g, within) {
                plan = Some(p);
                late.clear();
                break;
            }
            if !late.is_empty() {
                // Offer the reserved nodes with only those GPUs free.
                let saved: Vec<(u32, u64)> = late
                    .iter()
                    .map(|&(n, _)| (n, self.pools[f].nodes[n as usize].free))
                    .collect();
                for &(n, b) in &late {
                    self.pools[f].nodes[n as usize].free = b;
                    self.pools[f].index_insert(n);
                }
                let p = self.pools[f].find(pods, g, within);
                for &(n, old) in &saved {
                    self.pools[f].index_remove(n);
                    self.pools[f].nodes[n as usize].free = old;
                }
                if p.is_some() {
                    plan = p;
                    break;
                }
            }
        }
        // Undo the trial release (restore original free masks, oldest first wins).
        for &(n, old) in touched.iter().rev() {
            self.pools[f].set_free(n, old);
        }
        let plan = plan?;
        let plan_nodes: Vec<u32> = plan.iter().map(|(n, _)| *n).collect();
        let mut keep: Vec<(u32, Kind)> = chosen.clone();
        for &(v, _) in chosen.iter().rev() {
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            // On a reserved node the plan uses only the GPUs of victims that outlast the gang.
            let used = |&(n, m): &(u32, u64)| {
                plan_nodes.contains(&n)
                    && late
                        .iter()
                        .find(|(x, _)| *x == n)
                        .is_none_or(|(_, b)| b & m != 0)
            };
            if vj.pods_at.iter().any(used) {
                continue;
            }
            let without: Vec<(u32, u64)> = keep
                .iter()
                .filter(|(x, _)| *x != v)
                .map(|&(x, _)| self.queue_and_gpus(x))
                .collect();
            if self.quota_fit(q, f, r, &without) != Fit::No {
                keep.retain(|(x, _)| *x != v);
            }
        }
        Some(Pick { plan, keep, late })
    }

    /// The no-loop conditions on a victim set: with fair sharing, every victim queue keeps at
    /// least the share the preemptor ends with, or (single-node victims) the largest relative
    /// gap to quota among the queues involved shrinks, so the reverse move would widen it; and
    /// a preemptor that ends up borrowing never takes from another queue something that queue
    /// would at once reclaim.
    fn would_be_preempted_back(
        &self,
        j: u32,
        f: usize,
        loans_only: bool,
        drains: bool,
        keep: &[(u32, Kind)],
    ) -> bool {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, r) = (job.queue, job.gpus());
        let freed: Vec<(u32, u64)> = keep.iter().map(|&(x, _)| self.queue_and_gpus(x)).collect();
        let left_in =
            |vq: u32| -> u64 { freed.iter().filter(|(y, _)| *y == vq).map(|(_, a)| a).sum() };
        let qs = &self.queues[q as usize];
        // What the preemptor's queue ends with: its own victims (loans) gone, the preemptor in.
        let delta = r as i64 - left_in(q) as i64;
        if self.opts.fair_preemption
            && !loans_only
            && qs.quota[f].is_some_and(|qq| qs.usage[f] as i64 + delta > qq.nominal as i64)
        {
            let mut kueue_ok = true;
            // Between departments, a preemptor not below its nominal quota needs Kueue's rule.
            let below = qs.quota[f].is_some_and(|qq| qs.usage[f] < qq.nominal);
            let mut across_ok = true;
            // The largest relative gap to nominal quota among the queues involved, before and
            // after: the preemptor's and each victim queue's (in a tree, of the sides where
            // their paths part).
            let mut gap_before = self.side_gap(Side::Queue(q), f, 0);
            let mut gap_after = self.side_gap(Side::Queue(q), f, delta);
            let mut reclaims = false;
            // What a side's GPUs change by: the preemptor in, the victims out.
            let change = |x: Side| -> i64 {
                let gone: u64 = freed
                    .iter()
                    .filter(|&&(y, _)| self.under(y, x))
                    .map(|(_, g)| g)
                    .sum();
                let came = if self.under(q, x) { r as i64 } else { 0 };
                came - gone as i64
            };
            for (&(vq, _), &(_, kind)) in freed.iter().zip(keep) {
                if vq == q || kind != Kind::Reclaim {
                    continue;
                }
                reclaims = true;
                let (a, b) = self.apart(q, vq);
                let (da, db) = (change(a), change(b));
                let ok = self
                    .side_shares((a, b), f, da, db)
                    .is_some_and(|(after, v)| v >= after);
                kueue_ok &= ok;
                if !below && Self::across((a, b)) {
                    across_ok &= ok;
                }
                gap_before = gap_before
                    .max(self.side_gap(a, f, 0))
                    .max(self.side_gap(b, f, 0));
                gap_after = gap_after
                    .max(self.side_gap(a, f, da))
                    .max(self.side_gap(b, f, db));
            }
            let closer = self.opts.fair_preemption_minimax
                && gap_after + 1e-9 < gap_before
                && keep.iter().all(|&(v, _)| {
                    self.jobs[v as usize]
                        .as_ref()
                        .is_some_and(|vj| vj.pods == 1)
                });
            if !across_ok || (reclaims && !kueue_ok && !closer) {
                return true;
            }
        }
        if !drains && self.quota_fit(q, f, r, &freed) == Fit::Borrow {
            if self.reclaim_pending(q, f) {
                return true;
            }
            for &(vq, vg) in &freed {
                if vq == q {
                    continue;
                }
                let vs = &self.queues[vq as usize];
                if vs.quota[f].is_some_and(|qq| vs.usage[f] - left_in(vq) + vg <= qq.nominal) {
                    return true;
                }
            }
        }
        false
    }

    /// Stops the victims (a `Preempt` each, or, for one admitted earlier in this very cycle,
    /// its admission taken back) and nominates GPUs for `j`, which starts once they are gone.
    fn commit_preemption(
        &mut self,
        j: u32,
        f: usize,
        pick: Pick,
        drains: bool,
        now: Time,
        out: &mut Vec<Decision>,
    ) {
        let Pick { plan, keep, late } = pick;
        let preemptor = self.jobs[j as usize]
            .as_ref()
            .expect("job exists")
            .id
            .clone();
        // Victims stop counting against quota now; their GPUs stay theirs until evicted.
        let mut unlaunched: Vec<String> = Vec::new();
        for &(v, kind) in &keep {
            self.stop_running(v);
            let vj = self.jobs[v as usize].as_mut().expect("job exists");
            vj.state = St::Evicting;
            vj.preemptor = Some(j);
            vj.preempted_by.push(j);
            if let Some(at) = out
                .iter()
                .position(|d| matches!(d, Decision::Admit { id, .. } if *id == vj.id))
            {
                // Admitted earlier in this very cycle: nothing was launched, so the admission is
                // taken back rather than a start followed by a preemption (no work lost, no
                // restart, and never "admitted into a slot that at once preempts it").
                out.remove(at);
                unlaunched.push(vj.id.clone());
                continue;
            }
            let preemptor = preemptor.clone();
            let reason = match kind {
                Kind::Reclaim => PreemptReason::Reclaim { preemptor },
                Kind::Priority | Kind::Borrow => PreemptReason::Priority { preemptor },
                Kind::Loan => PreemptReason::LoanEnded { preemptor },
            };
            out.push(Decision::Preempt {
                id: vj.id.clone(),
                reason,
            });
        }
        let pods_at = self.nominate(j, f, &plan, &keep, &late);
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, r) = (job.queue, job.gpus());
        let fit = self.quota_fit(q, f, r, &[]);
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        let key = job.key(j);
        job.state = St::Nominated;
        job.flavor = f as u16;
        job.pods_at = pods_at;
        job.borrowed = fit == Fit::Borrow;
        job.protected = drains && fit == Fit::Borrow;
        job.victims_left = keep.len() as u32;
        self.queues[q as usize].pending.remove(&key);
        self.pend_remove(j);
        self.charge(q, f, r as i64);
        if keep.is_empty() {
            self.ready.push(j);
        }
        for h in &mut self.holder {
            if *h == Some(j) {
                *h = None;
            }
        }
        let undone = !unlaunched.is_empty();
        for id in unlaunched {
            self.evicted(&id).expect("an unlaunched victim is evicting");
        }
        if undone && let Some(at) = self.ready.iter().position(|&x| x == j) {
            self.ready.remove(at);
            self.start_nominated(j, now, out);
        }
    }

    /// GPUs for `j`'s pods on the planned nodes, idle ones first, then the victims' ones (on a
    /// reserved node only those of victims that outlast the gang's start); marks them
    /// nominated, and the idle ones held, so nothing else takes them meanwhile.
    fn nominate(
        &mut self,
        j: u32,
        f: usize,
        plan: &[(u32, u32)],
        keep: &[(u32, Kind)],
        late: &[(u32, u64)],
    ) -> Vec<(u32, u64)> {
        let g = self.jobs[j as usize].as_ref().expect("job exists").g;
        let mut victim_bits: HashMap<u32, u64> = HashMap::new();
        for &(v, _) in keep {
            for &(n, m) in &self.jobs[v as usize].as_ref().expect("job exists").pods_at {
                *victim_bits.entry(n).or_default() |= m;
            }
        }
        let mut pods_at = Vec::new();
        for &(n, count) in plan {
            let node = &self.pools[f].nodes[n as usize];
            let mut avail_free = node.free;
            let mut avail_victim = victim_bits.get(&n).copied().unwrap_or(0) & !node.nominated;
            if let Some(&(_, b)) = late.iter().find(|(x, _)| *x == n) {
                avail_free = 0;
                avail_victim &= b;
            }
            let mut took_free = 0u64;
            let mut took_victim = 0u64;
            for _ in 0..count {
                let mut m = 0u64;
                for _ in 0..g {
                    let src = if avail_free != 0 {
                        &mut avail_free
                    } else {
                        &mut avail_victim
                    };
                    let bit = *src & src.wrapping_neg();
                    *src &= !bit;
                    m |= bit;
                }
                took_free |= m & node.free;
                took_victim |= m & !node.free;
                pods_at.push((n, m));
            }
            let new_free = node.free & !took_free;
            let node = &mut self.pools[f].nodes[n as usize];
            node.nominated |= took_free | took_victim;
            node.held |= took_free;
            self.pools[f].set_free(n, new_free);
        }
        pods_at
    }

    /// A job's queue and GPUs (what it frees of that queue's quota).
    fn queue_and_gpus(&self, x: u32) -> (u32, u64) {
        let xj = self.jobs[x as usize].as_ref().expect("job exists");
        (xj.queue, xj.gpus())
    }

    /// Every unfinished job that preempted `j`, or preempted one of those, and so on: `j` may
    /// not preempt any of them, so preemptions of any kind (priority, reclaim, fair share, loans)
    /// can never close a cycle. A completion ends a chain (finished jobs are gone).
    pub(super) fn preemption_ancestors(&self, j: u32) -> HashSet<u32> {
        let mut seen: HashSet<u32> = HashSet::new();
        let mut stack: Vec<u32> = vec![j];
        while let Some(x) = stack.pop() {
            let Some(xj) = self.jobs[x as usize].as_ref() else {
                continue;
            };
            for &p in &xj.preempted_by {
                if p != j && seen.insert(p) {
                    stack.push(p);
                }
            }
        }
        seen
    }

    /// Whether another cohort member below its nominal quota has a waiting head that fits in it
    /// (and so would reclaim anything lent now, or, if its queue never reclaims, would wait for
    /// it: the owner's work goes first either way), or, with `hold_for_owed`, a single-pod head.
    pub(super) fn reclaim_pending(&self, q: u32, f: usize) -> bool {
        let Some(c) = self.queues[q as usize].cohort else {
            return false;
        };
        let qs = &self.queues[q as usize];
        let at_quota = qs.quota[f].is_some_and(|qq| qs.usage[f] >= qq.nominal);
        self.cohorts[c as usize].members.iter().any(|&m| {
            let ms = &self.queues[m as usize];
            // A held queue's waiting work is owed nothing: it could not take the GPUs anyway.
            if m == q || !ms.stop.is_none() {
                return false;
            }
            let (Some(qq), Some(head)) = (ms.quota[f], ms.pending.first()) else {
                return false;
            };
            let hj = self.jobs[head.3 as usize]
                .as_ref()
                .expect("pending job exists");
            // A single-pod head of a queue below its quota can use the next GPUs that free up
            // on any node: they are kept for it rather than lent beyond the borrower's quota.
            // Only a queue already at its quota waits so (two owed queues never wait for each
            // other).
            let owed =
                self.opts.hold_for_owed && at_quota && ms.usage[f] < qq.nominal && hj.pods == 1;
            hj.flavors.contains(&(f as u16))
                && (ms.usage[f] + hj.gpus() <= qq.nominal || owed)
                // `m` would not reclaim from `q` if `q` is owed more GPU-time (see `try_preempt`).
                && !self.deficit_ahead(q, m, hj.gpus())
        })
    }

    /// Whether queue `q`'s job `j` of `r` GPUs may reclaim lent quota in flavor `f`: it fits in
    /// its queue's nominal quota (the holder's own loans, which it takes back too, not counted)
    /// and some cohort member borrows.
    pub(super) fn may_reclaim(&self, j: u32, q: u32, f: usize, r: u64, fair: bool) -> bool {
        let qs = &self.queues[q as usize];
        let (Some(c), Some(qq)) = (qs.cohort, qs.quota[f]) else {
            return false;
        };
        if qs.preemption.reclaim_within_cohort == ReclaimWithinCohort::Never {
            return false;
        }
        // A job that must borrow may still take lower classes' borrowed work (the candidates
        // say whose).
        let borrowing = qs.preemption.borrow_within_cohort.is_some();
        let loans = if self.holder[f] == Some(j) {
            self.own_loans(q, f)
        } else {
            0
        };
        (qs.usage[f].saturating_sub(loans) + r <= qq.nominal || fair || borrowing)
            && self.cohorts[c as usize].members.iter().any(|&m| {
                let ms = &self.queues[m as usize];
                m != q && ms.quota[f].is_some_and(|x| ms.usage[f] > x.nominal)
            })
    }

    /// GPUs of queue `q`'s jobs running on loan in flavor `f`: the holder preempts them when
    /// its turn comes, so they do not stand between it and its nominal quota.
    fn own_loans(&self, q: u32, f: usize) -> u64 {
        self.loans[f]
            .iter()
            .filter_map(|&v| self.jobs[v as usize].as_ref())
            .filter(|v| v.queue == q)
            .map(|v| v.gpus())
            .sum()
    }
}

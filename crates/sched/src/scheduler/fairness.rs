//! Fair-share order of queue heads and the opt-in time-averaged fairness deficits.

use super::{Job, QueueState, Scheduler};
use crate::config::Time;

/// One side of a fair-sharing comparison in a cohort tree: a queue, or a cohort standing for
/// every queue under it (Kueue's hierarchical fair sharing compares two queues by the children
/// of the lowest cohort both are under).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Queue(u32),
    Cohort(u32),
}

/// A queue's path from the top of its tree down to itself (`Scheduler::fair_path`): each
/// side with its weighted borrowed share.
pub(super) type FairPath = Vec<(Side, u64)>;

/// Whether the first path's owner is not ahead of the second's in fair-share order: the
/// shares compared where the paths part (equal paths: the queue's own, then and now).
pub(super) fn not_richer(a: &[(Side, u64)], b: &[(Side, u64)]) -> bool {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x.0 != y.0)
        .unwrap_or(a.len().min(b.len()).saturating_sub(1));
    match (a.get(at), b.get(at)) {
        (Some(x), Some(y)) => x.1 <= y.1,
        _ => true,
    }
}

impl Scheduler {
    /// A side's GPUs in use of flavor `f`, its nominal GPUs there (0 without a quota) and its
    /// fair-share weight.
    fn side_load(&self, s: Side, f: usize) -> (u64, u64, f64) {
        match s {
            Side::Queue(q) => {
                let qs: &QueueState = &self.queues[q as usize];
                (qs.usage[f], qs.quota[f].map_or(0, |x| x.nominal), qs.weight)
            }
            Side::Cohort(c) => {
                let co = &self.cohorts[c as usize];
                (co.usage[f], co.nominal[f], co.weight)
            }
        }
    }

    /// A side's weighted GPUs in use beyond its nominal quota, all flavors (in thousandths):
    /// the lower, the sooner its work is tried.
    fn side_share(&self, s: Side) -> u64 {
        let borrowed: u64 = (0..self.pools.len())
            .map(|f| {
                let (u, n, _) = self.side_load(s, f);
                u.saturating_sub(n)
            })
            .sum();
        let (_, _, weight) = self.side_load(s, 0);
        ((borrowed as f64 / weight) * 1000.0) as u64
    }

    /// `side_share` in GPUs: what `QueueUsage` and `CohortUsage` report.
    pub(super) fn weighted_share(&self, s: Side) -> f64 {
        self.side_share(s) as f64 / 1000.0
    }

    /// A side's GPUs of flavor `f` in use, changed by `delta`, over its nominal GPUs there
    /// (weighted); `None` without nominal GPUs.
    pub(super) fn side_ratio(&self, s: Side, f: usize, delta: i64) -> Option<f64> {
        let (u, n, w) = self.side_load(s, f);
        (n > 0).then(|| (u as i64 + delta).max(0) as f64 / n as f64 / w)
    }

    /// How far over their quotas side `a` (its GPUs changed by `da`) and side `b` (by `db`)
    /// are, for fair-sharing preemption between them: between two queues by use over nominal
    /// GPUs (weighted), Ferry's measure; between departments (a side is a cohort) by GPUs
    /// borrowed beyond nominal (weighted), as Kueue's hierarchical fair sharing measures, as
    /// heads are ordered and as entitlements split spare GPUs.
    pub(super) fn side_shares(
        &self,
        (a, b): (Side, Side),
        f: usize,
        da: i64,
        db: i64,
    ) -> Option<(f64, f64)> {
        if !Self::across((a, b)) {
            return self.side_ratio(a, f, da).zip(self.side_ratio(b, f, db));
        }
        let borrowed = |s: Side, d: i64| {
            let (u, n, w) = self.side_load(s, f);
            ((u as i64 + d).max(0) as u64).saturating_sub(n) as f64 / w
        };
        Some((borrowed(a, da), borrowed(b, db)))
    }

    /// Whether two sides (`apart`) are departments rather than two queues of one cohort.
    pub(super) fn across((a, b): (Side, Side)) -> bool {
        !matches!((a, b), (Side::Queue(_), Side::Queue(_)))
    }

    /// How far a side's GPUs of flavor `f` in use, changed by `delta`, are from its nominal
    /// GPUs there, relative to them (0 without nominal GPUs).
    pub(super) fn side_gap(&self, s: Side, f: usize, delta: i64) -> f64 {
        let (u, n, _) = self.side_load(s, f);
        if n == 0 {
            return 0.0;
        }
        ((u as i64 + delta).max(0) as f64 / n as f64 - 1.0).abs()
    }

    /// Whether queue `q` is side `s` or under it.
    pub(super) fn under(&self, q: u32, s: Side) -> bool {
        match s {
            Side::Queue(x) => x == q,
            Side::Cohort(c) => {
                let mut up = self.queues[q as usize].pool;
                while let Some(x) = up {
                    if x == c {
                        return true;
                    }
                    up = self.cohorts[x as usize].parent;
                }
                false
            }
        }
    }

    /// The sides standing for queues `a` and `b` where their paths up the tree part: each the
    /// child, on its own path, of the lowest cohort both are under (the queues themselves when
    /// they share their direct cohort or are in different trees).
    pub(super) fn apart(&self, a: u32, b: u32) -> (Side, Side) {
        let flat = (Side::Queue(a), Side::Queue(b));
        let (Some(mut ca), Some(mut cb)) =
            (self.queues[a as usize].pool, self.queues[b as usize].pool)
        else {
            return flat;
        };
        let (mut sa, mut sb) = flat;
        while ca != cb {
            let (x, y) = (&self.cohorts[ca as usize], &self.cohorts[cb as usize]);
            if x.depth >= y.depth {
                sa = Side::Cohort(ca);
                let Some(p) = x.parent else { return flat };
                ca = p;
            } else {
                sb = Side::Cohort(cb);
                let Some(p) = y.parent else { return flat };
                cb = p;
            }
        }
        (sa, sb)
    }

    /// Queue `q`'s path from below its tree's root down to itself, each side with its share
    /// (`side_share`): fair sharing orders two queues by the shares where their paths part.
    pub(super) fn fair_path(&self, q: u32) -> FairPath {
        let mut path = vec![(Side::Queue(q), self.side_share(Side::Queue(q)))];
        let mut up = self.queues[q as usize].pool;
        while let Some(c) = up {
            let co = &self.cohorts[c as usize];
            if co.parent.is_none() {
                break;
            }
            path.push((Side::Cohort(c), self.side_share(Side::Cohort(c))));
            up = co.parent;
        }
        path.reverse();
        path
    }

    /// Brings every queue's fairness deficit up to `now`, from the state the last cycle left
    /// (nothing changes between cycles but events, and a cycle follows each): within a cohort
    /// where at least two members were saturated, each saturated member is owed the busy GPUs
    /// of the saturated members split by entitlement, and accrues what it is owed minus what it
    /// used; all deficits decay with `deficit_half_life_s`. With `Options::multifactor`, each
    /// queue's decayed usage also accrues the GPUs it used.
    pub(super) fn accrue(&mut self, now: Time) {
        let hl = self.opts.deficit_half_life_s;
        let mf = self.opts.multifactor.map_or(0, |m| m.decay_half_life_s);
        if hl == 0 && mf == 0 {
            return;
        }
        let Some(last) = self.last_accrual.replace(now) else {
            return;
        };
        if now <= last {
            return;
        }
        let dt = (now - last) as f64;
        if mf > 0 {
            let (decay, gain) = decay_over(dt, mf);
            for qs in &mut self.queues {
                qs.decayed_use = qs.decayed_use * decay + qs.used as f64 * gain;
            }
        }
        if hl == 0 {
            return;
        }
        let (decay, gain) = decay_over(dt, hl);
        for co in &self.cohorts {
            let sat: Vec<u32> = co
                .members
                .iter()
                .copied()
                .filter(|&m| self.queues[m as usize].saturated)
                .collect();
            let (mut busy, mut owed) = (0.0, 0.0);
            for &m in &sat {
                busy += self.queues[m as usize].used as f64;
                owed += self.queues[m as usize].entitled;
            }
            for &m in &co.members {
                let qs = &mut self.queues[m as usize];
                qs.deficit *= decay;
                if sat.len() >= 2 && owed > 0.0 && qs.saturated {
                    qs.deficit += (qs.entitled / owed * busy - qs.used as f64) * gain;
                }
            }
        }
    }

    /// Records, for `accrue`, which queues are saturated (work waiting, and running plus
    /// waiting GPUs at least the entitlement) and the GPUs each uses.
    pub(super) fn snapshot(&mut self) {
        if self.opts.deficit_half_life_s == 0 && self.opts.multifactor.is_none() {
            return;
        }
        for qs in &mut self.queues {
            qs.used = qs.usage.iter().sum();
            qs.saturated = qs.cohort.is_some()
                && qs.pending_gpus > 0
                && (qs.used + qs.pending_gpus) as f64 >= qs.entitled;
        }
    }

    /// Whether queue `a` is owed more GPU-time than `b` by more than `deficit_threshold_s`
    /// times `gpus` (then `b` may not reclaim a `gpus`-GPU job from `a`).
    pub(super) fn deficit_ahead(&self, a: u32, b: u32, gpus: u64) -> bool {
        let t = self.opts.deficit_threshold_s;

        self.opts.deficit_half_life_s > 0
            && t > 0
            && self.queues[a as usize].deficit - self.queues[b as usize].deficit > (t * gpus) as f64
    }

    /// Whether blocked job `a` goes before holder `b` for the reservation under
    /// `Options::reserve_by_key`: the more urgent priority first, then (with deficits on) the
    /// queue owed more GPU-time by the threshold, then the earlier duration-weighted key (the
    /// `order` a pending job's queue sorts it by).
    pub(super) fn before_by_owed_then_key(&self, a: &Job, b: &Job) -> bool {
        if a.prio != b.prio {
            return a.prio > b.prio;
        }
        if self.deficit_ahead(a.queue, b.queue, a.gpus()) {
            return true;
        }
        if self.deficit_ahead(b.queue, a.queue, a.gpus()) {
            return false;
        }
        a.order < b.order
    }

    /// Whether queue `q` got more than its due by at least `deficit_threshold_s` times `gpus`
    /// (then a `gpus`-GPU job of it does not take a new reservation).
    pub(super) fn deficit_overserved(&self, q: u32, gpus: u64) -> bool {
        let t = self.opts.deficit_threshold_s;
        self.opts.deficit_half_life_s > 0
            && t > 0
            && self.queues[q as usize].deficit <= -((t * gpus) as f64)
    }

    /// Slurm's multifactor priority of pending job `j` at `now` (`Options::multifactor`): the
    /// age factor, capped at the maximum age, plus the classic fair-share factor 2^(−U/S) of
    /// its queue (U: its part of all decayed usage; S: its part of the fair-share weights),
    /// plus its class as QOS.
    pub(super) fn multifactor_priority(&self, j: u32, now: Time) -> f64 {
        let Some(m) = self.opts.multifactor else {
            return 0.0;
        };
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let age = now.saturating_sub(job.created) as f64 / m.max_age_s.max(1) as f64;
        let total_use: f64 = self.queues.iter().map(|q| q.decayed_use).sum();
        let total_weight: f64 = self.queues.iter().map(|q| q.weight).sum();
        let qs = &self.queues[job.queue as usize];
        let fair_share = if qs.weight <= 0.0 || total_weight <= 0.0 {
            0.0
        } else if total_use > 0.0 {
            0.5f64.powf((qs.decayed_use / total_use) / (qs.weight / total_weight))
        } else {
            1.0
        };
        // QOS: the class's value over the highest class's; no positive class, no factor.
        let top = self.prio.values().map(|&(v, _)| v).max().unwrap_or(0);
        let qos = if top > 0 {
            f64::from(job.prio.max(0)) / f64::from(top)
        } else {
            0.0
        };
        f64::from(m.weight_age) * age.min(1.0)
            + f64::from(m.weight_fairshare) * fair_share
            + f64::from(m.weight_qos) * qos
    }
}

/// Over `dt` seconds with half-life `half_life_s`: the factor a decayed total is multiplied
/// by, and what a constant rate of 1 adds to it (the exact integral under the decay).
fn decay_over(dt: f64, half_life_s: u64) -> (f64, f64) {
    let decay = 0.5f64.powf(dt / half_life_s as f64);
    let gain = half_life_s as f64 / std::f64::consts::LN_2 * (1.0 - decay);
    (decay, gain)
}

//! Fair-share order of queue heads and the opt-in time-averaged fairness deficits.

use super::{Job, Scheduler};
use crate::config::Time;

impl Scheduler {
    pub(super) fn share(&self, q: u32) -> u64 {
        let qs = &self.queues[q as usize];
        let borrowed: u64 = qs
            .quota
            .iter()
            .zip(&qs.usage)
            .map(|(qq, u)| u.saturating_sub(qq.map_or(0, |x| x.nominal)))
            .sum();
        ((borrowed as f64 / qs.weight) * 1000.0) as u64
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

//! Reservations for blocked heads: which nodes a gang waits for, when its quota and
//! nodes free up, and whether its claim binds the whole cohort (draining).

use std::cmp::Reverse;

use super::{Fit, Job, Reservation, Scheduler};
use crate::config::Time;

impl Scheduler {
    /// Pending jobs on the critical path: expected to run longer than `critical_path_pct`
    /// percent of the time the cluster needs to clear all known work (running and pending), or,
    /// when no pending job is larger, than the lower bar of `critical_path_small_pct`; starting
    /// them later stretches the makespan (longest first, at most 8).
    pub(super) fn critical_jobs(&self, now: Time) -> Vec<u32> {
        if self.opts.critical_path_pct == 0 || self.long_pending.is_empty() {
            return Vec::new();
        }
        let mut work = self.pending_work;
        for ends in &self.ends {
            for &(e, r) in ends {
                let g = self.jobs[r as usize].as_ref().map_or(0, Job::gpus);
                work += (e.saturating_sub(now) * g) as f64;
            }
        }
        let cluster = self.total_gpus.max(1.0);
        let clear_s = work / cluster;
        let factor = f64::from(self.opts.critical_path_pct) / 100.0;
        let small = f64::from(self.opts.critical_path_small_pct) / 100.0;
        let largest = self.pending_sizes.last_key_value().map_or(0, |(&g, _)| g);
        // The bar a job must pass: the plain factor, or the lower one for a small job when
        // nothing larger waits (a gang that needs its node would wait out its whole run).
        let bar = |gpus: u64| {
            if small > 0.0 && gpus >= largest {
                let share = (gpus as f64 / cluster).min(1.0);
                clear_s * (small + (factor - small) * share).min(factor)
            } else {
                clear_s * factor
            }
        };
        // Priorities still come first, and a blocked gang keeps its claim: a critical job only
        // goes early when it is of the most urgent pending priority, and each flavor it may use
        // already has its reservation holder (who went before it this cycle) or the oldest
        // pending job is no larger than it (so no gang is passed before it could reserve).
        let oldest = self.by_age.first().copied();
        let top = oldest.map(|(Reverse(p), _, _)| p);
        let oldest_gpus =
            oldest.and_then(|(_, _, o)| self.jobs[o as usize].as_ref().map(Job::gpus));
        // A job below the plain bar may still pass the lower one, so the longest few are all
        // looked at (a job is never longer than one before it: the lowest bar ends the scan).
        let lowest = clear_s
            * if small > 0.0 {
                small.min(factor)
            } else {
                factor
            };
        self.long_pending
            .iter()
            .take_while(|(Reverse(e), _)| *e as f64 > lowest)
            .take(64)
            .filter(|&&(Reverse(e), j)| {
                let g = self.jobs[j as usize].as_ref().map_or(0, Job::gpus);
                e as f64 > bar(g)
            })
            .take(8)
            .map(|&(_, j)| j)
            .filter(|&j| {
                let job = self.jobs[j as usize].as_ref().expect("pending job exists");
                top.is_none_or(|t| job.prio >= t)
                    && (oldest_gpus.is_none_or(|g| g <= job.gpus())
                        || job
                            .flavors
                            .iter()
                            .all(|&f| self.holder[usize::from(f)].is_some()))
            })
            .collect()
    }

    /// Picks nodes for the blocked head `j` and takes them out of the index for this cycle.
    pub(super) fn reserve(&mut self, j: u32, f: usize, now: Time) -> Reservation {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (pods, g, within) = (u64::from(job.pods), job.g, job.required_within());
        let fs = self.free_for_holder(f);
        let (nodes, shadow) = match within {
            Some(level) => self.reserve_within(f, level, fs, pods, g, now),
            None if self.rack_sensitive(j, f) => {
                let anywhere = self.reserve_anywhere(f, fs.clone(), pods, g, now);
                self.reserve_rack_if_it_pays(j, f, fs, anywhere, now)
            }
            None => self.reserve_anywhere(f, fs, pods, g, now),
        };
        for &n in &nodes {
            self.pools[f].index_remove(n);
        }
        Reservation {
            nodes,
            shadow,
            ..Reservation::default()
        }
    }

    /// Each node's free GPUs in flavor `f` as a reservation holder counts them: idle GPUs of
    /// indexed nodes, and lent GPUs, which come back whenever the gang needs them.
    pub(super) fn free_for_holder(&self, f: usize) -> Vec<u32> {
        let pool = &self.pools[f];
        let mut fs: Vec<u32> = pool
            .nodes
            .iter()
            .map(|n| if n.in_index { n.free.count_ones() } else { 0 })
            .collect();
        for &l in &self.loans[f] {
            let lj = self.jobs[l as usize].as_ref().expect("loaned job exists");
            for &(n, m) in &lj.pods_at {
                if pool.nodes[n as usize].in_index {
                    fs[n as usize] += m.count_ones();
                }
            }
        }
        fs
    }

    /// Nodes of flavor `f` for a gang of `pods` pods of `g` GPUs, given each node's free GPUs
    /// now (`fs`, lent GPUs counted), and when they hold it: the nodes with the most room once
    /// enough known work has ended.
    pub(super) fn reserve_anywhere(
        &self,
        f: usize,
        mut fs: Vec<u32>,
        pods: u64,
        g: u32,
        now: Time,
    ) -> (Vec<u32>, Option<Time>) {
        let mut cap: u64 = fs.iter().map(|k| u64::from(k / g)).sum();
        let shadow = if cap >= pods {
            Some(now)
        } else {
            self.free_as_work_ends(f, &mut fs, |_, before, after| {
                cap = cap - u64::from(before / g) + u64::from(after / g);
                cap >= pods
            })
            .map(|end| end.max(now))
        };
        (self.roomiest(f, &fs, 0..fs.len() as u32, pods, g), shadow)
    }

    /// Nodes for a gang of `pods` pods of `g` GPUs that must stay in one domain of topology
    /// `level`, given each node's free GPUs now (`fs`, lent GPUs counted), and when they hold
    /// it: the first domain to hold it as known work ends (the one with least to spare), else
    /// the one that holds the most.
    pub(super) fn reserve_within(
        &self,
        f: usize,
        level: usize,
        mut fs: Vec<u32>,
        pods: u64,
        g: u32,
        now: Time,
    ) -> (Vec<u32>, Option<Time>) {
        let pool = &self.pools[f];
        let dom = |n: usize| pool.nodes[n].dom[level] as usize;
        let mut cap = vec![0u64; pool.domain_count(level)];
        for (n, &k) in fs.iter().enumerate() {
            cap[dom(n)] += u64::from(k / g);
        }
        let fits = |cap: &[u64]| {
            cap.iter()
                .enumerate()
                .filter(|&(_, &c)| c >= pods)
                .min_by_key(|&(d, &c)| (c, d))
                .map(|(d, _)| d)
        };
        let mut at = fits(&cap).map(|d| (d, now));
        if at.is_none() {
            let end = self.free_as_work_ends(f, &mut fs, |n, before, after| {
                let d = dom(n);
                cap[d] = cap[d] - u64::from(before / g) + u64::from(after / g);
                cap[d] >= pods
            });
            at = end.and_then(|end| Some((fits(&cap)?, end.max(now))));
        }
        let d = at.map_or_else(
            || {
                (0..cap.len())
                    .max_by_key(|&d| (cap[d], Reverse(d)))
                    .unwrap_or(0)
            },
            |(d, _)| d,
        );
        let in_domain = (0..fs.len() as u32).filter(|&n| dom(n as usize) == d);
        (
            self.roomiest(f, &fs, in_domain, pods, g),
            at.map(|(_, t)| t),
        )
    }

    /// Frees, in order of expected end, the GPUs of flavor `f`'s running work (not on loan) on
    /// indexed nodes in `fs`, telling `freed` each node's free GPUs before and after; returns
    /// the end after which `freed` last said the gang fits, `None` if it never did.
    fn free_as_work_ends(
        &self,
        f: usize,
        fs: &mut [u32],
        mut freed: impl FnMut(usize, u32, u32) -> bool,
    ) -> Option<Time> {
        let pool = &self.pools[f];
        for &(end, r) in &self.ends[f] {
            let rj = self.jobs[r as usize].as_ref().expect("running job exists");
            if rj.on_loan {
                continue;
            }
            let mut fits = false;
            for &(n, m) in &rj.pods_at {
                let node = &pool.nodes[n as usize];
                if !node.in_index {
                    continue;
                }
                let before = fs[n as usize];
                fs[n as usize] = (before + m.count_ones()).min(node.cap);
                fits |= freed(n as usize, before, fs[n as usize]);
            }
            if fits {
                return Some(end);
            }
        }
        None
    }

    /// Of `nodes`, those with the most room (`fs`: free GPUs when the gang can start) until
    /// they host `pods` pods of `g` GPUs, ties to the node with fewer GPUs free now.
    fn roomiest(
        &self,
        f: usize,
        fs: &[u32],
        nodes: impl Iterator<Item = u32>,
        pods: u64,
        g: u32,
    ) -> Vec<u32> {
        let pool = &self.pools[f];
        let mut order: Vec<u32> = nodes.filter(|&n| fs[n as usize] >= g).collect();
        order.sort_by_key(|&n| {
            (
                Reverse(fs[n as usize]),
                pool.nodes[n as usize].free.count_ones(),
                n,
            )
        });
        let mut got = 0u64;
        let mut chosen = Vec::new();
        for n in order {
            if got >= pods {
                break;
            }
            got += u64::from(fs[n as usize] / g);
            chosen.push(n);
        }
        chosen
    }

    /// When the quota `j` needs will be free, counting only known ends of work sharing it.
    pub(super) fn quota_shadow(&self, j: u32, f: usize, now: Time) -> Option<Time> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, r) = (job.queue, job.gpus());
        if self.quota_fit(q, f, r, &[]) != Fit::No {
            return Some(now);
        }
        let mut freed: Vec<(u32, u64)> = Vec::new();
        for &(end, x) in &self.ends[f] {
            let xq = self.jobs[x as usize]
                .as_ref()
                .expect("running job exists")
                .queue;
            if !self.shares_quota(q, xq) {
                continue;
            }
            let gpus = self.jobs[x as usize].as_ref().expect("job exists").gpus();
            match freed.iter_mut().find(|(y, _)| *y == xq) {
                Some((_, a)) => *a += gpus,
                None => freed.push((xq, gpus)),
            }
            if self.quota_fit(q, f, r, &freed) != Fit::No {
                return Some(end.max(now));
            }
        }
        None
    }

    /// Whether `j` holds (or, with no holder yet, would hold) flavor `f`'s reservation with a
    /// binding claim on its cohort: its queue gets less than its nominal quota, so it is owed
    /// capacity that others are using, and the gang would not take it further past that
    /// quota than `Options::drain_overshoot_pct` allows.
    pub(super) fn drains(&self, j: u32, f: usize) -> bool {
        self.opts.drain_for_holder
            && self.opts.backfill
            && self.holder[f].is_none_or(|h| h == j)
            && self.jobs[j as usize].as_ref().is_some_and(|job| {
                let qs = &self.queues[job.queue as usize];
                let (u, r) = (qs.usage[f], job.gpus());
                qs.quota[f].is_some_and(|qq| {
                    u < qq.nominal
                        && self.opts.drain_overshoot_pct.is_none_or(|pct| {
                            u + r <= qq.nominal.max(r) + qq.nominal * u64::from(pct) / 100
                        })
                })
            })
    }
}

//! Events the control plane reports (a submit, a checkpoint, measured progress, a finish, an
//! eviction) and the bookkeeping each one does.

use super::{Job, Scheduler, St};
use crate::config::{
    ANY_FLAVOR, DEFAULT_PRIORITY, MAX_SPLIT_SLOWDOWN_PCT, PodPlacement, Time, Workload,
};
use crate::error::{Result, SchedError};

impl Scheduler {
    /// Accepts a workload, or says why it could never run (so it is not stuck forever).
    pub fn submit(&mut self, w: Workload) -> Result<()> {
        let bad = |field: &str, problem: String, fix: String| SchedError::InvalidWorkload {
            id: w.id.clone(),
            field: field.to_string(),
            problem,
            fix,
        };
        if self.ids.contains_key(&w.id) {
            return Err(bad(
                "workload.id",
                format!("id `{}` is already known", w.id),
                "use a fresh id".into(),
            ));
        }
        let Some(&q) = self.queue_idx.get(&w.queue) else {
            let (problem, fix) =
                crate::error::unknown_queue(&w.queue, self.queues.iter().map(|q| q.name.as_str()));
            return Err(bad("workload.queue", problem, fix));
        };
        let (prio, preempts) = match &w.priority {
            // Unnamed is `normal`, whatever value the cluster gives that class.
            None => self
                .prio
                .get(DEFAULT_PRIORITY)
                .copied()
                .unwrap_or((0, true)),
            Some(p) => match self.prio.get(p) {
                Some(v) => *v,
                None => {
                    let classes = self.prio.iter().map(|(n, &(v, _))| (n.as_str(), v));
                    let (problem, fix) = crate::error::unknown_priority(p, classes);
                    return Err(bad("workload.priority", problem, fix));
                }
            },
        };
        if w.pods == 0 || w.gpus_per_pod == 0 {
            return Err(bad(
                "workload.pods",
                format!(
                    "gang of {} pods x {} GPUs asks for nothing",
                    w.pods, w.gpus_per_pod
                ),
                "ask for at least one pod with at least one GPU".into(),
            ));
        }
        if let Some(pct) = w.split_slowdown_pct.filter(|&p| p > MAX_SPLIT_SLOWDOWN_PCT) {
            return Err(bad(
                "workload.splitSlowdownPct",
                format!("{pct}% is more than {MAX_SPLIT_SLOWDOWN_PCT}%"),
                format!(
                    "give how much longer it runs split across racks, 0 to {MAX_SPLIT_SLOWDOWN_PCT}"
                ),
            ));
        }
        let flavor_req = match &w.flavor {
            None => None,
            Some(f) if f == ANY_FLAVOR => None,
            Some(f) => match self.pool_idx.get(f) {
                Some(i) => Some(*i),
                None => {
                    return Err(bad(
                        "workload.flavor",
                        format!("no node has flavor `{f}`"),
                        "use a flavor present in the cluster or leave it unset".into(),
                    ));
                }
            },
        };
        let flavors: Vec<usize> = match flavor_req {
            Some(f) => vec![f as usize],
            None => (0..self.pools.len())
                .filter(|&f| self.queues[q as usize].quota[f].is_some())
                .collect(),
        };
        let gpus = w.gpus();
        let mut why = Vec::new();
        let feasible: Vec<u16> = flavors
            .iter()
            .copied()
            .filter(|&f| {
                let p = &self.pools[f];
                let fit_nodes: u64 = p
                    .cap_hist
                    .iter()
                    .map(|(cap, count)| u64::from(cap / w.gpus_per_pod) * count)
                    .sum();
                let quota = self.max_quota(q, f);
                let in_one = w
                    .topology
                    .map(|t| (t, p.largest_domain_pods(t.level(), w.gpus_per_pod)));
                if fit_nodes < u64::from(w.pods) {
                    why.push(format!(
                        "flavor `{}` can host at most {fit_nodes} pods of {} GPUs",
                        p.name, w.gpus_per_pod
                    ));
                    false
                } else if let Some((t, most)) = in_one
                    && most < u64::from(w.pods)
                {
                    why.push(format!(
                        "one {} of flavor `{}` can host at most {most} pods of {} GPUs \
                         (`topology: {}` keeps the gang in one)",
                        t.noun(),
                        p.name,
                        w.gpus_per_pod,
                        t.name()
                    ));
                    false
                } else if quota < gpus {
                    why.push(format!(
                        "queue `{}` can use at most {quota} `{}` GPUs including borrowing",
                        w.queue, p.name
                    ));
                    false
                } else {
                    true
                }
            })
            .map(|f| f as u16)
            .collect();
        if feasible.is_empty() {
            if flavors.is_empty() {
                why.push(format!("queue `{}` has no quota for this flavor", w.queue));
            }
            return Err(bad(
                "workload.pods",
                format!(
                    "gang of {} pods x {} GPUs can never be admitted: {}",
                    w.pods,
                    w.gpus_per_pod,
                    why.join("; ")
                ),
                if w.topology.is_some() {
                    "shrink the gang, drop its topology requirement, raise the queue's quota, or \
                     add nodes"
                } else {
                    "shrink the gang, raise the queue's quota, or add nodes"
                }
                .into(),
            ));
        }
        let idx = self.jobs.len() as u32;
        self.seq += 1;
        let job = Job {
            id: w.id.clone(),
            queue: q,
            prio,
            preempts,
            created: w.created_at,
            order: 0,
            seq: self.seq,
            pods: w.pods,
            g: w.gpus_per_pod,
            topology: w.topology,
            flavors: feasible,
            expected: w.expected_duration_s,
            state: St::Pending,
            flavor: 0,
            pods_at: Vec::new(),
            admitted_at: 0,
            last_ckpt: None,
            borrowed: false,
            preempted_by: Vec::new(),
            victims_left: 0,
            preemptor: None,
            on_loan: false,
            protected: false,
            split_pct: w.split_slowdown_pct.unwrap_or(self.opts.split_slowdown_pct),
            waits_for_rack: false,
            stretch_pct: 0,
        };
        let mut job = job;
        job.order = self.order_of(&job);
        let qs = &mut self.queues[q as usize];
        qs.pending.insert(job.key(idx));
        qs.dirty = true;
        self.jobs.push(Some(job));
        self.pend_add(idx);
        self.ids.insert(w.id, idx);
        Ok(())
    }

    /// Re-registers a workload that is already running on exactly `placement` (one entry per
    /// pod), as a restarted control plane finds it: no decision is emitted and nothing is
    /// preempted; its GPUs and quota are charged as if it had been admitted at `admitted_at`.
    pub fn restore(
        &mut self,
        w: Workload,
        placement: &[PodPlacement],
        admitted_at: Time,
    ) -> Result<()> {
        let id = w.id.clone();
        let bad = |problem: String| SchedError::InvalidWorkload {
            id: id.clone(),
            field: "placement".into(),
            problem,
            fix: "restore a workload only where it really runs, on GPUs nobody else holds".into(),
        };
        if placement.len() != w.pods as usize {
            return Err(bad(format!(
                "{} pods placed for a gang of {}",
                placement.len(),
                w.pods
            )));
        }
        // Resolve every pod to (flavor, node, mask) before changing anything.
        let mut flavor: Option<usize> = None;
        let mut pods: Vec<(u32, u64)> = Vec::with_capacity(placement.len());
        for p in placement {
            let found = self.pools.iter().enumerate().find_map(|(f, pool)| {
                pool.nodes
                    .iter()
                    .position(|n| n.name == p.node)
                    .map(|n| (f, n as u32))
            });
            let Some((f, n)) = found else {
                return Err(bad(format!("node `{}` is not in the cluster", p.node)));
            };
            if flavor.is_some_and(|x| x != f) {
                return Err(bad("a gang's pods span two flavors".into()));
            }
            flavor = Some(f);
            let node = &self.pools[f].nodes[n as usize];
            if p.gpus.len() != w.gpus_per_pod as usize {
                return Err(bad(format!(
                    "pod on `{}` lists {} GPUs, the gang asks {} per pod",
                    p.node,
                    p.gpus.len(),
                    w.gpus_per_pod
                )));
            }
            let mut mask = 0u64;
            for &g in &p.gpus {
                if g >= node.cap {
                    return Err(bad(format!("node `{}` has no GPU {g}", p.node)));
                }
                mask |= 1u64 << g;
            }
            let claimed: u64 = pods
                .iter()
                .filter(|(node_ix, _)| *node_ix == n)
                .fold(0, |acc, (_, bits)| acc | bits);
            if node.free & mask != mask || claimed & mask != 0 {
                return Err(bad(format!(
                    "GPUs {:?} of node `{}` are already held",
                    p.gpus, p.node
                )));
            }
            pods.push((n, mask));
        }
        let f = flavor.ok_or_else(|| bad("an empty placement".into()))?;
        self.submit(w)?;
        let j = self.ids[&id];
        let job = self.jobs[j as usize].as_ref().expect("just submitted");
        if !job.flavors.contains(&(f as u16)) {
            let name = self.pools[f].name.clone();
            self.finished(&id)?;
            return Err(bad(format!(
                "its queue has no quota for flavor `{name}` where it runs"
            )));
        }
        let (q, key, gpus, prio) = (job.queue, job.key(j), job.gpus(), job.prio);
        for &(n, m) in &pods {
            let free = self.pools[f].nodes[n as usize].free & !m;
            self.pools[f].set_free(n, free);
        }
        self.queues[q as usize].pending.remove(&key);
        self.pend_remove(j);
        self.charge(q, f, gpus as i64);
        let qs = &self.queues[q as usize];
        let borrowed = qs.quota[f].is_some_and(|x| qs.usage[f] > x.nominal);
        self.mark_running(j, f, pods, admitted_at, borrowed);
        self.queues[q as usize].running.insert((prio, j));
        self.mark_all_dirty();
        Ok(())
    }

    /// Where a pending job sorts within its priority level: its creation time, pushed back by
    /// `Options::duration_weight` times its expected duration (unknown: by age alone).
    fn order_of(&self, job: &Job) -> u64 {
        let w = u64::from(self.opts.duration_weight);
        job.created
            .saturating_add(job.expected.unwrap_or(0).saturating_mul(w))
    }

    /// `lookup`, for an event only a workload in `state` can have; `problem` says why not.
    fn lookup_in(&self, id: &str, event: &'static str, state: St, problem: &str) -> Result<u32> {
        let j = self.lookup(id, event)?;
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        if job.state != state {
            return Err(SchedError::UnknownWorkload {
                id: id.to_string(),
                event,
                problem: problem.into(),
            });
        }
        Ok(j)
    }

    fn lookup(&self, id: &str, event: &'static str) -> Result<u32> {
        self.ids
            .get(id)
            .copied()
            .ok_or_else(|| SchedError::UnknownWorkload {
                id: id.to_string(),
                event,
                problem: "no such workload (never submitted, or already finished)".into(),
            })
    }

    /// Records that a running workload saved a checkpoint at `at` (victims lose least work).
    pub fn checkpointed(&mut self, id: &str, at: Time) -> Result<()> {
        let j = self.lookup(id, "checkpointed")?;
        let job = self.jobs[j as usize].as_mut().expect("indexed job exists");
        job.last_ckpt = Some(job.last_ckpt.map_or(at, |c| c.max(at)));
        Ok(())
    }

    /// Records a running workload's measured progress: it expects to run `remaining_s` more
    /// seconds from `now` (from its step rate). Its expected end moves there, so reservations
    /// are planned, and work backfilled, around when it will really end; a job submitted
    /// without an expected duration gets one.
    pub fn progress(&mut self, id: &str, now: Time, remaining_s: u64) -> Result<()> {
        let j = self.lookup_in(id, "progress", St::Running, "the workload is not running")?;
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        let expected = now.saturating_sub(job.admitted_at) + remaining_s.max(1);
        if self.set_running_expected(j, Some(expected)) {
            // A reservation's start (and what may backfill before it) depends on this end.
            self.mark_all_dirty();
        }
        Ok(())
    }

    /// Gives the running job `j` a new expected duration and keeps the index of running ends
    /// in step; returns whether its expected end moved.
    fn set_running_expected(&mut self, j: u32, expected: Option<u64>) -> bool {
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        let (f, old_end) = (job.flavor as usize, job.end());
        self.track_end(f, j, old_end, false);
        let job = self.jobs[j as usize].as_mut().expect("indexed job exists");
        job.expected = expected;
        let end = job.end();
        self.track_end(f, j, end, true);
        old_end != end
    }

    /// Replaces a workload's expected duration, as when its time limit is raised or cut after
    /// submit: a pending one re-sorts (duration weighting) and is backfilled by the new
    /// duration; a running one is expected to end `expected_s` after its admission (`None`:
    /// unknown, so reservations no longer count on its end). A measured pace
    /// (`Scheduler::progress`) is the better estimate for a running job; callers give this
    /// only while there is none.
    pub fn set_expected_duration(&mut self, id: &str, expected_s: Option<u64>) -> Result<()> {
        let j = self.lookup(id, "expected duration")?;
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        let expected_s = expected_s.map(|e| e.max(1));
        if job.expected == expected_s {
            return Ok(());
        }
        match job.state {
            St::Pending => {
                let (q, old_key) = (job.queue, job.key(j));
                self.pend_remove(j);
                self.queues[q as usize].pending.remove(&old_key);
                let mut job = self.jobs[j as usize].take().expect("indexed job exists");
                job.expected = expected_s;
                job.order = self.order_of(&job);
                self.queues[q as usize].pending.insert(job.key(j));
                self.jobs[j as usize] = Some(job);
                self.pend_add(j);
            }
            St::Running => {
                self.set_running_expected(j, expected_s);
            }
            // Not indexed by duration while it waits for victims or stops.
            St::Nominated | St::Evicting => {
                self.jobs[j as usize]
                    .as_mut()
                    .expect("indexed job exists")
                    .expected = expected_s;
            }
        }
        self.mark_all_dirty();
        Ok(())
    }

    pub(super) fn charge(&mut self, q: u32, f: usize, delta: i64) {
        let qs = &mut self.queues[q as usize];
        let old = qs.usage[f];
        let new = old
            .checked_add_signed(delta)
            .expect("usage stays non-negative");
        qs.usage[f] = new;
        let pool = qs.pool;
        if let Some((c, qq)) = pool.zip(qs.quota[f]) {
            self.pool_change(f, c, qq.pooled(old), qq.pooled(new));
        }
        let mut up = pool;
        while let Some(c) = up {
            let co = &mut self.cohorts[c as usize];
            co.usage[f] = co.usage[f]
                .checked_add_signed(delta)
                .expect("usage stays non-negative");
            up = co.parent;
        }
    }

    pub(super) fn mark_all_dirty(&mut self) {
        for q in &mut self.queues {
            q.dirty = true;
        }
    }

    /// Frees a running or evicting job's GPUs and quota bookkeeping.
    fn release_gpus(&mut self, j: u32) {
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        let f = job.flavor as usize;
        let pods = std::mem::take(&mut job.pods_at);
        for (n, m) in pods {
            self.pools[f].release(n, m);
        }
    }

    pub(super) fn stop_running(&mut self, j: u32) {
        // Quota and indexes of a running job (not its GPUs).
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, f, gpus, prio, end) = (
            job.queue,
            job.flavor as usize,
            job.gpus(),
            job.prio,
            job.end(),
        );
        self.charge(q, f, -(gpus as i64));
        self.queues[q as usize].running.remove(&(prio, j));
        self.track_end(f, j, end, false);
        self.loans[f].remove(&j);
    }

    fn victim_gone(&mut self, victim: u32) {
        let Some(p) = self.jobs[victim as usize]
            .as_mut()
            .and_then(|v| v.preemptor.take())
        else {
            return;
        };
        if let Some(pj) = self.jobs[p as usize].as_mut()
            && pj.state == St::Nominated
        {
            pj.victims_left -= 1;
            if pj.victims_left == 0 {
                self.ready.push(p);
            }
        }
    }

    /// The workload ended (completed, failed or cancelled) in any state; its GPUs are free.
    pub fn finished(&mut self, id: &str) -> Result<()> {
        let j = self.lookup(id, "finished")?;
        let state = self.jobs[j as usize].as_ref().expect("job exists").state;
        match state {
            St::Pending => {
                let job = self.jobs[j as usize].as_ref().expect("job exists");
                let key = job.key(j);
                self.queues[job.queue as usize].pending.remove(&key);
                self.pend_remove(j);
            }
            St::Nominated => {
                let job = self.jobs[j as usize].as_mut().expect("job exists");
                let (q, f, gpus) = (job.queue, job.flavor as usize, job.gpus());
                let pods = std::mem::take(&mut job.pods_at);
                for (n, m) in pods {
                    let node = &mut self.pools[f].nodes[n as usize];
                    let idle = m & node.held;
                    node.held &= !m;
                    node.nominated &= !m;
                    let free = node.free | idle;
                    self.pools[f].set_free(n, free);
                }
                self.ready.retain(|&r| r != j);
                self.charge(q, f, -(gpus as i64));
            }
            St::Running => {
                self.stop_running(j);
                self.release_gpus(j);
            }
            St::Evicting => {
                self.release_gpus(j);
                self.victim_gone(j);
            }
        }
        for h in &mut self.holder {
            if *h == Some(j) {
                *h = None;
            }
        }
        self.jobs[j as usize] = None;
        self.ids.remove(id);
        self.mark_all_dirty();
        Ok(())
    }

    /// A preempted workload's processes have exited: its GPUs go to the preemptor and it is requeued.
    pub fn evicted(&mut self, id: &str) -> Result<()> {
        let j = self.lookup_in(
            id,
            "evicted",
            St::Evicting,
            "the workload was not asked to stop by a Preempt decision",
        )?;
        self.release_gpus(j);
        self.victim_gone(j);
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.state = St::Pending;
        job.borrowed = false;
        job.on_loan = false;
        job.protected = false;
        // Work up to the last checkpoint is kept: expect only the rest.
        if let (Some(e), Some(c)) = (job.expected, job.last_ckpt)
            && c >= job.admitted_at
        {
            job.expected = Some(e.saturating_sub(c - job.admitted_at).max(1));
        }
        job.unstretch();
        let order = self.order_of(self.jobs[j as usize].as_ref().expect("job exists"));
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.order = order;
        let (q, key) = (job.queue, job.key(j));
        self.queues[q as usize].pending.insert(key);
        self.pend_add(j);
        self.mark_all_dirty();
        Ok(())
    }
}

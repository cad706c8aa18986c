//! A gang split across racks runs longer (`Workload::split_slowdown_pct`, else
//! `Options::split_slowdown_pct`): whether a gang that only prefers one rack starts split now
//! or waits for one rack, and how much later a split gang is expected to end.

use super::{Job, Scheduler};
use crate::config::{Time, Topology};

/// The placement index's level of racks.
const RACK: usize = Topology::Rack.level();

impl Scheduler {
    /// Whether `j`'s run time in flavor `f` depends on staying in one rack: its slowdown is
    /// set, it is a gang that does not require a rack and whose run time is known, and one
    /// rack of the flavor could hold it.
    pub(super) fn rack_sensitive(&self, j: u32, f: usize) -> bool {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let pool = &self.pools[f];
        job.split_pct > 0
            && job.topology.is_none()
            && job.pods >= 2
            && job.expected.is_some()
            && pool.groups(RACK)
            && pool.largest_domain_pods(RACK, job.g) >= u64::from(job.pods)
    }

    /// The stretch (percent) of `j`'s run on `nodes` of flavor `f`: the slowdown when it is
    /// rack-sensitive and the nodes span racks, else 0.
    pub(super) fn split_stretch(&self, j: u32, f: usize, nodes: impl Iterator<Item = u32>) -> u32 {
        let pct = self.jobs[j as usize]
            .as_ref()
            .expect("job exists")
            .split_pct;
        // The span (one pass over the pods) before the rest (one over the flavor's nodes).
        if pct > 0 && self.pools[f].spans(RACK, nodes) && self.rack_sensitive(j, f) {
            pct
        } else {
            0
        }
    }

    /// Whether `j`, placeable now on `plan` (node, pods) across racks, had better wait for one
    /// rack (`rack_pays`); if so it is marked to wait for one (`Job::waits_for_rack`).
    pub(super) fn waits_for_rack(
        &mut self,
        j: u32,
        f: usize,
        plan: &[(u32, u32)],
        now: Time,
    ) -> bool {
        if self.split_stretch(j, f, plan.iter().map(|&(n, _)| n)) == 0 {
            return false;
        }
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (pods, g) = (u64::from(job.pods), job.g);
        let fs = self.free_for_holder(f);
        let (_, rack) = self.reserve_within(f, RACK, fs, pods, g, now);
        let wait = self.rack_pays(j, rack, Some(now));
        self.jobs[j as usize]
            .as_mut()
            .expect("job exists")
            .waits_for_rack = wait;
        wait
    }

    /// A reservation for rack-sensitive `j` in flavor `f`: `anywhere` (nodes, start), unless
    /// its nodes span racks and waiting for the first rack to hold the gang (by `fs`, free GPUs
    /// now) pays (`rack_pays`); then that rack's, and `j` waits for one rack.
    pub(super) fn reserve_rack_if_it_pays(
        &mut self,
        j: u32,
        f: usize,
        fs: Vec<u32>,
        anywhere: (Vec<u32>, Option<Time>),
        now: Time,
    ) -> (Vec<u32>, Option<Time>) {
        let rack = (self.split_stretch(j, f, anywhere.0.iter().copied()) > 0)
            .then(|| {
                let job = self.jobs[j as usize].as_ref().expect("job exists");
                self.reserve_within(f, RACK, fs, u64::from(job.pods), job.g, now)
            })
            .filter(|rack| self.rack_pays(j, rack.1, anywhere.1));
        self.jobs[j as usize]
            .as_mut()
            .expect("job exists")
            .waits_for_rack = rack.is_some();
        rack.unwrap_or(anywhere)
    }

    /// Whether `j` had better start in one rack at `rack` than split across racks at `split`
    /// (each `None` when unknown: a known start wins). Waiting delays `j` alone (the GPUs it
    /// leaves idle go to backfill); running split delays `j` by its stretch and holds its GPUs
    /// that much longer, which delays the pending work behind it by about the stretch times
    /// its share of the cluster, each. So it waits while the wait is shorter than the stretch
    /// times (1 + other pending jobs × its GPUs / the cluster's).
    fn rack_pays(&self, j: u32, rack: Option<Time>, split: Option<Time>) -> bool {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        match (rack, split) {
            (Some(r), Some(s)) => {
                let d = job.expected.unwrap_or(0);
                let stretch = (stretched(d, job.split_pct) - d) as f64;
                let others = self.by_age.len().saturating_sub(1) as f64;
                let behind = others * job.gpus() as f64 / self.total_gpus.max(1.0);
                (r.saturating_sub(s) as f64) < stretch * (1.0 + behind)
            }
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

impl Job {
    /// Starts a run stretched by `pct` percent: its expected duration is that much longer.
    pub(super) fn stretch(&mut self, pct: u32) {
        self.stretch_pct = pct;
        self.expected = self.expected.map(|e| stretched(e, pct));
    }

    /// Ends a stretched run: what remains of its expected duration is at the unsplit pace.
    pub(super) fn unstretch(&mut self) {
        let pct = std::mem::take(&mut self.stretch_pct);
        self.expected = self.expected.map(|e| unstretched(e, pct).max(1));
    }
}

/// `d` seconds stretched by `pct` percent (rounded up): a split run's wall-clock time.
pub(crate) fn stretched(d: u64, pct: u32) -> u64 {
    (d * (100 + u64::from(pct))).div_ceil(100)
}

/// The unsplit pace's seconds in `d` seconds of a run stretched by `pct` percent (rounded
/// down): the work a split run did.
pub(crate) fn unstretched(d: u64, pct: u32) -> u64 {
    d * 100 / (100 + u64::from(pct))
}

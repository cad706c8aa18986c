//! When every waiting workload can expect to start (Slurm's `squeue --start`), not only the one
//! first in line: a copy of the scheduler replays its own cycles forward in virtual time with no
//! new arrivals, running work ending at its expected end.
//!
//! A reservation knows the start of the job first in line (`Scheduler::expected_starts`); the
//! jobs behind it start when work that has not started yet ends, which only a replay of the
//! same decisions can tell. Starts are the scheduler's own: priorities, quotas, backfill, loans
//! and preemptions (a victim leaves at once, its work checkpointed) play out as they would.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::{Scheduler, St};
use crate::config::{Decision, Time};

/// Most cycles one `Scheduler::forecast` replays (the bound `ferry up` and `ferry sim
/// --forecast` use): a cycle at each expected end, and a few more where decisions free GPUs,
/// so about a thousand starts and ends ahead. Work not reached by then gets no start.
pub const FORECAST_CYCLES: usize = 2_000;

/// Most cycles run at one instant before virtual time moves on, by the simulator and the
/// forecast alike: a preemption's victim leaves, then its preemptor starts in a later cycle.
pub(crate) const CYCLES_PER_INSTANT: usize = 64;

/// One waiting workload's forecast start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForecastStart {
    /// Workload id.
    pub id: String,
    /// When it starts: in the replay, or for the job first in line, when its reservation says;
    /// `None` when neither knows: some work ahead of it has no expected end, or
    /// (`Forecast::capped`) the replay stopped before its turn, or (`held`) its queue is held.
    pub at: Option<Time>,
    /// Its queue is held (`QueueSpec::stop_policy`): it starts in no replay, only once the
    /// queue is released, so it has no start.
    pub held: bool,
}

/// The starts of every workload waiting at the time of a `Scheduler::forecast`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forecast {
    /// Every waiting workload: those told a start by start (ties in the order the replay
    /// started them), then the others by priority and age.
    pub starts: Vec<ForecastStart>,
    /// The replay reached its cycle limit with work still waiting: a `None` start may then
    /// only mean "further ahead than the forecast looked".
    pub capped: bool,
    /// Cycles the replay ran (what the forecast cost, in cycles).
    pub cycles: usize,
    /// Each workload's position in `starts`, so a control plane asking for every waiting job
    /// pays one lookup each.
    position: HashMap<String, usize>,
}

impl Forecast {
    /// The forecast start of workload `id` (`None`: none forecast, or not waiting).
    pub fn start_of(&self, id: &str) -> Option<Time> {
        self.starts[*self.position.get(id)?].at
    }

    /// Whether `id`'s queue was held when the forecast was made: it gets no start.
    pub fn held(&self, id: &str) -> bool {
        self.position.get(id).is_some_and(|&k| self.starts[k].held)
    }

    /// Whether `id` was waiting when the forecast was made (it has a place in `starts`).
    pub fn covers(&self, id: &str) -> bool {
        self.position.contains_key(id)
    }

    /// The waiting workload forecast to start just before `id`, so the last one `id` waits
    /// for; `None` when `id` is forecast to start first, or gets no start.
    pub fn before(&self, id: &str) -> Option<&str> {
        let k = *self.position.get(id)?;
        self.starts[k].at?;
        k.checked_sub(1).map(|p| self.starts[p].id.as_str())
    }
}

impl Scheduler {
    /// Forecasts when every waiting workload starts, replaying cycles from `now` (the time of
    /// the last real cycle) on a copy of this scheduler, which is left as it is: no arrivals;
    /// each admission starts at its cycle's time and ends at its expected end; a victim being
    /// evicted, or told to stop in the replay, leaves at once with its work checkpointed; time
    /// then moves to the next expected end of running work. Running work without an expected
    /// end never ends, so what waits behind it gets no start. At most `max_cycles` cycles
    /// (`FORECAST_CYCLES`). The job first in line gets the start its reservation promises
    /// (`expected_starts`) where that is known. Work of a held queue never starts in the
    /// replay: it gets no start, marked `held`, and the replay does not wait for it.
    pub fn forecast(&self, now: Time, max_cycles: usize) -> Forecast {
        let waits = |job: &super::Job| matches!(job.state, St::Pending | St::Nominated);
        if !self.jobs.iter().flatten().any(waits) {
            return Forecast::default();
        }
        self.clone().into_forecast(now, max_cycles)
    }

    /// [`Scheduler::forecast`] replayed on this scheduler itself, which it uses up: for a
    /// caller that copied the scheduler to replay it elsewhere (the operator copies it under
    /// its lock and replays with the lock released), so it is not copied twice.
    pub fn into_forecast(self, now: Time, max_cycles: usize) -> Forecast {
        let waiting = self.waiting_ids();
        if waiting.is_empty() {
            return Forecast::default();
        }
        let promised = self.promised_starts();
        let names: Vec<Option<String>> = self
            .jobs
            .iter()
            .map(|job| job.as_ref().map(|job| job.id.clone()))
            .collect();
        let slots = self.jobs.len();
        // Work of held queues never starts in the replay: known before the replay takes `self`.
        let mut is_held = vec![false; slots];
        for &j in &waiting {
            is_held[j as usize] = self.held(j);
        }
        let mut replay = self;
        let mut start: Vec<Option<Time>> = vec![None; slots];
        let mut is_waiting = vec![false; slots];
        for &j in &waiting {
            is_waiting[j as usize] = true;
        }
        let held = waiting.iter().filter(|&&j| is_held[j as usize]).count();
        let mut order: Vec<u32> = Vec::with_capacity(waiting.len());
        // Victims already told to stop leave now.
        let evicting: Vec<String> = replay
            .jobs
            .iter()
            .flatten()
            .filter(|job| job.state == St::Evicting)
            .map(|job| job.id.clone())
            .collect();
        for id in evicting {
            replay.leave(&id, now);
        }
        let mut t = now;
        let mut cycles = 0;
        let mut capped = false;
        loop {
            let limit = CYCLES_PER_INSTANT.min(max_cycles - cycles);
            cycles += replay.settle(t, limit, |s, decisions| {
                for d in decisions {
                    match d {
                        Decision::Admit { id, .. } => {
                            let j = s.ids[&id];
                            if is_waiting[j as usize] && start[j as usize].is_none() {
                                start[j as usize] = Some(t);
                                order.push(j);
                            }
                        }
                        Decision::Preempt { id, .. } => s.leave(&id, t),
                    }
                }
            });
            if order.len() + held == waiting.len() {
                break;
            }
            if cycles >= max_cycles {
                capped = true;
                break;
            }
            // Nothing else ends: what still waits never starts in the replay.
            let Some(next) = replay.next_end() else { break };
            t = t.max(next);
            for id in replay.ending_by(t) {
                replay.finished(&id).expect("a running job can finish");
            }
        }
        // The job first in line keeps the start its reservation promises (the earliest,
        // first in line for several flavors): the replay's own first cycle may differ (a job
        // that became holder in the last real cycle acts as one only from the next), and what
        // a user is told should not depend on which of the two asks. Where the reservation
        // cannot tell (work in its way has no expected end yet, such as a preemptor still
        // waiting for its victims), the replay's start stands.
        for (j, at) in promised {
            start[j as usize] = Some(at);
        }
        // By start, then in the order the replay started them.
        let mut rank = vec![usize::MAX; slots];
        for (k, &j) in order.iter().enumerate() {
            rank[j as usize] = k;
        }
        let mut started: Vec<(Time, usize, u32)> = waiting
            .iter()
            .filter_map(|&j| Some((start[j as usize]?, rank[j as usize], j)))
            .collect();
        started.sort_unstable();
        let name = |j: u32| names[j as usize].clone().expect("waiting job exists");
        let mut starts: Vec<ForecastStart> = started
            .iter()
            .map(|&(at, _, j)| ForecastStart {
                id: name(j),
                at: Some(at),
                held: false,
            })
            .collect();
        starts.extend(
            waiting
                .iter()
                .filter(|&&j| start[j as usize].is_none())
                .map(|&j| ForecastStart {
                    id: name(j),
                    at: None,
                    held: is_held[j as usize],
                }),
        );
        let position = starts
            .iter()
            .enumerate()
            .map(|(k, s)| (s.id.clone(), k))
            .collect();
        Forecast {
            starts,
            capped,
            cycles,
            position,
        }
    }

    /// Runs cycles at `now` until one decides nothing, at most `limit`, handing each cycle's
    /// decisions to `apply` (which reports what follows from them before the next cycle);
    /// returns how many ran. How the simulator and the forecast drive time's every instant.
    pub(crate) fn settle(
        &mut self,
        now: Time,
        limit: usize,
        mut apply: impl FnMut(&mut Scheduler, Vec<Decision>),
    ) -> usize {
        for n in 1..=limit {
            let decisions = self.cycle(now);
            let quiet = decisions.is_empty();
            apply(self, decisions);
            if quiet {
                return n;
            }
        }
        limit
    }

    /// Each reservation holder's known start, the earliest for a job first in line for
    /// several flavors.
    /// The waiting workloads (pending, or nominated and waiting for victims), by priority then
    /// age.
    fn waiting_ids(&self) -> Vec<u32> {
        let mut waiting: Vec<u32> = self
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(j, job)| {
                let job = job.as_ref()?;
                matches!(job.state, St::Pending | St::Nominated).then_some(j as u32)
            })
            .collect();
        waiting.sort_by_key(|&j| {
            let job = self.jobs[j as usize].as_ref().expect("waiting job exists");
            (Reverse(job.prio), job.created, job.seq)
        });
        waiting
    }

    fn promised_starts(&self) -> HashMap<u32, Time> {
        let mut promised: HashMap<u32, Time> = HashMap::new();
        for (id, _, at) in self.holder_starts() {
            if let Some(at) = at {
                let p = promised.entry(self.ids[id]).or_insert(at);
                *p = (*p).min(at);
            }
        }
        promised
    }

    /// A victim told to stop leaves at `at`, checkpointed then (as an engine does on SIGTERM).
    fn leave(&mut self, id: &str, at: Time) {
        self.checkpointed(id, at).expect("a victim is known");
        self.evicted(id).expect("a victim told to stop is evicting");
    }

    /// The earliest expected end of running work (of any flavor).
    fn next_end(&self) -> Option<Time> {
        self.ends
            .iter()
            .filter_map(|e| e.first().map(|&(t, _)| t))
            .min()
    }

    /// Ids of running work expected to end by `t`.
    fn ending_by(&self, t: Time) -> Vec<String> {
        self.ends
            .iter()
            .flat_map(|e| e.iter().take_while(|&&(end, _)| end <= t))
            .map(|&(_, j)| {
                self.jobs[j as usize]
                    .as_ref()
                    .expect("running job exists")
                    .id
                    .clone()
            })
            .collect()
    }
}

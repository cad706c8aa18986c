//! Admission with Kueue's protocol, decided by Ferry's own scheduler (`ferry-sched`): gangs
//! are created suspended, unsuspended (pinned to the nodes the scheduler chose) when
//! admitted, suspended again to preempt, and reported `evicted` once their pods are gone and
//! `finished` when they end. While they run, the end their measured pace predicts is passed
//! on (`Scheduler::progress`), re-sent only when it moved enough.
//!
//! The scheduler's cluster comes from `Node` objects (allocatable `nvidia.com/gpu`, flavor,
//! rack and NVLink labels), its queues from Ferry `Queue` objects; a queue named `q` in
//! namespace `ns` is the scheduler queue `ns/q`, and a `TrainJob` `ns/name` is the workload
//! `ns/name`. An operator that restarts re-registers running gangs from the placement
//! recorded on them, so nothing is preempted by the restart.
//!
//! Every queued job is told when it is expected to start, as `ferry up` tells it: the job first
//! in line by its reservation, the others by a `Scheduler::forecast`. A forecast replays up to
//! `FORECAST_CYCLES` cycles on a copy of the scheduler, too much for every reconcile of every
//! job, so one is kept and replayed again only when asked and stale (`State::forecast`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use ferry_sched::{
    Decision, FORECAST_CYCLES, Forecast, PodPlacement, PreemptReason, QueueSpec, Scheduler, Time,
    Waiting, Workload,
};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::Value;

use crate::cluster::SchedulerInputs;
use crate::crd::TrainJobResource;
use crate::error::{K8sError, Result};
use crate::train::Planned;

/// Annotation on a gang object: the scheduler's placement (JSON list of `{node, gpus}`).
pub const ANNOTATION_PLACEMENT: &str = "ferry.dev/placement";
/// Annotation on a gang object: when it was admitted (seconds since the Unix epoch).
pub const ANNOTATION_ADMITTED_AT: &str = "ferry.dev/admitted-at";
/// Node label Ferry reads the GPU flavor from first (same as `Cluster::flavor_label`'s default).
pub const LABEL_FERRY_FLAVOR: &str = "ferry.dev/gpu-flavor";
/// GPU feature discovery's product label, the fallback flavor (`NVIDIA-H100-80GB-HBM3`).
pub const LABEL_GPU_PRODUCT: &str = "nvidia.com/gpu.product";
/// GPU feature discovery's NVLink clique label (one NVL72 enclosure, …).
pub const LABEL_NVLINK_CLIQUE: &str = "nvidia.com/gpu.clique";
/// Rack label read when the operator is given none.
pub const LABEL_RACK: &str = "topology.kubernetes.io/rack";
/// The extended resource of NVIDIA's device plugin.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Seconds a forecast is kept while the scheduler does not change: expected ends are absolute,
/// but work past its end and starts "from now" move with the clock; a minute is the operator's
/// own refresh of a queued job (it is reconciled at least once a minute).
pub const FORECAST_MAX_AGE_S: Time = 60;
/// Fewest seconds between two forecasts however often the scheduler changes: a replay holds the
/// admission's lock that every reconcile takes, so under churn the starts told lag by at most
/// this much rather than every reconcile paying for a replay.
pub const FORECAST_MIN_INTERVAL_S: Time = 5;

/// What the scheduler says about a job right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// It may run on these pods' nodes (rank order); empty: anywhere the cluster puts it.
    Run(Vec<PodPlacement>),
    /// Not yet: keep it suspended, with the reason.
    Wait(String),
    /// Make room for other work: suspend it, with the reason.
    Preempt(String),
    /// It can never be admitted (no such queue, larger than any quota): fail it, with why.
    Never(String),
}

/// What the operator observed of a job's gang when it asks for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gang {
    /// No gang object exists for the current attempt.
    Absent,
    /// The gang exists and is suspended.
    Suspended,
    /// The gang exists and runs; the placement and admission time recorded on it, if any.
    Running {
        /// Placement from the gang's `ferry.dev/placement` annotation.
        placement: Option<Vec<PodPlacement>>,
        /// Admission time from `ferry.dev/admitted-at`.
        admitted_at: Option<Time>,
    },
}

impl Gang {
    /// Reads a gang object's JSON (Job or JobSet).
    pub fn observe(obj: &Value) -> Gang {
        if obj["spec"]["suspend"].as_bool().unwrap_or(false) {
            return Gang::Suspended;
        }
        let ann = &obj["metadata"]["annotations"];
        Gang::Running {
            placement: ann[ANNOTATION_PLACEMENT]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok()),
            admitted_at: ann[ANNOTATION_ADMITTED_AT]
                .as_str()
                .and_then(|s| s.parse().ok()),
        }
    }
}

/// Ferry's admission seam: the operator asks it before unsuspending a gang (Kueue's
/// protocol without Kueue) and tells it when gangs stop. Not consulted when Kueue is
/// installed.
pub trait Admission: Send + Sync + 'static {
    /// Decides for one job, given what its gang looks like.
    fn decide(&self, job: &TrainJobResource, gang: &Gang) -> Admit;
    /// A job told to `Preempt` has no pods left: its GPUs are free.
    fn evicted(&self, _job: &TrainJobResource) {}
    /// The job ended (succeeded, failed, restarts as a new attempt, or was deleted), or was
    /// suspended (`spec.suspend`) and no pod of its run is left.
    fn finished(&self, _job: &TrainJobResource) {}
    /// The running job's measured pace says it needs `remaining_s` more seconds: when it
    /// will really end, for reservations and backfill.
    fn progress(&self, _job: &TrainJobResource, _remaining_s: u64) {}
    /// When the waiting job is expected to start (Unix seconds): the job first in line for its
    /// GPUs by its reservation, any other by a forecast of the queue; `None` while the work
    /// ahead of it has no expected end, or is more than one forecast replays.
    fn expected_start(&self, _job: &TrainJobResource) -> Option<u64> {
        None
    }
    /// Why the waiting job waits now, in the words its user reads (`status.message`, the
    /// `Waiting` event; never the expected start itself, so a start that moves writes no
    /// event): `None` when this admission keeps no such reason.
    fn waiting(&self, _job: &TrainJobResource) -> Option<String> {
        None
    }
    /// Seconds after which the waiting job's words will say more than now: the forecast kept
    /// was made before it arrived and the next may not replay sooner. `None`: nothing to wait
    /// for (its reconcile comes at the usual interval).
    fn retell_in(&self, _job: &TrainJobResource) -> Option<u64> {
        None
    }
}

/// Admits every job (a single team, or quotas enforced by `ResourceQuota` alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn decide(&self, _job: &TrainJobResource, _gang: &Gang) -> Admit {
        Admit::Run(Vec::new())
    }
}

/// Where the scheduler stands on one workload.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Pending,
    /// Running on `placement` since `since`; `told` is the end its measured pace last told
    /// the scheduler.
    Running {
        placement: Vec<PodPlacement>,
        since: Time,
        told: Option<Time>,
    },
    /// Told to stop (why), still holding the GPUs of its run (`held`: placement and start,
    /// unknown for a gang the scheduler never ran), until `evicted`.
    Preempting {
        why: String,
        held: Option<(Vec<PodPlacement>, Time)>,
    },
}

impl Entry {
    fn running(placement: Vec<PodPlacement>, since: Time) -> Entry {
        Entry::Running {
            placement,
            since,
            told: None,
        }
    }
}

struct State {
    sched: Scheduler,
    entries: BTreeMap<String, Entry>,
    /// Each entry's workload as the scheduler was last given it: its expected duration from
    /// the spec's time limits (`State::note_limits`: the limits of a live job may be edited),
    /// and all a rebuild needs to register it again (`SchedAdmission::rebuild`).
    workloads: BTreeMap<String, Workload>,
    /// What each launcher job's plan says of its run (`train::planned`), with the object's uid
    /// and generation it was planned at: planned once, not at every reconcile.
    planned: BTreeMap<String, (String, Planned)>,
    /// Counts the changes to the scheduler's state (`State::changed`): a forecast made at
    /// another generation may be out of date.
    generation: u64,
    /// The last forecast, kept for the reconciles that ask for starts (`State::forecast`).
    forecast: Option<Kept>,
    /// Forecasts replayed so far (`SchedAdmission::forecasts_replayed`).
    replayed: u64,
    /// A forecast is being replayed on a copy of the scheduler, outside the lock
    /// (`SchedAdmission::refresh_forecast`): no second one starts meanwhile.
    replaying: bool,
}

/// A forecast and what it was made from.
struct Kept {
    forecast: Forecast,
    /// When it was made (the admission's clock).
    at: Time,
    /// `State::generation` it was made at.
    generation: u64,
}

impl State {
    /// The scheduler, to change it (submit, restore, evict, finish, progress, a new expected
    /// duration): a cached forecast is out of date from now on.
    fn sched_mut(&mut self) -> &mut Scheduler {
        self.changed();
        &mut self.sched
    }

    /// The scheduler's state changed: the one place the generation moves.
    fn changed(&mut self) {
        self.generation += 1;
    }

    /// Whether the kept forecast should be replayed at `now`: there is none, or it is stale (the
    /// scheduler changed since, or it is `FORECAST_MAX_AGE_S` old) and at least
    /// `FORECAST_MIN_INTERVAL_S` old, and no replay is under way. A stale one kept for the
    /// interval may miss a job that arrived since (it is told only why it waits until the next
    /// replay) or name a job that has started since.
    fn forecast_due(&self, now: Time) -> bool {
        !self.replaying
            && self.forecast.as_ref().is_none_or(|k| {
                let age = now.abs_diff(k.at);
                age >= FORECAST_MIN_INTERVAL_S
                    && (k.generation != self.generation || age >= FORECAST_MAX_AGE_S)
            })
    }

    /// Why waiting workload `id` waits and when it starts, by the kept forecast; `None` unless
    /// it waits now.
    fn told(&self, id: &str) -> Option<Waiting> {
        let waiting = self.sched.waiting(id)?;
        Some(match &self.forecast {
            Some(kept) => waiting.with_forecast(id, &kept.forecast),
            None => waiting,
        })
    }

    /// A known job whose time limits (or what is left of its budget) changed since the
    /// scheduler was given them: a pending job is ordered and backfilled by the new expected
    /// duration, a running one's end moves, unless its measured pace already replaced it.
    fn note_limits(&mut self, id: &str, expected: Option<u64>) {
        let Some(w) = self.workloads.get_mut(id) else {
            return;
        };
        if w.expected_duration_s == expected {
            return;
        }
        w.expected_duration_s = expected;
        if matches!(
            self.entries.get(id),
            Some(Entry::Running { told: Some(_), .. })
        ) {
            return;
        }
        match self.sched_mut().set_expected_duration(id, expected) {
            Ok(()) => tracing::info!(job = %id, ?expected, "time limits changed: scheduler told"),
            Err(e) => tracing::debug!(job = %id, error = %e, "expected duration not taken"),
        }
    }
}

/// Admission by `ferry-sched`: one scheduler for the whole cluster, driven by reconciles.
pub struct SchedAdmission {
    state: Mutex<State>,
    clock: Box<dyn Fn() -> Time + Send + Sync>,
    wake: Option<UnboundedSender<()>>,
    /// The links between racks as a percentage of those within one
    /// (`with_inter_rack_bandwidth_pct`); `None`: not known, plans give no split slowdown.
    inter_rack_pct: Option<u32>,
    /// Called while a forecast replays with the lock released (`during_replay`; tests).
    during_replay: Option<ReplayHook>,
}

/// See [`SchedAdmission::during_replay`].
type ReplayHook = Box<dyn Fn(&SchedAdmission) + Send + Sync>;

/// Seconds since the Unix epoch (the scheduler's clock on a cluster).
pub fn wall_clock() -> Time {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The scheduler's workload id (and queue prefix) of a namespaced name.
pub fn workload_id(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The scheduler's workload id of a `TrainJob`.
fn job_id(job: &TrainJobResource) -> String {
    workload_id(&job.namespace().unwrap_or_default(), &job.name_any())
}

/// The workload a `TrainJob` asks the scheduler for: one pod per node.
pub fn workload(job: &TrainJobResource) -> Workload {
    let ns = job.namespace().unwrap_or_default();
    let r = &job.spec.resources;
    let queue = job.spec.queue.as_deref().unwrap_or("default");
    Workload {
        id: job_id(job),
        queue: workload_id(&ns, queue),
        priority: job.spec.priority.clone(),
        pods: r.nodes.max(1) as u32,
        gpus_per_pod: r.gpus_per_node.max(0) as u32,
        flavor: r.gpu.clone(),
        topology: r.topology.and_then(|t| t.name().parse().ok()),
        // The time limit (of one run, or what is left of all runs' budget, whichever is
        // tighter): the scheduler plans reservations and backfill with it (an upper bound, so
        // backfilling with it never delays a reservation) until the job's measured pace
        // replaces it (`Admission::progress`).
        expected_duration_s: [
            job.spec.max_runtime_seconds,
            job.spec.max_total_runtime_seconds.map(|b| {
                b.saturating_sub(job.status.as_ref().map_or(0, |s| s.run_seconds))
                    .max(1)
            }),
        ]
        .into_iter()
        .flatten()
        .min(),
        created_at: job
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second().max(0) as Time),
        split_slowdown_pct: r.split_slowdown_pct.map(|p| p.max(0) as u32),
    }
}

/// The scheduler's view of the cluster from `Node` objects: schedulable nodes with
/// allocatable `nvidia.com/gpu`, flavor from `ferry.dev/gpu-flavor` (else
/// `nvidia.com/gpu.product`), rack from `rack_label` (else `topology.kubernetes.io/rack`),
/// NVLink domain from `nvidia.com/gpu.clique`.
pub fn cluster_from_nodes(nodes: &[Node], rack_label: Option<&str>) -> ferry_sched::Cluster {
    let mut out = Vec::new();
    for n in nodes {
        if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            continue;
        }
        let gpus = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(GPU_RESOURCE))
            .and_then(|q| q.0.parse::<u32>().ok())
            .unwrap_or(0);
        if gpus == 0 {
            continue;
        }
        let labels = n.labels();
        let Some(flavor) = labels
            .get(LABEL_FERRY_FLAVOR)
            .or_else(|| labels.get(LABEL_GPU_PRODUCT))
        else {
            continue;
        };
        out.push(ferry_sched::Node {
            name: n.name_any(),
            gpus: gpus.min(64),
            flavor: flavor.clone(),
            rack: labels.get(rack_label.unwrap_or(LABEL_RACK)).cloned(),
            nvlink_domain: labels.get(LABEL_NVLINK_CLIQUE).cloned(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    ferry_sched::Cluster { nodes: out }
}

/// One scheduler queue from a Ferry `Queue` named `name` in namespace `ns`.
pub fn queue_spec(ns: &str, name: &str, spec: &ferry_spec::QueueSpec) -> QueueSpec {
    QueueSpec {
        name: workload_id(ns, name),
        cohort: spec.cohort.clone(),
        quotas: spec.quotas.iter().map(Into::into).collect(),
        fair_share_weight: spec.weight,
        stop_policy: spec.stop_policy.into(),
        preemption: spec.preemption.into(),
    }
}

fn reason_text(r: &PreemptReason) -> String {
    match r {
        PreemptReason::Priority { preemptor } => {
            format!("preempted by higher-priority {preemptor}")
        }
        PreemptReason::Reclaim { preemptor } => {
            format!("its queue's lender reclaims the quota for {preemptor}")
        }
        PreemptReason::LoanEnded { preemptor } => {
            format!("it ran on reserved nodes and {preemptor}'s turn has come")
        }
        PreemptReason::QueueStopped { queue } => format!(
            "its queue {queue} was stopped (spec.stopPolicy: HoldAndDrain); it waits there \
             and resumes from its checkpoint once the queue is released"
        ),
    }
}

impl SchedAdmission {
    /// A scheduler over the cluster's GPU nodes, queues and priorities (`inputs`) with the
    /// policy `options` (`ferry operator --scheduler-options`); `wake` is sent `()` when a
    /// decision concerns another job than the one being reconciled (the operator then
    /// reconciles every job).
    pub fn new(
        inputs: SchedulerInputs,
        options: ferry_sched::Options,
        wake: Option<UnboundedSender<()>>,
    ) -> Result<Self> {
        let sched = build_scheduler(inputs, options)?;
        Ok(SchedAdmission {
            state: Mutex::new(State {
                sched,
                entries: BTreeMap::new(),
                workloads: BTreeMap::new(),
                planned: BTreeMap::new(),
                generation: 0,
                forecast: None,
                replayed: 0,
                replaying: false,
            }),
            clock: Box::new(wall_clock),
            wake,
            inter_rack_pct: None,
            during_replay: None,
        })
    }

    /// Rebuilds the scheduler in place from the cluster's new GPU nodes, Queues, Cohorts and
    /// PriorityClasses, keeping every job it knew: running gangs are re-registered where they
    /// run (none is preempted for the change), waiting ones are queued again in their order.
    /// A running gang the new cluster cannot hold (its node or queue is gone) is to be
    /// preempted, and requeued once stopped; a waiting job whose queue is gone is dropped, so
    /// its next reconcile is told why it cannot run. On an error (queues or a cohort tree the
    /// scheduler refuses) the old scheduler stays. Wakes the operator to reconcile every job.
    pub fn rebuild(&self, inputs: SchedulerInputs) -> Result<Rebuilt> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let mut sched = build_scheduler(inputs, st.sched.options().clone())?;
        let now = (self.clock)();
        let mut entries = BTreeMap::new();
        let mut told = Vec::new();
        let mut out = Rebuilt::default();
        // Work holding GPUs first, so nothing waiting is placed on them.
        for (id, entry) in &st.entries {
            let (placement, since, end) = match entry {
                Entry::Running {
                    placement,
                    since,
                    told,
                } => (placement, *since, *told),
                // Still stopping on the GPUs of its run: they stay held until it is gone.
                Entry::Preempting {
                    held: Some((placement, since)),
                    ..
                } => (placement, *since, None),
                Entry::Preempting { held: None, .. } | Entry::Pending => continue,
            };
            let Some(w) = st.workloads.get(id) else {
                continue;
            };
            match restore_running(&mut sched, w.clone(), placement, since) {
                Ok(()) => {
                    let keep = match entry {
                        Entry::Preempting { .. } => entry.clone(),
                        _ => Entry::Running {
                            placement: placement.clone(),
                            since,
                            told: None,
                        },
                    };
                    entries.insert(id.clone(), keep);
                    told.extend(end.map(|e| (id.clone(), e)));
                    out.kept += 1;
                }
                Err(e) => {
                    entries.insert(
                        id.clone(),
                        Entry::Preempting {
                            why: format!("the cluster changed under it: {e}"),
                            held: None,
                        },
                    );
                    out.preempted.push(id.clone());
                }
            }
        }
        let mut waiting: Vec<&Workload> = st
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Pending))
            .filter_map(|(id, _)| st.workloads.get(id))
            .collect();
        waiting.sort_by_key(|w| (w.created_at, w.id.clone()));
        let mut dropped = Vec::new();
        for w in waiting {
            match sched.submit(w.clone()) {
                Ok(()) => {
                    entries.insert(w.id.clone(), Entry::Pending);
                    out.kept += 1;
                }
                Err(_) => dropped.push(w.id.clone()),
            }
        }
        for id in &dropped {
            st.workloads.remove(id);
        }
        out.dropped = dropped;
        *st.sched_mut() = sched;
        st.entries = entries;
        for (id, end) in told {
            if end > now {
                tell_end(st, &id, now, end - now);
            }
        }
        self.cycle(st, None);
        if let Some(w) = &self.wake {
            let _ = w.unbounded_send(());
        }
        Ok(out)
    }

    /// Replays the forecast when it is due (`State::forecast_due`) on a copy of the scheduler
    /// taken under the lock, with the lock released: at the scale of the cycle bench a replay
    /// takes thousands of cycles, and every reconcile waits on this lock. Reconciles meanwhile
    /// read the forecast kept before.
    fn refresh_forecast(&self, now: Time) {
        let (copy, generation) = {
            let mut st = self.lock();
            if !st.forecast_due(now) {
                return;
            }
            st.replaying = true;
            (st.sched.clone(), st.generation)
        };
        // However the replay ends (a panic included), the next one may start.
        struct Done<'a>(&'a SchedAdmission);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.lock().replaying = false;
            }
        }
        let done = Done(self);
        if let Some(hook) = &self.during_replay {
            hook(self);
        }
        let forecast = copy.into_forecast(now, FORECAST_CYCLES);
        tracing::debug!(
            cycles = forecast.cycles,
            capped = forecast.capped,
            "forecast every waiting job's start"
        );
        let mut st = self.lock();
        st.replayed += 1;
        st.forecast = Some(Kept {
            forecast,
            at: now,
            generation,
        });
        drop(st);
        drop(done);
    }

    /// Why waiting job `id` waits and when it starts, by a forecast replayed first if due.
    fn told(&self, id: &str) -> Option<Waiting> {
        self.refresh_forecast((self.clock)());
        self.lock().told(id)
    }

    /// How many forecasts this admission has replayed (each `FORECAST_CYCLES` cycles at most):
    /// what the kept forecast saves, for tests and logs.
    pub fn forecasts_replayed(&self) -> u64 {
        self.lock().replayed
    }

    /// Runs `hook` while each forecast replays, with the admission's lock released: tests show
    /// that reconciles go on meanwhile and start no second replay.
    #[doc(hidden)]
    pub fn during_replay(mut self, hook: impl Fn(&SchedAdmission) + Send + Sync + 'static) -> Self {
        self.during_replay = Some(Box::new(hook));
        self
    }

    /// Replaces the clock (tests drive time by hand).
    pub fn with_clock(mut self, clock: impl Fn() -> Time + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// Sets how fast the cluster's links between racks are: the percentage of the bandwidth
    /// between nodes within a rack (`ferry operator --inter-rack-bandwidth-pct`). A launcher
    /// job's plan then says how much longer it runs split across racks, which the scheduler
    /// weighs against the wait for one rack, unless the job gives its own
    /// `spec.resources.splitSlowdownPct`.
    pub fn with_inter_rack_bandwidth_pct(mut self, pct: Option<u32>) -> Self {
        self.inter_rack_pct = pct;
        self
    }

    /// What a launcher job's plan says of its run (`train::planned`), kept per object version;
    /// planned outside the lock.
    fn planned(&self, job: &TrainJobResource, id: &str) -> Planned {
        let stamp = format!(
            "{}/{}",
            job.metadata.uid.as_deref().unwrap_or_default(),
            job.metadata.generation.unwrap_or_default()
        );
        if let Some((at, p)) = self.lock().planned.get(id)
            && *at == stamp
        {
            return *p;
        }
        let p = crate::train::planned(&job.to_spec(), self.inter_rack_pct);
        self.lock().planned.insert(id.to_owned(), (stamp, p));
        p
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough state: keep going.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs one scheduling cycle and records its decisions; wakes the operator when one
    /// concerns a job other than `current`.
    fn cycle(&self, st: &mut State, current: Option<&str>) {
        let now = (self.clock)();
        let decisions = st.sched.cycle(now);
        // A cycle that decides nothing leaves what a forecast replays as it was.
        if !decisions.is_empty() {
            st.changed();
        }
        let mut others = false;
        for d in decisions {
            let (id, entry) = match d {
                Decision::Admit { id, placement, .. } => (id, Entry::running(placement, now)),
                Decision::Preempt { id, reason } => {
                    let held = match st.entries.get(&id) {
                        Some(Entry::Running {
                            placement, since, ..
                        }) => Some((placement.clone(), *since)),
                        // Restored by a rebuild while it was stopping (a queue drained since):
                        // it still holds the GPUs of its run.
                        Some(Entry::Preempting { held, .. }) => held.clone(),
                        _ => None,
                    };
                    let why = reason_text(&reason);
                    (id, Entry::Preempting { why, held })
                }
            };
            others |= current != Some(id.as_str());
            st.entries.insert(id, entry);
        }
        if others && let Some(w) = &self.wake {
            // The operator may be shutting down; nothing to do then.
            let _ = w.unbounded_send(());
        }
    }
}

/// What [`SchedAdmission::rebuild`] did with the jobs it knew.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Jobs registered again as they were (running where they run, or waiting).
    pub kept: usize,
    /// Running gangs the new cluster cannot hold, now to be preempted.
    pub preempted: Vec<String>,
    /// Waiting jobs whose queue or priority is gone; their next reconcile says why.
    pub dropped: Vec<String>,
}

/// An empty scheduler over `inputs`, or the error naming what it refused.
fn build_scheduler(inputs: SchedulerInputs, options: ferry_sched::Options) -> Result<Scheduler> {
    let SchedulerInputs {
        cluster,
        queues,
        cohorts,
        priorities,
    } = inputs;
    Scheduler::with_cohorts(cluster, queues, &cohorts, priorities, options).map_err(|e| {
        // The scheduler's field says which: `queues[i]…` or `cohorts[i]…`.
        let cohort = match &e {
            ferry_sched::SchedError::InvalidConfig { field, .. } => {
                cohort_of_field(field, &cohorts)
            }
            _ => None,
        };
        match cohort {
            Some(name) => K8sError::invalid(
                format!("Cohort/{name}"),
                "spec",
                format!("Ferry's scheduler refused the cluster's cohort tree: {e}"),
            ),
            None => K8sError::invalid(
                "Queue/*",
                "spec.quotas",
                format!("Ferry's scheduler refused the cluster's queues: {e}"),
            ),
        }
    })
}

/// The cohort a scheduler config error's field (`cohorts[i].parent`) is about, if it is one's.
fn cohort_of_field<'a>(field: &str, cohorts: &'a [ferry_sched::CohortSpec]) -> Option<&'a str> {
    let (i, _) = field.strip_prefix("cohorts[")?.split_once(']')?;
    cohorts
        .get(i.parse::<usize>().ok()?)
        .map(|c| c.name.as_str())
}

/// Registers a workload that is already running on `placement` since `at`
/// (`Scheduler::restore`: no decision, nothing preempted).
fn restore_running(
    s: &mut Scheduler,
    w: Workload,
    placement: &[PodPlacement],
    at: Time,
) -> Result<()> {
    let id = w.id.clone();
    s.restore(w, placement, at).map_err(|e| {
        K8sError::invalid(
            format!("TrainJob/{id}"),
            "metadata.annotations.ferry.dev/placement",
            format!("the running gang could not be re-registered with the scheduler: {e}"),
        )
    })
}

impl Admission for SchedAdmission {
    fn decide(&self, job: &TrainJobResource, gang: &Gang) -> Admit {
        // CPU-only gangs (engine: command without GPUs) hold nothing the scheduler shares.
        if job.spec.resources.total_gpus() == 0 {
            return Admit::Run(Vec::new());
        }
        let mut w = workload(job);
        let planned = self.planned(job, &w.id);
        w.expected_duration_s = match (w.expected_duration_s, planned.run_s) {
            (Some(limit), Some(p)) => Some(limit.min(p)),
            (limit, p) => limit.or(p),
        };
        // A job's own figure stands; one that must stay in a rack is never split.
        if w.topology.is_none() {
            w.split_slowdown_pct = w.split_slowdown_pct.or(planned.split_slowdown_pct);
        }
        let (id, expected) = (w.id.clone(), w.expected_duration_s);
        let mut st = self.lock();
        if st.entries.contains_key(&id) {
            st.note_limits(&id, expected);
        } else {
            match gang {
                Gang::Running {
                    placement: Some(p),
                    admitted_at,
                } => {
                    let at = admitted_at.unwrap_or_else(|| (self.clock)());
                    if let Err(e) = restore_running(st.sched_mut(), w.clone(), p, at) {
                        return Admit::Preempt(e.to_string());
                    }
                    st.entries.insert(id.clone(), Entry::running(p.clone(), at));
                    st.workloads.insert(id.clone(), w);
                    // The pace an earlier operator measured (its paces lived in memory) stands
                    // until this one has measured again.
                    if let Some(end) = persisted_end(job) {
                        let now = (self.clock)();
                        if end > now {
                            tell_end(&mut st, &id, now, end - now);
                        }
                    }
                    return Admit::Run(p.clone());
                }
                _ => {
                    if let Err(e) = st.sched_mut().submit(w.clone()) {
                        return Admit::Never(e.to_string());
                    }
                    st.entries.insert(id.clone(), Entry::Pending);
                    st.workloads.insert(id.clone(), w);
                }
            }
        }
        self.cycle(&mut st, Some(&id));
        match st.entries.get(&id) {
            Some(Entry::Running { placement, .. }) => return Admit::Run(placement.clone()),
            Some(Entry::Preempting { why, .. }) => return Admit::Preempt(why.clone()),
            _ => {}
        }
        // A forecast may be replayed for the words: not under the lock.
        drop(st);
        Admit::Wait(self.told(&id).map_or_else(
            || {
                let queue = job.spec.queue.as_deref().unwrap_or("default");
                format!(
                    "queued in {queue}: waiting for {} GPUs within the queue's quota",
                    job.spec.resources.total_gpus()
                )
            },
            |w| w.to_string(),
        ))
    }

    fn evicted(&self, job: &TrainJobResource) {
        let id = job_id(job);
        let mut st = self.lock();
        if !matches!(st.entries.get(&id), Some(Entry::Preempting { .. })) {
            return;
        }
        if st.sched_mut().evicted(&id).is_err() {
            // Rebuilt while it stopped: the new scheduler has it as running (or not at all).
            let _ = st.sched_mut().finished(&id);
            let Some(w) = st.workloads.get(&id).cloned() else {
                st.entries.remove(&id);
                return;
            };
            if let Err(e) = st.sched_mut().submit(w) {
                // Its queue is gone: its next reconcile submits it afresh and is told why.
                tracing::warn!(job = %id, error = %e, "evicted job not requeued");
                st.entries.remove(&id);
                st.workloads.remove(&id);
                return;
            }
        }
        st.entries.insert(id.clone(), Entry::Pending);
        self.cycle(&mut st, Some(&id));
    }

    fn finished(&self, job: &TrainJobResource) {
        let id = job_id(job);
        let mut st = self.lock();
        st.workloads.remove(&id);
        st.planned.remove(&id);
        if st.entries.remove(&id).is_none() {
            return;
        }
        if let Err(e) = st.sched_mut().finished(&id) {
            tracing::warn!(job = %id, error = %e, "scheduler did not know a finished job");
        }
        self.cycle(&mut st, Some(&id));
    }

    fn expected_start(&self, job: &TrainJobResource) -> Option<u64> {
        self.told(&job_id(job))?.expected_start()
    }

    fn waiting(&self, job: &TrainJobResource) -> Option<String> {
        self.told(&job_id(job)).map(|w| w.to_string())
    }

    fn retell_in(&self, job: &TrainJobResource) -> Option<u64> {
        let id = job_id(job);
        let now = (self.clock)();
        let st = self.lock();
        st.sched.waiting(&id)?;
        match &st.forecast {
            Some(kept) if kept.forecast.covers(&id) => None,
            Some(kept) => Some(
                FORECAST_MIN_INTERVAL_S
                    .saturating_sub(now.abs_diff(kept.at))
                    .max(1),
            ),
            // The first replay is under way.
            None => Some(1),
        }
    }

    fn progress(&self, job: &TrainJobResource, remaining_s: u64) {
        let id = job_id(job);
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = (self.clock)();
        let end = now.saturating_add(remaining_s);
        let Some(Entry::Running { told, .. }) = st.entries.get(&id) else {
            return;
        };
        if !ferry_sched::pace::worth_telling(*told, end, remaining_s) {
            return;
        }
        if tell_end(st, &id, now, remaining_s) {
            // Work held back by a reservation may now fit before the new end, or no longer.
            self.cycle(st, None);
        }
    }
}

/// Tells the scheduler that running workload `id` has `remaining_s` seconds left at `now` and
/// records the end told; false when the scheduler did not take it.
fn tell_end(st: &mut State, id: &str, now: Time, remaining_s: u64) -> bool {
    match st.sched_mut().progress(id, now, remaining_s) {
        Ok(()) => {
            if let Some(Entry::Running { told, .. }) = st.entries.get_mut(id) {
                *told = Some(now.saturating_add(remaining_s));
            }
            tracing::debug!(job = %id, left_s = remaining_s, "expected end from the measured pace");
            true
        }
        Err(e) => {
            tracing::debug!(job = %id, error = %e, "progress not taken");
            false
        }
    }
}

/// The end (Unix seconds) in `status.estimatedCompletionTime`, as the operator last wrote it.
fn persisted_end(job: &TrainJobResource) -> Option<Time> {
    let at: k8s_openapi::jiff::Timestamp = job
        .status
        .as_ref()?
        .estimated_completion_time
        .as_ref()?
        .parse()
        .ok()?;
    u64::try_from(at.as_second()).ok()
}

//! Configuration types the control plane maps its `Queue`, cluster and priority resources onto.

use serde::{Deserialize, Serialize};

/// Quota flavor that covers every flavor a queue does not name (the spec's `flavor: any`).
pub const ANY_FLAVOR: &str = "any";

/// Seconds on the caller's clock (wall clock for the runtime, virtual time for the simulator).
pub type Time = u64;

/// One machine: its GPUs, their flavor and where it sits in the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Unique node name (what placements refer to).
    pub name: String,
    /// Number of GPUs on the node (1..=[`MAX_NODE_GPUS`]).
    pub gpus: u32,
    /// GPU flavor, e.g. `H100-80GB`; quotas are per flavor.
    pub flavor: String,
    /// Rack (or switch) label; gangs are kept within one rack when they fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// NVLink domain label (e.g. one NVL72 enclosure); preferred over the rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_domain: Option<String>,
}

/// The machines the scheduler places work on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// Every node, in any order.
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// A cluster of `nodes` identical unlabelled nodes named `node-0..`, for tests and `--gpus`.
    pub fn uniform(nodes: usize, gpus_per_node: u32, flavor: &str) -> Cluster {
        Cluster {
            nodes: (0..nodes)
                .map(|i| Node {
                    name: format!("node-{i}"),
                    gpus: gpus_per_node,
                    flavor: flavor.to_string(),
                    rack: None,
                    nvlink_domain: None,
                })
                .collect(),
        }
    }

    /// One machine with `gpus` local GPU slots (what `ferry up --gpus N` schedules onto).
    pub fn local(gpus: u32, flavor: &str) -> Cluster {
        Cluster {
            nodes: vec![Node {
                name: "local".into(),
                gpus,
                flavor: flavor.to_string(),
                rack: None,
                nvlink_domain: None,
            }],
        }
    }

    /// Total GPUs of all flavors.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus)).sum()
    }
}

/// A team's quota for one GPU flavor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuota {
    /// Flavor name; must match some node's flavor, or be `any` (every flavor not named otherwise).
    pub flavor: String,
    /// GPUs guaranteed to the queue.
    pub nominal: u32,
    /// Most GPUs the queue may use above `nominal` by borrowing from its cohort (`None`: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<u32>,
    /// Most of `nominal` the queue lends to its cohort (`None`: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<u32>,
}

impl FlavorQuota {
    /// `nominal` GPUs of `flavor` with no borrowing or lending limit (the usual quota).
    pub fn unlimited(flavor: &str, nominal: u32) -> FlavorQuota {
        FlavorQuota {
            flavor: flavor.to_owned(),
            nominal,
            borrowing_limit: None,
            lending_limit: None,
        }
    }
}

fn one() -> f64 {
    1.0
}

/// A team's queue: quotas per flavor, cohort membership and fair-share weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Queue name, referenced by `Workload::queue`.
    pub name: String,
    /// Cohort whose members lend to and borrow from each other (`None`: no borrowing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Quotas per flavor; a workload can only use flavors listed here.
    pub quotas: Vec<FlavorQuota>,
    /// Weight for sharing borrowed capacity when several queues want it (default 1).
    #[serde(default = "one")]
    pub fair_share_weight: f64,
    /// Whether the queue admits work (Kueue's ClusterQueue `spec.stopPolicy`).
    #[serde(default, skip_serializing_if = "StopPolicy::is_none")]
    pub stop_policy: StopPolicy,
    /// What its waiting work may preempt (Kueue's ClusterQueue `spec.preemption`).
    #[serde(default, skip_serializing_if = "PreemptionPolicy::is_default")]
    pub preemption: PreemptionPolicy,
}

/// A cohort of a cohort tree (Kueue's `Cohort`): its own GPUs, which its queues and child
/// cohorts share before they borrow from its parent, and limits on what it borrows from and
/// lends to its parent. Cohorts named only by queues need no spec: they are roots with no GPUs
/// of their own, as before trees existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortSpec {
    /// Cohort name, as queues (`QueueSpec::cohort`) and child cohorts (`parent`) give it.
    pub name: String,
    /// The cohort it borrows from and lends to (`None`: a root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Its own GPUs per flavor (`nominal`), and per flavor the most it borrows from its parent
    /// beyond its subtree's GPUs (`borrowingLimit`) and the most of its subtree's GPUs it lends
    /// to the parent (`lendingLimit`; `None`: all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<FlavorQuota>,
    /// Its weight against its siblings (queues and cohorts under the same parent) when they
    /// share what no quota covers (Kueue's `spec.fairSharing.weight`; default 1): fair sharing
    /// compares two queues of a tree by the cohorts or queues just below the cohort they share.
    #[serde(default = "one")]
    pub fair_share_weight: f64,
}

impl CohortSpec {
    /// A cohort under `parent` with no GPUs of its own, no limits and weight 1.
    pub fn under(name: &str, parent: Option<&str>) -> CohortSpec {
        CohortSpec {
            name: name.to_owned(),
            parent: parent.map(str::to_owned),
            quotas: Vec::new(),
            fair_share_weight: 1.0,
        }
    }
}

/// What a queue's waiting work may preempt to start: Kueue's ClusterQueue `spec.preemption`,
/// with its values. Loans (work started on a reservation's idle GPUs on the promise of giving
/// them back) are taken back whatever it says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionPolicy {
    /// Which of the queue's own running work a waiting job may preempt.
    #[serde(default)]
    pub within_queue: WithinQueue,
    /// Which work of other cohort members that borrow a waiting job may preempt to get back
    /// its queue's nominal quota (reclaims, and fair-sharing preemption).
    #[serde(default)]
    pub reclaim_within_cohort: ReclaimWithinCohort,
    /// Whether a waiting job that must borrow may also take borrowed work of lower classes
    /// from other cohort members (Kueue's `borrowWithinCohort: LowerPriority`); `None`: only a
    /// job that stays within its queue's nominal quota reclaims (Kueue's `Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

/// Kueue's `borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold}`: a job that
/// must borrow to start may preempt other cohort members' borrowed work of a lower class, up to
/// a threshold, so the victims never outrank it and cannot take the GPUs back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinCohort {
    /// Only work of a class at most this value (and below the job's own) may be taken;
    /// `None`: any class below the job's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

impl BorrowWithinCohort {
    /// Whether work of class value `victim` may be taken by a borrowing job of class `prio`.
    pub fn may_take(&self, victim: i32, prio: i32) -> bool {
        victim < prio && self.max_priority_threshold.is_none_or(|t| victim <= t)
    }
}

impl PreemptionPolicy {
    /// Kueue's behaviour Ferry keeps by default: lower priorities within the queue, anything
    /// borrowed within the cohort.
    pub fn is_default(&self) -> bool {
        *self == PreemptionPolicy::default()
    }
}

/// Kueue's `withinClusterQueue`: which of its queue's running work a job may preempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WithinQueue {
    /// Work of a lower priority (its class must preempt, `PriorityClass::preempting`).
    #[default]
    LowerPriority,
    /// Work of a lower priority, or of its own priority submitted after it.
    LowerOrNewerEqualPriority,
    /// Nothing: the queue's work waits its turn.
    Never,
}

/// Kueue's `reclaimWithinCohort`: which borrowed work of other cohort members a job may
/// preempt to take back its queue's nominal quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReclaimWithinCohort {
    /// Borrowed work of any priority.
    #[default]
    Any,
    /// Borrowed work of a lower priority only.
    LowerPriority,
    /// Nothing: what the queue lent comes back as the borrowers finish.
    Never,
}

/// Whether a queue admits work: Kueue's ClusterQueue `spec.stopPolicy`, with its values.
/// A held queue's waiting work is never admitted, reserves nothing, preempts nothing and is
/// owed nothing (it holds no GPUs back from anyone); its nominal quota stays lendable to its
/// cohort. The scheduler has no in-place change of it: a control plane builds a new
/// scheduler with the changed queue and registers its jobs again (running ones restored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StopPolicy {
    /// The queue admits work.
    #[default]
    None,
    /// No new admissions from the queue; its running work keeps running.
    Hold,
    /// No new admissions, and its running work is stopped gracefully (preempted with
    /// `PreemptReason::QueueStopped`, once) and waits in the queue until it is released.
    HoldAndDrain,
}

impl StopPolicy {
    /// `None`: the queue admits work.
    pub fn is_none(&self) -> bool {
        *self == StopPolicy::None
    }

    /// The value as Kueue (and Ferry's `Queue`) spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopPolicy::None => "None",
            StopPolicy::Hold => "Hold",
            StopPolicy::HoldAndDrain => "HoldAndDrain",
        }
    }
}

impl QueueSpec {
    /// A queue of `nominal` GPUs of any flavor in `cohort`, weight 1, no limits: what a team
    /// gets when only its size is given (`ferry sim --quota`, the local default queue).
    pub fn any_flavor(name: &str, cohort: Option<&str>, nominal: u32) -> QueueSpec {
        QueueSpec {
            name: name.to_owned(),
            cohort: cohort.map(str::to_owned),
            quotas: vec![FlavorQuota::unlimited(ANY_FLAVOR, nominal)],
            fair_share_weight: 1.0,
            stop_policy: StopPolicy::None,
            preemption: PreemptionPolicy::default(),
        }
    }
}

/// A named priority, like Kubernetes' `PriorityClass` / Kueue's `WorkloadPriorityClass`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClass {
    /// Name used by `Workload::priority`.
    pub name: String,
    /// Higher runs first and may preempt lower within a queue.
    pub value: i32,
    /// Whether its work preempts lower-priority work of its queue (Kubernetes'
    /// `preemptionPolicy: PreemptLowerPriority`, the default); if not (`Never`), it only goes
    /// first. Reclaims of lent quota are a queue's guarantee and do not depend on it.
    #[serde(default = "preempting")]
    pub preempting: bool,
}

fn preempting() -> bool {
    true
}

/// The class a workload without a priority gets (its value; 0 when no class has this name).
pub const DEFAULT_PRIORITY: &str = "normal";

impl PriorityClass {
    /// The spec's named priorities: `low` (-100), `normal` (0, also a workload without one) and
    /// `high` (100).
    pub fn standard() -> Vec<PriorityClass> {
        Self::named(&[("low", -100), (DEFAULT_PRIORITY, 0), ("high", 100)])
    }

    /// Preempting classes from `(name, value)` pairs.
    pub fn named(pairs: &[(&str, i32)]) -> Vec<PriorityClass> {
        pairs
            .iter()
            .map(|&(name, value)| PriorityClass::new(name, value))
            .collect()
    }

    /// A class whose work may preempt lower-priority work.
    pub fn new(name: &str, value: i32) -> PriorityClass {
        PriorityClass {
            name: name.into(),
            value,
            preempting: true,
        }
    }

    /// `base` with the cluster's own classes `extra` added; one of the same name replaces the
    /// base class (so a cluster may rank `normal` among its classes).
    pub fn with_extra(
        mut base: Vec<PriorityClass>,
        extra: impl IntoIterator<Item = PriorityClass>,
    ) -> Vec<PriorityClass> {
        for class in extra {
            match base.iter_mut().find(|c| c.name == class.name) {
                Some(c) => *c = class,
                None => base.push(class),
            }
        }
        base
    }
}

/// A gang to admit: `pods` processes, each needing `gpus_per_pod` GPUs on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// Unique id chosen by the control plane.
    pub id: String,
    /// Queue (team) it is charged to.
    pub queue: String,
    /// Priority class name (`None`: value 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Number of pods (ranks' hosts) in the gang; all start or none.
    pub pods: u32,
    /// GPUs per pod; a pod never spans nodes.
    pub gpus_per_pod: u32,
    /// Required flavor (`None`: any flavor the queue has quota for, in quota order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    /// Expected run time in seconds, used for backfill and reservations when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration_s: Option<u64>,
    /// When it was created; ties within a priority go to the oldest.
    pub created_at: Time,
    /// Every pod must sit in one domain of this level, and the gang waits until one has room
    /// (`None`: one domain when one has room, else across domains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// How much longer (percent) it runs split across racks, for this gang instead of
    /// `Options::split_slowdown_pct` (`None`: the options' figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_slowdown_pct: Option<u32>,
}

/// The most GPUs one node may have: a node's free GPUs are one 64-bit mask.
pub const MAX_NODE_GPUS: u32 = 64;

/// The most nodes a simulated cluster may have (`ferry sim`): 131,072 nodes of 8 GPUs are a
/// million GPUs, several times the largest clusters built, and a replay stays in memory.
pub const MAX_CLUSTER_NODES: usize = 131_072;

/// The largest split slowdown a workload may give (`Workload::split_slowdown_pct`): a split
/// run eleven times as long.
pub const MAX_SPLIT_SLOWDOWN_PCT: u32 = 1000;

/// A topology level all of a gang's pods can be required to share: collectives within one
/// domain run at its link speed, not the slower links between domains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Topology {
    /// One NVLink domain (`Node::nvlink_domain`).
    NvlinkDomain,
    /// One rack (`Node::rack`).
    Rack,
}

impl Topology {
    /// The placement index's level for it (narrowest first).
    pub(crate) const fn level(self) -> usize {
        match self {
            Topology::NvlinkDomain => 0,
            Topology::Rack => 1,
        }
    }

    /// What one domain of it is called in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Topology::NvlinkDomain => "NVLink domain",
            Topology::Rack => "rack",
        }
    }

    /// The name used in specs and messages.
    pub fn name(self) -> &'static str {
        match self {
            Topology::NvlinkDomain => "nvlinkDomain",
            Topology::Rack => "rack",
        }
    }
}

impl std::str::FromStr for Topology {
    type Err = String;

    /// `rack` or `nvlinkDomain`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Topology::Rack, Topology::NvlinkDomain]
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("`{s}` is not a topology (`rack` or `nvlinkDomain`)"))
    }
}

impl Workload {
    /// A single-process job on one machine: one pod of `gpus` GPUs, duration unknown.
    pub fn single(
        id: &str,
        queue: &str,
        priority: Option<&str>,
        gpus: u32,
        created_at: Time,
    ) -> Workload {
        Workload {
            id: id.into(),
            queue: queue.into(),
            priority: priority.map(Into::into),
            pods: 1,
            gpus_per_pod: gpus,
            flavor: None,
            expected_duration_s: None,
            created_at,
            topology: None,
            split_slowdown_pct: None,
        }
    }

    /// Total GPUs the gang needs.
    pub fn gpus(&self) -> u64 {
        u64::from(self.pods) * u64::from(self.gpus_per_pod)
    }
}

/// Switches that turn the scheduler into Ferry's policy or a baseline (for the simulator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Options {
    /// When the head cannot be placed, reserve nodes for it and backfill only around them.
    pub backfill: bool,
    /// When a queue's head cannot be admitted, admit nothing behind it in that queue (StrictFIFO).
    pub strict_fifo: bool,
    /// Preempt lower-priority work in the queue, and borrowers to reclaim lent quota.
    pub preemption: bool,
    /// Order queue heads by weighted borrowed share (fair sharing) before priority and age.
    pub fair_sharing: bool,
    /// Most pending workloads examined in one cycle (bounds cycle time under deep queues).
    pub max_candidates_per_cycle: usize,
    /// Most preemption searches in one cycle.
    pub max_preemption_attempts_per_cycle: usize,
    /// Lend nodes reserved for a blocked gang to work that will not finish before the gang can
    /// start; that work is preempted (gracefully, it checkpoints) when the gang's turn comes.
    pub lend_reserved_nodes: bool,
    /// Shortest loan worth making, in seconds until the reserved gang can start (0: any).
    pub min_loan_s: u64,
    /// The head-of-line holder's reservation binds its whole cohort, even when it must borrow,
    /// and a gang that starts by taking back loans on it is not reclaimed: large jobs cannot
    /// starve (one that starts on free GPUs can be: docs/scheduler.md, Known weaknesses).
    pub drain_for_holder: bool,
    /// Within a priority, a job sorts as if created this many times its expected duration later:
    /// short jobs pass long ones created up to that much earlier, long ones still age in (0: by
    /// age alone). A job blocked by quota still takes the reservation from a younger holder,
    /// unless `reserve_by_key`.
    pub duration_weight: u32,
    /// A job blocked by quota takes the reservation from a holder later by that duration-weighted
    /// key, not from a younger one: a short gang drains the cluster before an older long one
    /// (a job blocked only by nodes never takes it over either way). With fairness deficits on,
    /// a queue owed more GPU-time than the holder's by `deficit_threshold_s` times the job's GPUs
    /// goes first whatever the key, and one owed less by as much never takes it over. Opt-in: on
    /// backlogs it lowers mean JCT a lot (to 0.75× of the default's on the generated sets, 0.3×
    /// on the long and heavier-load ones) but it lowers utilization (about a point on average)
    /// and teams' shares, so per trace it loses utilization and fairness comparisons; with
    /// deficits and `holdForOwed` the shares are as close as the default's on the generated
    /// sets, not on the real trace's (docs/scheduler.md, "Opt-in switches").
    pub reserve_by_key: bool,
    /// An owner reclaims lent quota by preemption only when it would otherwise wait at least this
    /// long (seconds) for borrowers to finish; 0 reclaims at once.
    pub reclaim_patience_s: u64,
    /// A job preempts lower classes of its queue only when it would otherwise wait at least
    /// this long (seconds) for nodes and quota to free up as running work ends; 0 preempts at
    /// once, as Kubernetes and Kueue do. 300 spares work that ends within minutes anyway, which
    /// on replays with random classes avoids chains of preemptions of a large low gang
    /// (docs/scheduler.md, "Priority classes in the replay").
    pub priority_patience_s: u64,
    /// Each cycle first tries the (few, at most 8) pending jobs expected to run longer than
    /// this percentage of the time the cluster needs to clear all known work (running and
    /// pending GPU-seconds over its GPUs): starting them late would stretch the makespan, so
    /// they pass shorter work that duration weighting would put first (0: off; 150 by default,
    /// docs/scheduler-lab.md "The critical path re-judged").
    pub critical_path_pct: u32,
    /// A long job that no pending job is larger than is on the critical path from a lower bar:
    /// this percentage of the clearing time for the smallest job, rising with the job's share
    /// of the cluster to `critical_path_pct` for one that fills it. Starting a small long job
    /// early costs the short work little, and with nothing larger waiting it delays no gang
    /// (125 by default; 0: `critical_path_pct` for every job).
    pub critical_path_small_pct: u32,
    /// What restarting a reclaimed job costs, in seconds of each of its GPUs (grace period to
    /// checkpoint, reload on restart). A reclaim whose job would get its quota back by itself
    /// sooner than this times the reclaimed GPUs over its own goes without: a large gang is not
    /// restarted to make room for a small job the quota frees for soon (0, the default: reclaim
    /// whenever allowed). Opt-in: it wins mean JCT and utilization on long, heavily loaded
    /// traces but costs fairness on the tuning and held-out sets (docs/scheduler-lab.md, "The
    /// cost of a reclaim").
    pub reclaim_restart_cost_s: u64,
    /// Fair-sharing preemption (Kueue's): a queue below its nominal quota whose waiting head
    /// would take it above may preempt borrowed work of cohort members, only while each victim
    /// queue keeps at least the share of its own quota that the preemptor ends with.
    pub fair_preemption: bool,
    /// Borrowing waits while a cohort member below its nominal quota has a waiting single-pod
    /// head (even one that must borrow a little itself): the GPUs the next end frees go to the
    /// team that is owed them, not as fragments to a team already above its quota. Off by
    /// default: it raises fairness on traces of single-node jobs but costs mean JCT against
    /// EASY backfill (docs/scheduler.md).
    pub hold_for_owed: bool,
    /// Half-life (seconds) of each queue's fairness deficit. While two or more queues of a
    /// cohort are saturated (work waiting, asking for at least their entitlement), each of them
    /// accrues the busy GPUs of those queues split by entitlement minus the GPUs it uses; the
    /// sum decays with this half-life. Nominal quota then becomes a time-averaged guarantee: a
    /// queue does not reclaim from one owed more GPU-time than itself, and a queue that got more
    /// than its due does not take a new reservation (0: no deficits, the policy before).
    pub deficit_half_life_s: u64,
    /// How far apart deficits must be to act on: this many seconds times the GPUs of the job
    /// concerned (a reclaim victim, or a job that would take a reservation).
    pub deficit_threshold_s: u64,
    /// A queue reclaiming lent quota (its job fits in its nominal quota) may also take
    /// single-node borrowed jobs running on nodes reserved for another gang, and use their
    /// GPUs, when those jobs would still be running when the gang can start: the gang never
    /// counted on those GPUs, so its start does not move. Without it, reserved nodes are out of
    /// reach of reclaims and a team owed GPUs waits behind borrowers for the whole drain. Off by
    /// default: it lowers mean JCT and preemptions but costs utilization against EASY backfill
    /// on held-out traces and does not raise fairness there (docs/scheduler.md).
    pub reclaim_through_reservation: bool,
    /// How far past its quota a draining holder may take its queue: the holder drains (and
    /// its gang, once started, is not reclaimed) only if, with the gang, its queue would use
    /// at most the larger of its nominal quota and the gang, plus this percentage of its
    /// nominal quota. A queue already using most of its quota then waits for its own work to
    /// return quota instead of draining the cohort for a gang that would take it far above
    /// (`None`: no bound, the policy before; docs/scheduler.md).
    pub drain_overshoot_pct: Option<u32>,
    /// Reclaiming lent quota may take a borrowed job only while its queue borrows at least this
    /// percentage of the job's GPUs. At the default 50, a reclaim never leaves the victim's queue
    /// owed more than it was borrowing, and never restarts a large gang to return a few GPUs
    /// (0: any borrowed job, the policy before; docs/scheduler.md).
    pub reclaim_min_borrowed_pct: u32,
    /// Fair-sharing preemption may also go ahead when Kueue's condition fails but the victims
    /// are single-node jobs and it brings the queues involved closer to their nominal quotas:
    /// the largest relative gap |usage / nominal − 1| among the preemptor's queue and the
    /// victims' must shrink. With quotas that are not a multiple of the jobs' size, Kueue's
    /// condition leaves the remainder with whichever team took it first (a team owed 17 GPUs
    /// keeps three 8-GPU jobs while one owed 159 waits at 152); this hands it back
    /// (docs/scheduler.md).
    pub fair_preemption_minimax: bool,
    /// In a cohort tree, fair-sharing preemption between departments (where two queues' paths
    /// part, one side a cohort) as Kueue's hierarchical fair sharing does it: a queue at or
    /// over its nominal quota may also take borrowed work of another department whose weighted
    /// borrowing stays at least its own department's after the move (`LessThanOrEqualToFinalShare`,
    /// so the move cannot be reversed). Without it only a queue below its nominal quota takes
    /// borrowed work, and a department at its quota waits for the spare it is owed. No effect
    /// without trees (docs/scheduler.md, "Fair sharing in a tree").
    pub tree_fair_preemption: bool,
    /// How much longer (percent) a gang runs when its pods span racks although one rack could
    /// hold it: its collectives cross the slower links between racks. With it set, such a gang
    /// that does not require a rack (`Workload::topology`) waits for one rack to hold it (by
    /// running work's expected ends) while that wait is shorter than the slowdown would cost
    /// it and the work queued behind it, and a split gang's expected end is that much later.
    /// A workload may give its own (`Workload::split_slowdown_pct`). 0: no gang waits for a
    /// rack when GPUs are free across racks (the policy before; docs/scheduler.md).
    pub split_slowdown_pct: u32,
    /// Slurm's multifactor priority instead of Ferry's order: waiting work goes by a sum of
    /// an age factor and its queue's fair-share factor, the highest holds the reservation
    /// (`None`: Ferry's order). The `slurm-multifactor` baseline of `ferry sim` runs it.
    pub multifactor: Option<Multifactor>,
}

/// The weights and decay of Slurm's `priority/multifactor` plugin that the baseline models:
/// priority = `weight_age` × min(age / `max_age_s`, 1) + `weight_fairshare` × 2^(−U/S) +
/// `weight_qos` × QOS, where U is the queue's share of all GPU-seconds used, each decayed with
/// `decay_half_life_s`, S its share of the fair-share weights (classic fair-share) and QOS the
/// job's priority class value over the highest's (job size and partition factors are left at
/// weight 0). Defaults are Slurm's own for the decay and maximum age and a common site choice
/// of weights (fair-share ten times age, and QOS above both, as sites that give urgent work a
/// QOS set it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Multifactor {
    /// `PriorityWeightAge`.
    pub weight_age: u32,
    /// `PriorityWeightFairshare`.
    pub weight_fairshare: u32,
    /// `PriorityWeightQOS`: a job's priority class is its QOS, its factor the class's value
    /// over the highest class's (negative values count as 0).
    pub weight_qos: u32,
    /// `PriorityMaxAge`: the age at which the age factor reaches 1.
    pub max_age_s: u64,
    /// `PriorityDecayHalfLife`: half-life of the usage behind the fair-share factor.
    pub decay_half_life_s: u64,
}

impl Default for Multifactor {
    fn default() -> Self {
        Multifactor {
            weight_age: 1_000,
            weight_fairshare: 10_000,
            weight_qos: 100_000,
            max_age_s: 7 * 86_400,
            decay_half_life_s: 7 * 86_400,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backfill: true,
            strict_fifo: false,
            preemption: true,
            fair_sharing: true,
            max_candidates_per_cycle: 2048,
            max_preemption_attempts_per_cycle: 32,
            lend_reserved_nodes: true,
            min_loan_s: 0,
            drain_for_holder: true,
            duration_weight: 6,
            reserve_by_key: false,
            reclaim_patience_s: 0,
            priority_patience_s: 0,
            critical_path_pct: 150,
            critical_path_small_pct: 125,
            reclaim_restart_cost_s: 0,
            fair_preemption: true,
            hold_for_owed: false,
            deficit_half_life_s: 0,
            deficit_threshold_s: 3_600,
            reclaim_through_reservation: false,
            drain_overshoot_pct: Some(50),
            reclaim_min_borrowed_pct: 50,
            fair_preemption_minimax: true,
            tree_fair_preemption: true,
            split_slowdown_pct: 0,
            multifactor: None,
        }
    }
}

/// One GPU set for one pod of an admitted gang (rank order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlacement {
    /// Node name.
    pub node: String,
    /// GPU indices on that node (what `CUDA_VISIBLE_DEVICES` lists).
    pub gpus: Vec<u32>,
}

/// Why a running workload must stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PreemptReason {
    /// A higher-priority workload in the same queue needs the GPUs.
    Priority {
        /// The workload that will take the GPUs.
        preemptor: String,
    },
    /// The owner of lent quota (the preemptor's queue) takes it back.
    Reclaim {
        /// The workload that will take the GPUs.
        preemptor: String,
    },
    /// The workload ran on nodes lent from a reservation, and the reserved gang's turn has come.
    LoanEnded {
        /// The workload that will take the GPUs.
        preemptor: String,
    },
    /// Its queue was stopped with `StopPolicy::HoldAndDrain`: it waits there until the queue
    /// is released (no workload takes its GPUs in its stead).
    QueueStopped {
        /// The queue's name.
        queue: String,
    },
}

/// What the control plane must do after a cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Decision {
    /// Start the whole gang now on exactly these GPUs (one entry per pod, rank order).
    Admit {
        /// Workload id.
        id: String,
        /// Flavor charged.
        flavor: String,
        /// Where each pod runs.
        placement: Vec<PodPlacement>,
    },
    /// Stop the workload gracefully (SIGTERM, grace, checkpoint), then call `evicted`; it is requeued.
    Preempt {
        /// Workload id.
        id: String,
        /// Why.
        reason: PreemptReason,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_missing_from_a_file_take_ferrys_defaults() {
        let parsed: Options = serde_json::from_str(r#"{"backfill": false}"#).unwrap();
        assert_eq!(
            parsed,
            Options {
                backfill: false,
                ..Options::default()
            }
        );
    }
}

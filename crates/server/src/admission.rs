//! Admission of GPU jobs through `ferry-sched`: team queues with quotas and cohorts (cohort
//! trees from stored `Cohort`s), named priorities, whole-gang admission and graceful
//! preemption, on this machine's GPUs.
//!
//! The reconcile loop owns one [`Admission`]. Each pass it is synchronised with the store
//! (queued jobs submitted, running ones restored after a restart, finished ones released),
//! then one scheduling cycle runs and its decisions are persisted *before* they are acted
//! on: `Queued → Admitted` with the chosen GPUs, or `→ Preempted` followed by SIGTERM and
//! the job's grace period to checkpoint. A preempted job's GPUs stay its own until every
//! rank has exited; only then is it requeued, to resume from its latest checkpoint. A job its
//! user suspends (`crate::suspend`) leaves the scheduler the same way, once its ranks have
//! exited, and is submitted afresh when resumed. Jobs that need no GPU bypass the scheduler.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use ferry_runtime::Inventory;
use ferry_sched::{
    ANY_FLAVOR, Cluster, Decision, FORECAST_CYCLES, FlavorQuota, PodPlacement, PreemptReason,
    QueueSpec, SchedError, Scheduler, Time, Workload,
};
use ferry_spec::{
    Cohort, FieldError, JobPhase, PriorityClass, Queue, Resource, ResourceKind, TrainJob,
};
use ferry_store::{JobRecord, StatusPatch, StoreError};

use crate::checkpoint::{Layout, latest_checkpoint};
use crate::error::ApiError;
use crate::state::ControlPlane;

/// The queue jobs use when `spec.queue` is omitted; it gets every GPU unless a stored
/// `Queue` of that name says otherwise.
pub(crate) const DEFAULT_QUEUE: &str = "default";

/// The node name the local machine has in the scheduler's cluster.
const LOCAL_NODE: &str = "local";

/// Where the scheduler stands on one job it knows.
#[derive(Debug, Clone, PartialEq)]
enum Tracked {
    /// Waiting in its queue.
    Pending,
    /// Holding GPUs (admitted, running or restarting); `ckpt` is the newest checkpoint
    /// time already reported, `end` the end its measured pace last predicted.
    Running {
        ckpt: Option<Time>,
        end: Option<Time>,
    },
    /// Told to stop by a `Preempt` decision; requeued once its ranks have exited.
    Evicting,
    /// Restored as running after a rebuild while it was being preempted or suspended;
    /// released (and submitted afresh once requeued or resumed) when its ranks have exited.
    Draining,
}

/// The scheduler and what it knows, owned by the reconcile loop.
pub(crate) struct Admission {
    sched: Scheduler,
    /// The queue set it was built from; a change rebuilds it.
    queues: Vec<QueueSpec>,
    /// The cohort trees it was built with; a change (an applied or deleted `Cohort`) rebuilds
    /// it.
    cohorts: Vec<ferry_sched::CohortSpec>,
    /// The priorities it was built with; a change (an applied or deleted `PriorityClass`)
    /// rebuilds it.
    priorities: Vec<ferry_sched::PriorityClass>,
    tracked: HashMap<String, Tracked>,
    /// Each tracked job's time limit when the scheduler was last given its expected duration
    /// (`note_limits`: `ferry apply` may change a live job's limits).
    limits: HashMap<String, Limit>,
}

/// The time limit a tracked job's expected duration was computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Limit {
    /// Seconds its ended runs had taken of `spec.maxTotalRuntimeSeconds` when the scheduler
    /// learnt of it (submit or restore). Not re-read while it stays known: across a
    /// preemption the scheduler itself subtracts the work up to the last checkpoint, and a
    /// limit edited later is measured against this older total (an upper bound still).
    past_s: u64,
    /// `time_limit` when last told.
    told: Option<u64>,
}

/// The local machine as the scheduler's cluster: one node holding every GPU.
fn cluster(inventory: &Inventory) -> Option<Cluster> {
    let n = u32::try_from(inventory.len()).ok().filter(|&n| n > 0)?;
    Some(Cluster::local(n, &local_flavor(inventory)))
}

/// The flavor name of this machine's GPUs (`virtual` for `ferry up --gpus N`).
fn local_flavor(inventory: &Inventory) -> String {
    inventory
        .gpus
        .first()
        .map_or_else(|| "none".to_owned(), |g| g.name.clone())
}

/// Whether a quota's flavor applies to this machine: `any`, the GPUs' own name, or every
/// flavor on virtual slots (which stand in for whatever GPU a spec names).
fn flavor_applies(flavor: &str, inventory: &Inventory) -> bool {
    flavor.eq_ignore_ascii_case(ANY_FLAVOR)
        || flavor.eq_ignore_ascii_case(&local_flavor(inventory))
        || matches!(inventory.source, ferry_runtime::GpuSource::Virtual)
}

/// The scheduler's view of the stored queues (sorted by name), plus `default` when no
/// stored queue has that name. `origins[i]` maps a sched quota index back to the spec's.
fn queue_specs(queues: &[Queue], inventory: &Inventory) -> (Vec<QueueSpec>, Vec<Vec<usize>>) {
    let total = u32::try_from(inventory.len()).unwrap_or(u32::MAX);
    let mut by_name: BTreeMap<&str, &Queue> = BTreeMap::new();
    for q in queues {
        by_name.entry(q.metadata.name.as_str()).or_insert(q);
    }
    let mut specs = Vec::with_capacity(by_name.len() + 1);
    let mut origins = Vec::with_capacity(by_name.len() + 1);
    for (name, q) in by_name {
        let (quotas, origin) = local_quota(q.spec.quotas.iter().map(Parts::parts), inventory);
        specs.push(QueueSpec {
            name: name.to_owned(),
            cohort: q.spec.cohort.clone(),
            quotas,
            fair_share_weight: q.spec.weight,
            // A change of it is a change of the queue set: the scheduler is rebuilt.
            stop_policy: q.spec.stop_policy.into(),
            preemption: q.spec.preemption.into(),
        });
        origins.push(origin);
    }
    if !specs.iter().any(|q| q.name == DEFAULT_QUEUE) {
        specs.push(QueueSpec::any_flavor(DEFAULT_QUEUE, None, total));
        origins.push(vec![0]);
    }
    (specs, origins)
}

/// A Queue's or a Cohort's quota for one flavor, as `local_quota` sums them.
trait Parts {
    /// `(flavor, nominal, borrowing limit, lending limit)`.
    fn parts(&self) -> (&str, i32, Option<i32>, Option<i32>);
}

impl Parts for ferry_spec::FlavorQuota {
    fn parts(&self) -> (&str, i32, Option<i32>, Option<i32>) {
        (
            &self.flavor,
            self.nominal,
            self.borrowing_limit,
            self.lending_limit,
        )
    }
}

impl Parts for ferry_spec::CohortQuota {
    fn parts(&self) -> (&str, i32, Option<i32>, Option<i32>) {
        (
            &self.flavor,
            self.nominal,
            self.borrowing_limit,
            self.lending_limit,
        )
    }
}

/// Every quota of a document (`(flavor, nominal, borrowing limit, lending limit)`) that
/// applies to this machine, summed into one `any` quota (one pool here), and the indexes of the
/// quotas summed; none when no quota applies.
fn local_quota<'a>(
    quotas: impl Iterator<Item = (&'a str, i32, Option<i32>, Option<i32>)>,
    inventory: &Inventory,
) -> (Vec<FlavorQuota>, Vec<usize>) {
    let mut quota: Option<FlavorQuota> = None;
    let mut origin = Vec::new();
    let count = |v: i32| u32::try_from(v.max(0)).unwrap_or(0);
    let sum = |a: Option<u32>, b: Option<i32>| Some(a? + count(b?));
    for (j, (flavor, nominal, borrowing_limit, lending_limit)) in quotas.enumerate() {
        if !flavor_applies(flavor, inventory) {
            continue;
        }
        quota = Some(match quota {
            None => FlavorQuota {
                flavor: ANY_FLAVOR.to_owned(),
                nominal: count(nominal),
                borrowing_limit: borrowing_limit.map(count),
                lending_limit: lending_limit.map(count),
            },
            Some(acc) => FlavorQuota {
                nominal: acc.nominal + count(nominal),
                borrowing_limit: sum(acc.borrowing_limit, borrowing_limit),
                lending_limit: sum(acc.lending_limit, lending_limit),
                ..acc
            },
        });
        origin.push(j);
    }
    (quota.into_iter().collect(), origin)
}

/// The scheduler's view of the stored cohorts (sorted by name), their quotas that apply here
/// summed as a queue's are. `origins[i]` maps a sched quota index back to the spec's.
fn cohort_specs(
    cohorts: &[Cohort],
    inventory: &Inventory,
) -> (Vec<ferry_sched::CohortSpec>, Vec<Vec<usize>>) {
    let mut by_name: BTreeMap<&str, &Cohort> = BTreeMap::new();
    for c in cohorts {
        by_name.entry(c.metadata.name.as_str()).or_insert(c);
    }
    by_name
        .into_iter()
        .map(|(name, c)| {
            let (quotas, origin) = local_quota(c.spec.quotas.iter().map(Parts::parts), inventory);
            let spec = ferry_sched::CohortSpec {
                name: name.to_owned(),
                parent: c.spec.parent.clone(),
                quotas,
                fair_share_weight: c.spec.weight,
            };
            (spec, origin)
        })
        .unzip()
}

/// The scheduler's configuration from stored (and applied) objects: its queues and cohorts,
/// and for each the indexes of the document's quotas its one quota sums.
struct Config {
    queues: Vec<QueueSpec>,
    queue_origins: Vec<Vec<usize>>,
    cohorts: Vec<ferry_sched::CohortSpec>,
    cohort_origins: Vec<Vec<usize>>,
}

impl Config {
    /// The configuration of `queues` and `cohorts` on this machine.
    fn of(queues: &[Queue], cohorts: &[Cohort], inventory: &Inventory) -> Config {
        let (queues, queue_origins) = queue_specs(queues, inventory);
        let (cohorts, cohort_origins) = cohort_specs(cohorts, inventory);
        Config {
            queues,
            queue_origins,
            cohorts,
            cohort_origins,
        }
    }

    /// An empty scheduler of this configuration on `cluster`.
    fn scheduler(
        &self,
        cluster: Cluster,
        priorities: Vec<ferry_sched::PriorityClass>,
        policy: ferry_sched::Options,
    ) -> Result<Scheduler, SchedError> {
        Scheduler::with_cohorts(
            cluster,
            self.queues.clone(),
            &self.cohorts,
            priorities,
            policy,
        )
    }

    /// Turns a scheduler config error (`queues[i].quotas[j].x`, `cohorts[i].parent`) into one
    /// naming the Queue or Cohort document and its own field path; also returns that
    /// document's kind and name when there is one.
    fn error(&self, e: &SchedError) -> (Option<(ResourceKind, &str)>, FieldError) {
        let SchedError::InvalidConfig {
            field,
            problem,
            fix,
        } = e
        else {
            return (None, FieldError::new("spec", e.to_string()));
        };
        let indexed = |prefix: &str| {
            let rest = field.strip_prefix(prefix)?;
            let (i, tail) = rest.split_once(']')?;
            Some((i.parse::<usize>().ok()?, tail.trim_start_matches('.')))
        };
        let (kind, name, noun, origins, tail) = match (indexed("queues["), indexed("cohorts[")) {
            (Some((i, tail)), _) if i < self.queues.len() => (
                ResourceKind::Queue,
                self.queues[i].name.as_str(),
                "queue",
                &self.queue_origins[i],
                tail.replace("fairShareWeight", "weight"),
            ),
            (_, Some((i, tail))) if i < self.cohorts.len() => (
                ResourceKind::Cohort,
                self.cohorts[i].name.as_str(),
                "cohort",
                &self.cohort_origins[i],
                tail.to_owned(),
            ),
            _ => {
                return (
                    None,
                    FieldError::new(field.clone(), format!("{problem}; {fix}")),
                );
            }
        };
        let path = match tail.strip_prefix("quotas[").and_then(|r| r.split_once(']')) {
            Some((j, rest)) => {
                let j = j
                    .parse::<usize>()
                    .ok()
                    .and_then(|j| origins.get(j).copied());
                format!(
                    "spec.quotas[{}]{rest}",
                    j.map_or_else(|| "?".into(), |j| j.to_string())
                )
            }
            None if tail.is_empty() || tail == "name" => "metadata.name".to_owned(),
            None => format!("spec.{tail}"),
        };
        // Named once: most problems already say which queue or cohort they are about.
        let own = format!("{noun} `{name}`");
        let about = if problem.contains(&own) {
            String::new()
        } else {
            format!("{own}: ")
        };
        (
            Some((kind, name)),
            FieldError::new(path, format!("{about}{problem}; fix: {fix}")),
        )
    }

    /// `spec.queue`'s problem when `job` names a queue this configuration lacks, as
    /// `Scheduler::submit` words it: for when no scheduler can be built to ask.
    fn unknown_queue(&self, job: &TrainJob) -> Option<FieldError> {
        let name = queue_of(job);
        if self.queues.iter().any(|q| q.name == name) {
            return None;
        }
        let (problem, fix) =
            ferry_sched::unknown_queue(name, self.queues.iter().map(|q| q.name.as_str()));
        Some(FieldError::new("spec.queue", format!("{problem}; {fix}")))
    }
}

/// The queue `job` waits in: `spec.queue`, else [`DEFAULT_QUEUE`].
pub(crate) fn queue_of(job: &TrainJob) -> &str {
    job.spec.queue.as_deref().unwrap_or(DEFAULT_QUEUE)
}

/// The workload of `job`, whose earlier runs took `past_s` seconds of its budget.
fn workload_of(id: &str, job: &TrainJob, created_at: i64, past_s: u64) -> Workload {
    let r = &job.spec.resources;
    Workload {
        id: id.to_owned(),
        queue: queue_of(job).to_owned(),
        priority: job.spec.priority.clone(),
        pods: u32::try_from(r.nodes.max(1)).unwrap_or(1),
        gpus_per_pod: u32::try_from(r.gpus_per_node.max(0)).unwrap_or(0),
        flavor: None,
        // A limit is an upper bound: backfilling with it never delays a reservation.
        expected_duration_s: time_limit(job, past_s),
        created_at: u64::try_from(created_at).unwrap_or(0),
        topology: r.topology.and_then(|t| t.name().parse().ok()),
        split_slowdown_pct: r.split_slowdown_pct.map(|p| p.max(0) as u32),
    }
}

/// The tighter of the job's time limits (one run, or what its earlier runs, `past_s` seconds,
/// left of the budget of all runs), an upper bound on how long its next run can last.
fn time_limit(job: &TrainJob, past_s: u64) -> Option<u64> {
    let spec = &job.spec;
    let left = spec
        .max_total_runtime_seconds
        .map(|b| b.saturating_sub(past_s).max(1));
    match (spec.max_runtime_seconds, left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The workload with its expected duration: the time limit, or twice the planner's
/// prediction for launcher engines when that is shorter or there is no limit (a running
/// job's measured pace replaces either, `report_pace`).
fn planned_workload(job: &JobRecord, past_s: u64) -> Workload {
    planned_workload_of(&job.uid, &job.job, job.created_at.timestamp(), past_s)
}

fn planned_workload_of(id: &str, job: &TrainJob, created_at: i64, past_s: u64) -> Workload {
    let mut w = workload_of(id, job, created_at, past_s);
    let estimate = crate::engines::adapter_for(job)
        .ok()
        .and_then(|a| a.estimated_duration_s(job));
    w.expected_duration_s = match (w.expected_duration_s, estimate) {
        (Some(limit), Some(e)) => Some(limit.min(e)),
        (limit, e) => limit.or(e),
    };
    w
}

/// Where a job admitted earlier holds its GPUs, from the ids stored on it.
fn placement_of(job: &JobRecord, ids: &[String]) -> Option<Vec<PodPlacement>> {
    let per_pod = usize::try_from(job.job.spec.resources.gpus_per_node).ok()?;
    let idx: Vec<u32> = job
        .gpus
        .iter()
        .flatten()
        .map(|id| ids.iter().position(|x| x == id).map(|i| i as u32))
        .collect::<Option<_>>()?;
    if per_pod == 0 || idx.is_empty() || !idx.len().is_multiple_of(per_pod) {
        return None;
    }
    Some(
        idx.chunks(per_pod)
            .map(|c| PodPlacement {
                node: LOCAL_NODE.to_owned(),
                gpus: c.to_vec(),
            })
            .collect(),
    )
}

/// The GPU ids of a placement, split per rank (pods in order, ranks in order within a pod).
fn gpus_per_rank(job: &TrainJob, placement: &[PodPlacement], ids: &[String]) -> Vec<Vec<String>> {
    let chosen: Vec<String> = placement
        .iter()
        .flat_map(|p| p.gpus.iter().map(|&g| ids[g as usize].clone()))
        .collect();
    let per_rank = job.spec.resources.gpus_per_proc().max(1) as usize;
    chosen.chunks(per_rank).map(<[String]>::to_vec).collect()
}

fn now() -> Time {
    u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0)
}

/// When the newest checkpoint in `dir` (laid out as `layout`) was written.
fn checkpoint_time(dir: &Path, layout: Layout) -> Option<Time> {
    let latest = latest_checkpoint(dir, layout)?;
    let modified = std::fs::metadata(latest).ok()?.modified().ok()?;
    let secs = modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(secs)
}

/// Reads the stored objects of one kind (`Queue`, `PriorityClass`); an unreadable one is
/// logged and skipped (apply-time checks make that rare).
async fn stored<T: serde::de::DeserializeOwned>(
    plane: &ControlPlane,
    kind: &str,
) -> Result<Vec<T>, ApiError> {
    let mut out = Vec::new();
    for rec in plane.store().list_objects(kind, None).await? {
        match serde_json::from_value::<T>(rec.doc) {
            Ok(q) => out.push(q),
            Err(e) => {
                tracing::warn!(%kind, name = %rec.name, error = %e, "stored object unreadable")
            }
        }
    }
    Ok(out)
}

/// The stored objects of `kind` with the batch's own in place of those of the same name: what
/// the control plane will hold once `batch` is applied.
async fn stored_and_applied<T: serde::de::DeserializeOwned + Clone>(
    plane: &ControlPlane,
    kind: &str,
    batch: &[&T],
    name: impl Fn(&T) -> &str,
) -> Result<Vec<T>, ApiError> {
    let mut out: Vec<T> = stored::<T>(plane, kind)
        .await?
        .into_iter()
        .filter(|s| !batch.iter().any(|b| name(b) == name(s)))
        .collect();
    out.extend(batch.iter().map(|b| (*b).clone()));
    Ok(out)
}

/// Reads the stored queues.
async fn stored_queues(plane: &ControlPlane) -> Result<Vec<Queue>, ApiError> {
    stored(plane, "Queue").await
}

/// Reads the stored cohorts.
async fn stored_cohorts(plane: &ControlPlane) -> Result<Vec<Cohort>, ApiError> {
    stored(plane, "Cohort").await
}

/// The priorities jobs may name: `ferry up`'s own (`--priority-classes`, else `low`, `normal`,
/// `high`) with the applied `PriorityClass`es added; an applied class replaces one of the same
/// name.
fn priorities_with(
    plane: &ControlPlane,
    applied: impl IntoIterator<Item = PriorityClass>,
) -> Vec<ferry_sched::PriorityClass> {
    ferry_sched::PriorityClass::with_extra(
        plane.config().priorities.clone(),
        applied.into_iter().map(|c| ferry_sched::PriorityClass {
            preempting: c.preempting(),
            value: c.spec.value,
            name: c.metadata.name,
        }),
    )
}

/// The priorities as stored now (see [`priorities_with`]).
async fn stored_priorities(
    plane: &ControlPlane,
) -> Result<Vec<ferry_sched::PriorityClass>, ApiError> {
    Ok(priorities_with(
        plane,
        stored(plane, "PriorityClass").await?,
    ))
}

/// `ferry up`'s own priority classes that no applied `PriorityClass` (in `applied`) replaces,
/// as records marked `status.builtIn`, so `ferry get priorityclasses` lists every name a job
/// may give.
pub(crate) fn built_in_classes(
    plane: &ControlPlane,
    applied: &[ferry_store::ObjectRecord],
) -> Vec<ferry_store::ObjectRecord> {
    plane
        .config()
        .priorities
        .iter()
        .filter(|c| !applied.iter().any(|a| a.name == c.name))
        .map(|c| {
            let spec = serde_json::json!({
                "value": c.value,
                "preemptionPolicy": if c.preempting { "PreemptLowerPriority" } else { "Never" },
            });
            crate::scope::built_in(ResourceKind::PriorityClass, &c.name, spec)
        })
        .collect()
}

/// Refuses to delete a `PriorityClass` that is `ferry up`'s own (not stored: there is nothing to
/// delete; an applied class of its name may be deleted, the name then falls back to it), or a
/// `Queue` or `PriorityClass` that an unfinished job still names: the job would otherwise wait in
/// a queue no scheduler has, or fail as unschedulable at the next pass. A `Cohort` that queues or
/// child cohorts still name may be deleted (it becomes a root with no GPUs of its own, as a
/// cohort no document defines), but no `Queue` or `Cohort` is deleted when the queues and cohort
/// trees left would not build a scheduler (the scheduler's reason is given): the control plane
/// would keep admitting by the queues it had. `along` are the other queues and cohorts the same
/// command deletes (`ferry delete -f`), judged gone already, so each queue of them must be one
/// that can go: otherwise this one going first would leave it alone.
pub(crate) async fn check_delete(
    plane: &ControlPlane,
    kind: ResourceKind,
    name: &str,
    along: &[(ResourceKind, String)],
) -> Result<(), ApiError> {
    if kind == ResourceKind::Queue {
        check_unfinished_users(plane, kind, name, |j| queue_of(j) == name).await?;
    }
    for (k, n) in along.iter().filter(|(k, _)| *k == ResourceKind::Queue) {
        check_unfinished_users(plane, *k, n, |j| queue_of(j) == n)
            .await
            .map_err(|mut e| {
                e.message = format!(
                    "{} {name} goes only with {} {n}, which cannot: {}",
                    kind.as_str(),
                    k.as_str(),
                    e.message
                );
                e
            })?;
    }
    if matches!(kind, ResourceKind::Queue | ResourceKind::Cohort) {
        return check_config_delete(plane, kind, name, along).await;
    }
    if kind != ResourceKind::PriorityClass {
        return Ok(());
    }
    if plane.config().priorities.iter().any(|c| c.name == name) {
        let applied = plane
            .store()
            .get_object(kind.as_str(), crate::scope::CLUSTER, name)
            .await?;
        return match applied {
            Some(_) => Ok(()),
            None => Err(ApiError::conflict(format!(
                "PriorityClass `{name}` is ferry up's own (set by --priority-classes or the defaults low/normal/high); it cannot be deleted; apply a PriorityClass named `{name}` to change its value"
            ))),
        };
    }
    check_unfinished_users(plane, kind, name, |j| {
        j.spec.priority.as_deref() == Some(name)
    })
    .await
    .map_err(|mut e| {
        e.message
            .push_str(", or apply a class of the same name with the value you want instead");
        e
    })
}

/// Refuses to delete `kind` `name` while an unfinished job `names` it, listing them.
async fn check_unfinished_users(
    plane: &ControlPlane,
    kind: ResourceKind,
    name: &str,
    names: impl Fn(&TrainJob) -> bool,
) -> Result<(), ApiError> {
    let active = plane
        .store()
        .list_jobs(&ferry_store::JobFilter::unfinished())
        .await?;
    let users: Vec<String> = active
        .iter()
        .filter(|j| names(&j.job))
        .map(|j| format!("{}/{} ({})", j.namespace, j.name, j.phase.as_str()))
        .collect();
    if users.is_empty() {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "{} {name} is named by {} unfinished job(s): {}; cancel, finish or delete them first \
         (`ferry delete -f FILE` deletes a file's jobs before its queues and classes)",
        kind.as_str(),
        users.len(),
        users.join(", ")
    )))
}

/// Refuses to delete Queue or Cohort `name` (with the queues and cohorts in `along`) when the
/// stored queues and cohorts left would not build a scheduler (a queue's borrowing limit only
/// its GPUs made possible, a queue left alone in a tree with no GPUs), naming what names it.
async fn check_config_delete(
    plane: &ControlPlane,
    kind: ResourceKind,
    name: &str,
    along: &[(ResourceKind, String)],
) -> Result<(), ApiError> {
    let Some(cluster) = cluster(plane.inventory()) else {
        return Ok(());
    };
    let gone = |k: ResourceKind, n: &str| {
        (k == kind && n == name) || along.iter().any(|(ak, an)| *ak == k && an == n)
    };
    let mut queues = stored_queues(plane).await?;
    let mut cohorts = stored_cohorts(plane).await?;
    queues.retain(|q| !gone(ResourceKind::Queue, &q.metadata.name));
    cohorts.retain(|c| !gone(ResourceKind::Cohort, &c.metadata.name));
    let naming: Vec<String> = match kind {
        ResourceKind::Cohort => (queues.iter())
            .filter(|q| q.spec.cohort.as_deref() == Some(name))
            .map(|q| format!("Queue {}", q.metadata.name))
            .chain(
                (cohorts.iter())
                    .filter(|c| c.spec.parent.as_deref() == Some(name))
                    .map(|c| format!("Cohort {}", c.metadata.name)),
            )
            .collect(),
        _ => Vec::new(),
    };
    let config = Config::of(&queues, &cohorts, plane.inventory());
    let priorities = stored_priorities(plane).await?;
    match config.scheduler(cluster, priorities, plane.config().scheduler.clone()) {
        Ok(_) => Ok(()),
        Err(e) => {
            let (_, problem) = config.error(&e);
            let named = if !naming.is_empty() {
                format!(" is named by {}", naming.join(", "))
            } else if kind == ResourceKind::Cohort {
                " is named by nothing".to_owned()
            } else {
                " cannot go".to_owned()
            };
            Err(ApiError::conflict(format!(
                "{} {name}{named}; without it the queues and cohort trees would not build a \
                 scheduler ({problem}); change or delete those first, or delete them with it \
                 (`ferry delete -f FILE` of the file that defines them)",
                kind.as_str(),
            )))
        }
    }
}

/// Apply-time checks for a batch: every queue and cohort (stored plus the batch's) builds a
/// valid scheduler, and every GPU job names a known queue and priority and could ever be
/// admitted there — so no job waits forever for something that cannot happen.
pub(crate) async fn check_batch(
    plane: &ControlPlane,
    resources: &[Resource],
) -> Result<Vec<(usize, FieldError)>, ApiError> {
    let mut problems = Vec::new();
    let batch_queues: Vec<(usize, &Queue)> = resources
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Resource::Queue(q) => Some((i, q)),
            _ => None,
        })
        .collect();
    let batch_cohorts: Vec<(usize, &Cohort)> = resources
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Resource::Cohort(c) => Some((i, c)),
            _ => None,
        })
        .collect();
    let jobs: Vec<(usize, &TrainJob)> = resources
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Resource::TrainJob(j) if j.spec.resources.total_gpus() > 0 => Some((i, j)),
            _ => None,
        })
        .collect();
    let batch_classes: Vec<&PriorityClass> = resources
        .iter()
        .filter_map(|r| match r {
            Resource::PriorityClass(c) => Some(c),
            _ => None,
        })
        .collect();
    let applied =
        stored_and_applied(plane, "PriorityClass", &batch_classes, |c| &c.metadata.name).await?;
    let priorities = priorities_with(plane, applied);
    for &(i, job) in &jobs {
        if let Some(p) = &job.spec.priority
            && !priorities.iter().any(|c| &c.name == p)
        {
            let classes = priorities.iter().map(|c| (c.name.as_str(), c.value));
            let (problem, fix) = ferry_sched::unknown_priority(p, classes);
            problems.push((
                i,
                FieldError::new("spec.priority", format!("{problem}; {fix}")),
            ));
        }
    }
    if batch_queues.is_empty() && batch_cohorts.is_empty() && jobs.is_empty() {
        return Ok(problems);
    }
    let Some(cluster) = cluster(plane.inventory()) else {
        // No GPUs: GPU jobs are refused by the inventory check; queues and cohorts are kept
        // for later.
        return Ok(problems);
    };
    let batch: Vec<&Queue> = batch_queues.iter().map(|&(_, q)| q).collect();
    let queues = stored_and_applied(plane, "Queue", &batch, |q| &q.metadata.name).await?;
    let batch: Vec<&Cohort> = batch_cohorts.iter().map(|&(_, c)| c).collect();
    let cohorts = stored_and_applied(plane, "Cohort", &batch, |c| &c.metadata.name).await?;
    let config = Config::of(&queues, &cohorts, plane.inventory());
    let policy = plane.config().scheduler.clone();
    let mut sched = match config.scheduler(cluster, priorities, policy) {
        Ok(s) => Some(s),
        Err(e) => {
            let (culprit, err) = config.error(&e);
            // The document at fault, else the batch's first queue or cohort (a stored one is
            // at fault because of what the batch changes).
            let named = |kind: ResourceKind, name: &str| {
                (batch_queues
                    .iter()
                    .map(|(i, q)| (*i, ResourceKind::Queue, &q.metadata)))
                .chain((batch_cohorts.iter()).map(|(i, c)| (*i, ResourceKind::Cohort, &c.metadata)))
                .find(|(_, k, m)| *k == kind && m.name == name)
                .map(|(i, _, _)| i)
            };
            let first = (batch_queues.iter().map(|(i, _)| *i))
                .chain(batch_cohorts.iter().map(|(i, _)| *i))
                .min();
            let doc = culprit
                .and_then(|(kind, name)| named(kind, name))
                .or(first)
                .unwrap_or(0);
            problems.push((doc, err));
            None
        }
    };
    let gpus = plane.inventory().len();
    for (i, job) in jobs {
        if problems.iter().any(|(d, _)| *d == i) {
            continue;
        }
        // Without a scheduler, or for a job larger than the machine (refused for its size
        // before this check), only the queue's name can be checked.
        let Some(sched) = sched
            .as_mut()
            .filter(|_| job.spec.resources.total_gpus() as usize <= gpus)
        else {
            problems.extend(config.unknown_queue(job).map(|p| (i, p)));
            continue;
        };
        let w = workload_of(&format!("apply-check-{i}"), job, 0, 0);
        if let Err(e) = sched.submit(w) {
            let SchedError::InvalidWorkload {
                field,
                problem,
                fix,
                ..
            } = &e
            else {
                problems.push((i, FieldError::new("spec", e.to_string())));
                continue;
            };
            let path = match field.as_str() {
                "workload.queue" => "spec.queue",
                "workload.priority" => "spec.priority",
                _ => "spec.resources",
            };
            problems.push((i, FieldError::new(path, format!("{problem}; {fix}"))));
        }
    }
    Ok(problems)
}

impl Admission {
    /// An empty scheduler for the queues and cohorts of `wanted` under the control plane's
    /// priorities and policy switches; `sync` then registers the jobs the store says hold GPUs
    /// or wait.
    fn build(
        inventory: &Inventory,
        wanted: Config,
        priorities: Vec<ferry_sched::PriorityClass>,
        config: &crate::ServerConfig,
    ) -> Result<Self, String> {
        let cluster = cluster(inventory).ok_or("no GPUs")?;
        let sched = wanted
            .scheduler(cluster, priorities.clone(), config.scheduler.clone())
            .map_err(|e| wanted.error(&e).1.to_string())?;
        Ok(Self {
            sched,
            queues: wanted.queues,
            cohorts: wanted.cohorts,
            priorities,
            tracked: HashMap::new(),
            limits: HashMap::new(),
        })
    }
}

/// One admission step of a reconcile pass; `active` are the unfinished jobs, with
/// `Pending` ones already moved to `Queued`.
pub(crate) async fn schedule(
    plane: &ControlPlane,
    slot: &mut Option<Admission>,
    active: &[JobRecord],
) -> Result<(), ApiError> {
    let inventory = plane.inventory();
    if inventory.is_empty() {
        return Ok(());
    }
    let wanted = Config::of(
        &stored_queues(plane).await?,
        &stored_cohorts(plane).await?,
        inventory,
    );
    let priorities = stored_priorities(plane).await?;
    if slot.as_ref().is_none_or(|a| {
        a.queues != wanted.queues || a.cohorts != wanted.cohorts || a.priorities != priorities
    }) {
        match Admission::build(inventory, wanted, priorities, plane.config()) {
            Ok(a) => {
                if slot.is_some() {
                    tracing::info!(
                        "queues, cohorts or priority classes changed; scheduler rebuilt from the \
                         stored jobs"
                    );
                }
                *slot = Some(a);
            }
            Err(message) => {
                // Stored queues or cohorts no longer build (apply checks make this rare): keep
                // the last good scheduler, or admit nothing until they are fixed.
                tracing::error!(%message, "stored queues or cohorts are invalid");
                if slot.is_none() {
                    return Ok(());
                }
            }
        }
    }
    let adm = slot.as_mut().expect("built above");
    let ids = inventory.ids();
    sync(plane, adm, active, &ids).await?;
    let now = now();
    let decisions = adm.sched.cycle(now);
    // Admitted jobs launch, and preempted ones stop, in the next pass: run it at once.
    let acted = !decisions.is_empty();
    let names: HashMap<&str, &JobRecord> = active.iter().map(|j| (j.uid.as_str(), j)).collect();
    for d in decisions {
        match d {
            Decision::Admit { id, placement, .. } => {
                let Some(job) = names.get(id.as_str()) else {
                    continue;
                };
                adm.tracked.insert(
                    id.clone(),
                    Tracked::Running {
                        ckpt: None,
                        end: None,
                    },
                );
                plane.clear_waiting(&id);
                let gpus = gpus_per_rank(&job.job, &placement, &ids);
                let message = format!(
                    "admitted by queue {} on GPU(s) {}",
                    queue_of(&job.job),
                    gpus.iter().flatten().cloned().collect::<Vec<_>>().join(",")
                );
                let res = plane
                    .store()
                    .transition(
                        &id,
                        JobPhase::Queued,
                        JobPhase::Admitted,
                        "Admitted",
                        &message,
                        StatusPatch {
                            gpus: Some(gpus),
                            ..Default::default()
                        },
                    )
                    .await;
                ignore_conflict(res)?;
            }
            Decision::Preempt { id, reason } => {
                let Some(&job) = names.get(id.as_str()) else {
                    continue;
                };
                adm.tracked.insert(id.clone(), Tracked::Evicting);
                if job.phase == JobPhase::Preempted {
                    // Restored by a rebuild while it was already stopping (its queue drained
                    // since): its ranks are on their way out; requeued once they are gone.
                    continue;
                }
                // A suspended job's ranks stop already, and it stays suspended: `sync`
                // releases it once they have exited.
                if job.phase != JobPhase::Suspended {
                    preempt(plane, job, &reason, &names).await?;
                }
            }
        }
    }
    note_waiting(plane, adm, active, &names, now).await?;
    plane.set_views(crate::queue_view::views(&adm.sched, &names));
    if acted {
        plane.wake();
    }
    Ok(())
}

/// Brings the scheduler in line with the store: new queued jobs in, finished ones out,
/// preempted ones requeued once their ranks are gone, checkpoints reported.
async fn sync(
    plane: &ControlPlane,
    adm: &mut Admission,
    active: &[JobRecord],
    ids: &[String],
) -> Result<(), ApiError> {
    let by_uid: HashMap<&str, &JobRecord> = active.iter().map(|j| (j.uid.as_str(), j)).collect();
    // Jobs that ended or were deleted: release once no rank of theirs runs.
    let gone: Vec<String> = adm
        .tracked
        .keys()
        .filter(|uid| {
            by_uid
                .get(uid.as_str())
                .is_none_or(|j| j.job.spec.resources.total_gpus() == 0)
        })
        .filter(|uid| plane.live_gang(uid).is_none())
        .cloned()
        .collect();
    for uid in gone {
        adm.tracked.remove(&uid);
        if let Err(e) = adm.sched.finished(&uid) {
            tracing::warn!(job = %uid, error = %e, "scheduler did not know a finished job");
        }
    }
    for job in active {
        if job.job.spec.resources.total_gpus() == 0 && job.phase != JobPhase::Preempted {
            continue;
        }
        note_limits(adm, job);
        let uid = job.uid.as_str();
        let draining = plane.live_gang(uid).is_some_and(|g| g.draining);
        match (adm.tracked.get(uid).cloned(), job.phase) {
            // Suspended: out of the scheduler once no rank of its runs is left (until then
            // its GPUs stay its own); after a restart while they stop, counted until then.
            (Some(_), JobPhase::Suspended) if plane.live_gang(uid).is_none() => {
                adm.tracked.remove(uid);
                if let Err(e) = adm.sched.finished(uid) {
                    tracing::warn!(job = %uid, error = %e, "scheduler did not know a suspended job");
                }
                plane.clear_waiting(uid);
            }
            (None, JobPhase::Suspended) if plane.live_gang(uid).is_some() => {
                restore(plane, adm, job, ids, Tracked::Draining).await?;
            }
            // Suspended and resumed between two passes (an admission that lost to the
            // suspension left it tracked as admitted): released, then submitted afresh.
            (Some(t), JobPhase::Queued)
                if t != Tracked::Pending && plane.live_gang(uid).is_none() =>
            {
                adm.tracked.remove(uid);
                adm.sched.finished(uid).ok();
                submit(plane, adm, job).await?;
            }
            (None, JobPhase::Queued) => submit(plane, adm, job).await?,
            (None, phase) if phase.holds_resources() => {
                restore(
                    plane,
                    adm,
                    job,
                    ids,
                    Tracked::Running {
                        ckpt: None,
                        end: None,
                    },
                )
                .await?;
            }
            (None, JobPhase::Preempted) if plane.live_gang(uid).is_some() => {
                restore(plane, adm, job, ids, Tracked::Draining).await?;
            }
            (None | Some(Tracked::Draining), JobPhase::Preempted) if !draining => {
                if adm.tracked.remove(uid).is_some() {
                    adm.sched.finished(uid).ok();
                }
                requeue(plane, job).await?;
            }
            (Some(Tracked::Evicting), JobPhase::Preempted) if plane.live_gang(uid).is_none() => {
                if let Err(e) = adm.sched.evicted(uid) {
                    tracing::warn!(job = %uid, error = %e, "evicting a job the scheduler lost");
                    adm.sched.finished(uid).ok();
                    adm.tracked.remove(uid);
                } else {
                    adm.tracked.insert(uid.to_owned(), Tracked::Pending);
                }
                requeue(plane, job).await?;
            }
            (Some(Tracked::Running { ckpt, end }), phase) if phase.holds_resources() => {
                let latest = checkpoint_time(&plane.checkpoint_dir(job), Layout::of(&job.job));
                let ckpt = match latest.filter(|_| latest != ckpt) {
                    Some(at) => {
                        adm.sched.checkpointed(uid, at).ok();
                        latest
                    }
                    None => ckpt,
                };
                let end = report_pace(plane, adm, job, end);
                adm.tracked
                    .insert(uid.to_owned(), Tracked::Running { ckpt, end });
            }
            _ => {}
        }
    }
    let Admission {
        tracked, limits, ..
    } = adm;
    limits.retain(|uid, _| tracked.contains_key(uid));
    Ok(())
}

/// A tracked job whose time limits changed since the scheduler was given its expected
/// duration (`ferry apply` of new limits) gets the new one: a pending job is backfilled and
/// ordered by it, a running one's end moves, unless its measured pace already replaced it.
fn note_limits(adm: &mut Admission, job: &JobRecord) {
    let Some(limit) = adm.limits.get_mut(&job.uid) else {
        return;
    };
    let past_s = limit.past_s;
    let now = time_limit(&job.job, past_s);
    if limit.told == now {
        return;
    }
    limit.told = now;
    if matches!(
        adm.tracked.get(&job.uid),
        Some(Tracked::Running { end: Some(_), .. })
    ) {
        return;
    }
    let expected = planned_workload(job, past_s).expected_duration_s;
    match adm.sched.set_expected_duration(&job.uid, expected) {
        Ok(()) => tracing::info!(job = %job.uid, ?expected, "time limit changed: scheduler told"),
        Err(e) => tracing::debug!(job = %job.uid, error = %e, "expected duration not taken"),
    }
}

/// Tells the scheduler when a running job will end, from the pace of its steps towards
/// `spec.train.steps` (or the total its engine reports), whenever that moved enough since it
/// was last told (`told`; `ferry_sched::pace::worth_telling`); returns the end it was last
/// told.
fn report_pace(
    plane: &ControlPlane,
    adm: &mut Admission,
    job: &JobRecord,
    told: Option<Time>,
) -> Option<Time> {
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    let Some(left) = plane
        .live_gang(&job.uid)
        .and_then(|live| crate::pace::time_left(job, &live, now_ms))
    else {
        return told;
    };
    let t = now();
    let end = t + left;
    if !ferry_sched::pace::worth_telling(told, end, left) {
        return told;
    }
    match adm.sched.progress(&job.uid, t, left) {
        Ok(()) => {
            tracing::debug!(job = %job.uid, left_s = left, "expected end from the measured pace");
            Some(end)
        }
        Err(e) => {
            tracing::debug!(job = %job.uid, error = %e, "progress not taken");
            told
        }
    }
}

/// Records the limit the scheduler was just given `job`'s expected duration from.
fn note_told(adm: &mut Admission, job: &JobRecord, past_s: u64) {
    let told = time_limit(&job.job, past_s);
    adm.limits.insert(job.uid.clone(), Limit { past_s, told });
}

/// A queued job enters its queue, or fails now if it could never be admitted.
async fn submit(
    plane: &ControlPlane,
    adm: &mut Admission,
    job: &JobRecord,
) -> Result<(), ApiError> {
    let past_s = crate::limits::ended_runs_seconds(plane, job).await?;
    match adm.sched.submit(planned_workload(job, past_s)) {
        Ok(()) => {
            adm.tracked.insert(job.uid.clone(), Tracked::Pending);
            note_told(adm, job, past_s);
            Ok(())
        }
        Err(e) => {
            let res = plane
                .store()
                .transition(
                    &job.uid,
                    JobPhase::Queued,
                    JobPhase::Failed,
                    "Unschedulable",
                    &e.to_string(),
                    StatusPatch::default(),
                )
                .await;
            ignore_conflict(res)
        }
    }
}

/// A job that holds GPUs from before a restart (or a rebuild) is registered where it runs;
/// if it no longer fits the queues, it is preempted gracefully rather than left uncounted.
async fn restore(
    plane: &ControlPlane,
    adm: &mut Admission,
    job: &JobRecord,
    ids: &[String],
    as_: Tracked,
) -> Result<(), ApiError> {
    let admitted_at = u64::try_from(job.updated_at.timestamp()).unwrap_or(0);
    let past_s = crate::limits::ended_runs_seconds(plane, job).await?;
    let result = match placement_of(job, ids) {
        Some(p) => adm
            .sched
            .restore(planned_workload(job, past_s), &p, admitted_at),
        None => Err(SchedError::InvalidWorkload {
            id: job.uid.clone(),
            field: "placement".into(),
            problem: format!("its GPUs {:?} are not this machine's", job.gpus),
            fix: "requeue it".into(),
        }),
    };
    match result {
        Ok(()) => {
            adm.tracked.insert(job.uid.clone(), as_);
            note_told(adm, job, past_s);
            Ok(())
        }
        Err(e) => {
            tracing::warn!(job = %job.uid, error = %e, "cannot restore a running job");
            if matches!(job.phase, JobPhase::Preempted | JobPhase::Suspended) {
                // Its ranks are stopping already; it is not requeued by this.
                return Ok(());
            }
            stop_to_requeue(
                plane,
                job,
                &format!(
                    "its queue no longer admits it where it runs ({e}); stopping it to requeue"
                ),
            )
            .await
        }
    }
}

/// Persists `Preempted` with `message`, then stops the ranks gracefully (SIGTERM, the
/// job's grace period to checkpoint, SIGKILL); `sync` requeues it once they have exited.
async fn stop_to_requeue(
    plane: &ControlPlane,
    job: &JobRecord,
    message: &str,
) -> Result<(), ApiError> {
    let res = plane
        .store()
        .transition(
            &job.uid,
            job.phase,
            JobPhase::Preempted,
            "Preempted",
            message,
            StatusPatch::default(),
        )
        .await;
    ignore_conflict(res)?;
    crate::reconcile::stop(plane, &job.uid, crate::reconcile::grace_of(job));
    Ok(())
}

/// Stops a job the scheduler chose to preempt, saying why and for whom.
async fn preempt(
    plane: &ControlPlane,
    job: &JobRecord,
    reason: &PreemptReason,
    names: &HashMap<&str, &JobRecord>,
) -> Result<(), ApiError> {
    let name_of = |uid: &str| {
        names
            .get(uid)
            .map_or_else(|| uid.to_owned(), |j| format!("{}/{}", j.namespace, j.name))
    };
    let queue_of_uid = |uid: &str| names.get(uid).map_or("", |j| queue_of(&j.job));
    let why = match reason {
        PreemptReason::Priority { preemptor } => {
            let p = names.get(preemptor.as_str());
            format!(
                "preempted for {} (priority {} over {})",
                name_of(preemptor),
                p.and_then(|p| p.job.spec.priority.as_deref())
                    .unwrap_or("normal"),
                job.job.spec.priority.as_deref().unwrap_or("normal")
            )
        }
        PreemptReason::Reclaim { preemptor } => format!(
            "preempted for {}: queue {} reclaims GPUs that queue {} borrowed beyond its quota",
            name_of(preemptor),
            queue_of_uid(preemptor),
            queue_of(&job.job)
        ),
        PreemptReason::LoanEnded { preemptor } => format!(
            "preempted for {}: it ran on GPUs held for that gang, whose turn has come",
            name_of(preemptor)
        ),
        PreemptReason::QueueStopped { queue } => format!(
            "preempted: queue {queue} was stopped (spec.stopPolicy: HoldAndDrain); it waits \
             there and resumes from its checkpoint once the queue is released"
        ),
    };
    let message = format!(
        "{why}; SIGTERM, then up to {:.0}s to checkpoint before it is requeued",
        crate::reconcile::grace_of(job).as_secs_f64()
    );
    stop_to_requeue(plane, job, &message).await
}

/// A preempted job whose ranks have all exited goes back to its queue.
async fn requeue(plane: &ControlPlane, job: &JobRecord) -> Result<(), ApiError> {
    let message = match latest_checkpoint(&plane.checkpoint_dir(job), Layout::of(&job.job)) {
        Some(c) => format!(
            "stopped after preemption; back in the queue, will resume from {}",
            c.display()
        ),
        None => "stopped after preemption; back in the queue (no checkpoint: it will start over)"
            .to_owned(),
    };
    let res = plane
        .store()
        .transition(
            &job.uid,
            JobPhase::Preempted,
            JobPhase::Queued,
            "Requeued",
            &message,
            StatusPatch::default(),
        )
        .await;
    ignore_conflict(res)
}

/// Why each job still pending waits (`Scheduler::waiting`), and when it is expected to start:
/// the job first in line by its reservation, every other by one forecast of the queue per pass
/// (`Scheduler::forecast`), which also says whom it is expected to start after. One `Waiting`
/// event per change of reason.
async fn note_waiting(
    plane: &ControlPlane,
    adm: &Admission,
    active: &[JobRecord],
    names: &HashMap<&str, &JobRecord>,
    now: Time,
) -> Result<(), ApiError> {
    let forecast = adm.sched.forecast(now, FORECAST_CYCLES);
    let name_of = |uid: &str| {
        names
            .get(uid)
            .map_or_else(|| uid.to_owned(), |j| format!("{}/{}", j.namespace, j.name))
    };
    for job in active {
        if adm.tracked.get(&job.uid) != Some(&Tracked::Pending) || job.phase != JobPhase::Queued {
            continue;
        }
        let Some(waiting) = adm.sched.waiting(&job.uid) else {
            continue;
        };
        let waiting = waiting.with_forecast(&job.uid, &forecast).named(name_of);
        let (reason, expected_start) = (waiting.to_string(), waiting.expected_start());
        if plane.set_waiting(&job.uid, &reason, expected_start) {
            plane.store().note(&job.uid, "Waiting", &reason).await?;
        }
    }
    Ok(())
}

fn ignore_conflict<T>(res: Result<T, StoreError>) -> Result<(), ApiError> {
    match res {
        Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::{
        PreemptionPolicy, PriorityClass, ReclaimWithinCohort, StopPolicy, WithinQueue,
    };

    fn queue(yaml: &str) -> Queue {
        match ferry_spec::parse_documents(yaml, "q.yaml")
            .unwrap()
            .remove(0)
        {
            Resource::Queue(q) => q,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_queues_default_gets_every_gpu() {
        let (specs, _) = queue_specs(&[], &Inventory::virtual_slots(4));
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name, DEFAULT_QUEUE);
        assert_eq!(specs[0].quotas[0].nominal, 4);
    }

    /// A queue's `spec.stopPolicy` reaches the scheduler, so applying a changed one changes
    /// the queue set `schedule` compares, which rebuilds the scheduler.
    #[test]
    fn a_changed_stop_policy_changes_the_queue_set() {
        let q = |policy: &str| {
            queue(&format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: a}}\nspec: {{quotas: [{{flavor: any, nominal: 2}}], stopPolicy: {policy}}}\n"
            ))
        };
        let inv = Inventory::virtual_slots(4);
        let (none, _) = queue_specs(&[q("None")], &inv);
        let (held, _) = queue_specs(&[q("HoldAndDrain")], &inv);
        assert_eq!(
            (none[0].stop_policy, held[0].stop_policy),
            (StopPolicy::None, StopPolicy::HoldAndDrain)
        );
        assert_ne!(none, held);
    }

    /// So does its `spec.preemption`, value for value.
    #[test]
    fn a_changed_preemption_policy_changes_the_queue_set() {
        let q = |policy: &str| {
            queue(&format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: a}}\nspec: {{quotas: [{{flavor: any, nominal: 2}}], preemption: {policy}}}\n"
            ))
        };
        let inv = Inventory::virtual_slots(4);
        let (default, _) = queue_specs(&[q("{}")], &inv);
        let (strict, _) = queue_specs(
            &[q(
                "{withinQueue: LowerOrNewerEqualPriority, reclaimWithinCohort: LowerPriority, \
                 borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 5}}",
            )],
            &inv,
        );
        let (never, _) = queue_specs(
            &[q("{withinQueue: Never, reclaimWithinCohort: Never}")],
            &inv,
        );
        assert_eq!(default[0].preemption, PreemptionPolicy::default());
        assert_eq!(
            strict[0].preemption,
            PreemptionPolicy {
                within_queue: WithinQueue::LowerOrNewerEqualPriority,
                reclaim_within_cohort: ReclaimWithinCohort::LowerPriority,
                borrow_within_cohort: Some(ferry_sched::BorrowWithinCohort {
                    max_priority_threshold: Some(5),
                }),
            }
        );
        assert_eq!(
            never[0].preemption,
            PreemptionPolicy {
                within_queue: WithinQueue::Never,
                reclaim_within_cohort: ReclaimWithinCohort::Never,
                borrow_within_cohort: None,
            }
        );
        assert_ne!(default, strict);
    }

    #[test]
    fn a_bad_borrowing_limit_names_the_queue_and_its_field() {
        let a = queue(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec: {cohort: c, quotas: [{flavor: any, nominal: 2, borrowingLimit: 9}]}\n",
        );
        let b = queue(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: b}\nspec: {cohort: c, quotas: [{flavor: H100-80GB, nominal: 0}, {flavor: any, nominal: 2}]}\n",
        );
        let inv = Inventory::virtual_slots(4);
        let config = Config::of(&[a, b], &[], &inv);
        let e = config
            .scheduler(
                cluster(&inv).unwrap(),
                PriorityClass::standard(),
                Default::default(),
            )
            .unwrap_err();
        let (name, fe) = config.error(&e);
        assert_eq!(name, Some((ResourceKind::Queue, "a")));
        assert_eq!(fe.path, "spec.quotas[0].borrowingLimit");
        // Named once: the scheduler's problem already says which queue.
        assert!(
            fe.message.starts_with("queue `a` may borrow 9 "),
            "{}",
            fe.message
        );
    }

    fn cohort(yaml: &str) -> Cohort {
        let text = format!("apiVersion: ferry.dev/v1alpha1\nkind: Cohort\n{yaml}");
        match ferry_spec::parse_documents(&text, "c.yaml")
            .unwrap()
            .remove(0)
        {
            Resource::Cohort(c) => c,
            other => panic!("{other:?}"),
        }
    }

    /// A cohort's quotas that apply to this machine are one `any` quota, as a queue's are; a
    /// quota of another machine's GPUs is left out (virtual slots take every flavor). Its
    /// weight is the scheduler's.
    #[test]
    fn a_cohorts_quotas_that_apply_here_are_summed() {
        let c = cohort(
            "metadata: {name: research}\nspec: {parent: org, weight: 3, quotas: [{flavor: any, \
             nominal: 2, borrowingLimit: 1}, {flavor: H100-80GB, nominal: 3, borrowingLimit: 2, \
             lendingLimit: 4}]}\n",
        );
        let (specs, origins) = cohort_specs(&[c], &Inventory::virtual_slots(8));
        assert_eq!(
            specs,
            [ferry_sched::CohortSpec {
                name: "research".into(),
                parent: Some("org".into()),
                quotas: vec![FlavorQuota {
                    flavor: ANY_FLAVOR.into(),
                    nominal: 5,
                    borrowing_limit: Some(3),
                    // One quota lends all it has: so does the sum.
                    lending_limit: None,
                }],
                fair_share_weight: 3.0,
            }]
        );
        assert_eq!(origins, [vec![0, 1]]);
    }

    /// A bad tree's error names the Cohort document and its own field path.
    #[test]
    fn a_bad_cohort_tree_names_the_cohort_and_its_field() {
        let inv = Inventory::virtual_slots(4);
        let a = queue(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec: {cohort: research, quotas: [{flavor: any, nominal: 2}]}\n",
        );
        let research = cohort(
            "metadata: {name: research}\nspec: {parent: org, quotas: [{flavor: any, nominal: 1, borrowingLimit: 9}]}\n",
        );
        let org = cohort("metadata: {name: org}\nspec: {quotas: [{flavor: any, nominal: 1}]}\n");
        let config = Config::of(&[a], &[org, research], &inv);
        let e = config
            .scheduler(
                cluster(&inv).unwrap(),
                PriorityClass::standard(),
                Default::default(),
            )
            .unwrap_err();
        let (culprit, fe) = config.error(&e);
        assert_eq!(culprit, Some((ResourceKind::Cohort, "research")));
        assert_eq!(fe.path, "spec.quotas[0].borrowingLimit");
        // Research's 1 and queue a's 2 GPUs are lent to org, which has 1 of its own: 1 left.
        assert!(
            fe.message.starts_with("cohort `research` may borrow 9 `")
                && fe.message.contains("lends only 1"),
            "{}",
            fe.message
        );
    }

    #[test]
    fn a_launcher_job_without_a_limit_is_expected_to_take_twice_the_planners_prediction() {
        let spec = |steps: u32, limit: &str| {
            let text = format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\nspec:\n  \
                 engine: torchrun\n  method: lora\n  model: {{source: hf, id: Qwen/Qwen2.5-7B}}\n  \
                 data: {{path: chat.jsonl, format: chat}}\n  \
                 resources: {{nodes: 1, gpusPerNode: 2, gpu: H100-80GB}}\n  \
                 train: {{seqLen: 1024, steps: {steps}}}\n{limit}"
            );
            let Resource::TrainJob(job) = ferry_spec::parse_documents(&text, "j.yaml")
                .unwrap()
                .remove(0)
            else {
                panic!("not a TrainJob");
            };
            planned_workload_of("j", &job, 0, 0).expected_duration_s
        };
        let short = spec(200, "").expect("the planner predicts a step time");
        let long = spec(400, "").expect("the planner predicts a step time");
        assert!(short > 0 && long.abs_diff(2 * short) <= 1, "{short} {long}");
        // A limit below the estimate wins; above it, the estimate does.
        assert_eq!(spec(200, "  maxRuntimeSeconds: 1\n"), Some(1));
        let far = format!("  maxRuntimeSeconds: {}\n", 10 * short);
        assert_eq!(spec(200, &far), Some(short));
    }

    #[test]
    fn a_time_limit_is_the_schedulers_expected_duration() {
        let spec = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\nspec:\n  engine: command\n  command: [sh]\n  resources: {gpusPerNode: 2}\n  maxRuntimeSeconds: 900\n";
        let Resource::TrainJob(mut job) = ferry_spec::parse_documents(spec, "j.yaml")
            .unwrap()
            .remove(0)
        else {
            panic!("not a TrainJob");
        };
        assert_eq!(workload_of("j", &job, 0, 0).expected_duration_s, Some(900));
        // The budget of all runs bounds a run too: the tighter limit counts.
        job.spec.max_total_runtime_seconds = Some(600);
        assert_eq!(workload_of("j", &job, 0, 0).expected_duration_s, Some(600));
        job.spec.max_runtime_seconds = None;
        assert_eq!(workload_of("j", &job, 0, 0).expected_duration_s, Some(600));
        // A job back in its queue is expected to run at most what its earlier runs left of
        // the budget (never 0: a run with nothing left fails at once, it does not take 0 s).
        assert_eq!(
            workload_of("j", &job, 0, 450).expected_duration_s,
            Some(150)
        );
        assert_eq!(workload_of("j", &job, 0, 600).expected_duration_s, Some(1));
        job.spec.max_runtime_seconds = Some(100);
        assert_eq!(
            workload_of("j", &job, 0, 450).expected_duration_s,
            Some(100)
        );
        job.spec.max_runtime_seconds = None;
        job.spec.max_total_runtime_seconds = None;
        assert_eq!(workload_of("j", &job, 0, 0).expected_duration_s, None);
        // A user's command gives no prediction.
        assert_eq!(
            planned_workload_of("j", &job, 0, 0).expected_duration_s,
            None
        );
    }

    #[test]
    fn placements_round_trip_through_stored_gpu_ids() {
        let ids: Vec<String> = ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
            .map(String::from)
            .to_vec();
        let spec = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\nspec:\n  engine: command\n  command: [sh]\n  resources: {nodes: 2, gpusPerNode: 2, procsPerNode: 2}\n";
        let Resource::TrainJob(job) = ferry_spec::parse_documents(spec, "j.yaml")
            .unwrap()
            .remove(0)
        else {
            panic!()
        };
        let placement = vec![
            PodPlacement {
                node: LOCAL_NODE.into(),
                gpus: vec![3, 1],
            },
            PodPlacement {
                node: LOCAL_NODE.into(),
                gpus: vec![0, 2],
            },
        ];
        let per_rank = gpus_per_rank(&job, &placement, &ids);
        assert_eq!(per_rank, [["GPU-d"], ["GPU-b"], ["GPU-a"], ["GPU-c"]]);
        let now = chrono::Utc::now();
        let record = JobRecord {
            uid: "u".into(),
            namespace: "default".into(),
            name: "j".into(),
            job,
            phase: JobPhase::Running,
            attempt: 1,
            restarts: 0,
            message: None,
            gpus: per_rank,
            resumed_from: None,
            created_at: now,
            updated_at: now,
            started_at: None,
            finished_at: None,
        };
        assert_eq!(placement_of(&record, &ids), Some(placement));
    }
}

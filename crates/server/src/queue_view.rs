//! What a team sees of its queue (`ferry get queues`, `ferry describe queue`): GPUs held
//! against its nominal quota and what it borrows, and its waiting jobs in the order the
//! scheduler tries them, each with its expected start, and whether it admits work
//! (`spec.stopPolicy`) — Kueue's ClusterQueue status and pending-workloads view in one place.
//! A cohort's status (`ferry get cohorts`, `ferry describe cohort`) is built by the same
//! helpers: its subtree's GPUs against its nominal ones and its weighted share.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use ferry_sched::{CohortUsage, QueueUsage, Scheduler, StopPolicy};
use ferry_spec::{JobPhase, ResourceKind};
use ferry_store::{JobRecord, ObjectRecord};
use serde_json::{Value, json};

use crate::admission::{DEFAULT_QUEUE, queue_of};
use crate::state::{ControlPlane, Waiting};

/// At most this many of a queue's waiting jobs are listed in its status (the count is always
/// whole): enough to find one's own job, few enough to read.
pub(crate) const LISTED_PENDING: usize = 50;

/// The scheduler's queues and cohorts as the last scheduling cycle left them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Views {
    /// Every queue the scheduler knows.
    pub(crate) queues: Vec<QueueView>,
    /// Every cohort the scheduler knows (`Scheduler::cohort_usage`).
    pub(crate) cohorts: Vec<CohortUsage>,
}

/// Every queue and cohort of `sched` after a cycle (see [`queue_views`]).
pub(crate) fn views(sched: &Scheduler, jobs: &HashMap<&str, &JobRecord>) -> Views {
    Views {
        queues: queue_views(sched, jobs),
        cohorts: sched.cohort_usage(),
    }
}

/// A queue as the last scheduling cycle left it.
#[derive(Debug, Clone)]
pub(crate) struct QueueView {
    usage: QueueUsage,
    /// Per flavor of `usage.usage`: nominal quota and the most it may hold with borrowing.
    limits: Vec<Option<(u64, u64)>>,
    /// Its first waiting jobs, in the order they are tried.
    pending: Vec<PendingJob>,
    /// Its jobs told to stop whose ranks have not all exited yet.
    stopping: usize,
}

/// One waiting job as its queue lists it.
#[derive(Debug, Clone)]
struct PendingJob {
    uid: String,
    /// `namespace/name`.
    job: String,
    priority: String,
    gpus: u64,
    created_at: DateTime<Utc>,
}

/// Every queue of `sched` after a cycle, its waiting jobs named from `jobs` (by uid).
pub(crate) fn queue_views(sched: &Scheduler, jobs: &HashMap<&str, &JobRecord>) -> Vec<QueueView> {
    let mut stopping: HashMap<&str, usize> = HashMap::new();
    for j in jobs.values().filter(|j| j.phase == JobPhase::Preempted) {
        *stopping.entry(queue_of(&j.job)).or_default() += 1;
    }
    sched
        .queue_usage()
        .into_iter()
        .map(|usage| {
            let limits = usage
                .usage
                .iter()
                .map(|(flavor, _)| sched.quota_limits(&usage.name, flavor))
                .collect();
            let pending = sched
                .pending_order(&usage.name)
                .into_iter()
                .flatten()
                .filter_map(|uid| jobs.get(uid))
                .take(LISTED_PENDING)
                .map(|j| PendingJob {
                    uid: j.uid.clone(),
                    job: format!("{}/{}", j.namespace, j.name),
                    priority: j
                        .job
                        .spec
                        .priority
                        .clone()
                        .unwrap_or_else(|| ferry_sched::DEFAULT_PRIORITY.to_owned()),
                    gpus: u64::from(j.job.spec.resources.total_gpus()),
                    created_at: j.created_at,
                })
                .collect();
            QueueView {
                stopping: stopping.get(usage.name.as_str()).copied().unwrap_or(0),
                usage,
                limits,
                pending,
            }
        })
        .collect()
}

/// A stored queue or cohort with what it holds now under `status`, as of the last scheduling
/// cycle. A queue: GPUs used and borrowed (in all and per flavor, against its quota), its
/// weighted share, jobs running and waiting, and the first [`LISTED_PENDING`] waiting jobs in
/// order with their expected starts. A cohort: its subtree's GPUs used and borrowed against
/// its nominal ones (in all and per flavor) and its weighted share.
pub(crate) fn with_status(plane: &ControlPlane, mut record: ObjectRecord) -> ObjectRecord {
    let status = match record.kind.as_str() {
        "Queue" => queue_status(plane, &record),
        "Cohort" => {
            let views = plane.views();
            match views.cohorts.iter().find(|c| c.name == record.name) {
                Some(c) => cohort_status(c),
                // Not scheduled here (no GPUs): nothing used.
                None => usage_status(Vec::new(), 0.0),
            }
        }
        _ => return record,
    };
    let built_in = record.doc["status"]["builtIn"].as_bool() == Some(true);
    record.doc["status"] = status;
    if built_in {
        record.doc["status"]["builtIn"] = Value::Bool(true);
    }
    record
}

/// `status` of a stored queue: from its view, or what it was applied with when the scheduler
/// does not have it.
fn queue_status(plane: &ControlPlane, record: &ObjectRecord) -> Value {
    let views = plane.views();
    match views.queues.iter().find(|v| v.usage.name == record.name) {
        Some(view) => status(view, |uid| plane.waiting(uid)),
        None => {
            // Not scheduled here (no GPUs): what it was applied with.
            let applied: ferry_spec::StopPolicy =
                serde_json::from_value(record.doc["spec"]["stopPolicy"].clone())
                    .unwrap_or_default();
            let policy = StopPolicy::from(applied);
            let mut status = usage_status(Vec::new(), 0.0);
            status["state"] = json!(state(policy, false));
            status["running"] = json!(0);
            status["pending"] = json!(0);
            status
        }
    }
}

/// `status` of a cohort: its subtree's GPUs per flavor against its nominal ones.
fn cohort_status(c: &CohortUsage) -> Value {
    let flavors = c
        .usage
        .iter()
        .zip(&c.nominal)
        .map(|((flavor, used), (_, nominal))| flavor_entry(flavor, *used, *nominal))
        .collect();
    usage_status(flavors, c.weighted_share)
}

/// One flavor's entry of a queue's or cohort's `status.flavors`: GPUs used against the
/// nominal ones, and those used beyond them (borrowed).
fn flavor_entry(flavor: &str, used: u64, nominal: u64) -> Value {
    json!({
        "flavor": flavor,
        "nominal": nominal,
        "usedGpus": used,
        "borrowedGpus": used.saturating_sub(nominal),
    })
}

/// What a queue's and a cohort's `status` share: GPUs used, nominal and borrowed over all
/// `flavors` (entries of [`flavor_entry`]), its weighted share, and the flavors themselves.
fn usage_status(flavors: Vec<Value>, weighted_share: f64) -> Value {
    let sum = |key: &str| flavors.iter().filter_map(|f| f[key].as_u64()).sum::<u64>();
    json!({
        "usedGpus": sum("usedGpus"),
        "nominalGpus": sum("nominal"),
        "borrowedGpus": sum("borrowedGpus"),
        "weightedShare": weighted_share,
        "flavors": flavors,
    })
}

/// Whether a queue under `policy` admits work: `Active`, `Held` (its waiting jobs do not
/// start), or `Draining` (held, and its running jobs are being stopped: `holding`, some of
/// them still hold GPUs).
fn state(policy: StopPolicy, holding: bool) -> &'static str {
    match policy {
        StopPolicy::None => "Active",
        StopPolicy::HoldAndDrain if holding => "Draining",
        StopPolicy::Hold | StopPolicy::HoldAndDrain => "Held",
    }
}

/// `status` of a queue from its view; `waiting` tells a waiting job's reason and start.
fn status(view: &QueueView, waiting: impl Fn(&str) -> Option<Waiting>) -> Value {
    let flavors = view
        .usage
        .usage
        .iter()
        .zip(&view.limits)
        .map(|((flavor, used), limits)| {
            let (nominal, max) = limits.unwrap_or((0, 0));
            let mut entry = flavor_entry(flavor, *used, nominal);
            entry["maxGpus"] = json!(max);
            entry
        })
        .collect();
    let pending: Vec<Value> = view
        .pending
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let waiting = waiting(&p.uid);
            let start = waiting
                .as_ref()
                .and_then(|w| w.expected_start)
                .and_then(|s| DateTime::<Utc>::from_timestamp(i64::try_from(s).ok()?, 0));
            let mut entry = json!({
                "position": i + 1,
                "job": p.job,
                "priority": p.priority,
                "gpus": p.gpus,
                "createdAt": p.created_at.to_rfc3339(),
            });
            if let Some(at) = start {
                entry["estimatedStartTime"] = json!(at.to_rfc3339());
            }
            if let Some(w) = waiting {
                entry["message"] = json!(w.reason);
            }
            entry
        })
        .collect();
    let holding = view.usage.running + view.stopping > 0;
    let mut status = usage_status(flavors, view.usage.weighted_share);
    status["state"] = json!(state(view.usage.stop_policy, holding));
    status["running"] = json!(view.usage.running);
    status["pending"] = json!(view.usage.pending);
    status["pendingWorkloads"] = json!(pending);
    status
}

/// The `default` queue jobs without `spec.queue` use, when no stored `Queue` defines it: a
/// record marked `status.builtIn`, so `ferry get queues` shows where those jobs wait.
pub(crate) fn built_in_queue(
    plane: &ControlPlane,
    stored: &[ObjectRecord],
) -> Option<ObjectRecord> {
    if stored.iter().any(|r| r.name == DEFAULT_QUEUE) {
        return None;
    }
    let gpus = plane.inventory().len();
    if gpus == 0 {
        return None;
    }
    let spec = json!({"quotas": [{"flavor": ferry_sched::ANY_FLAVOR, "nominal": gpus}]});
    Some(crate::scope::built_in(
        ResourceKind::Queue,
        DEFAULT_QUEUE,
        spec,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::{Cluster, PriorityClass, QueueSpec, Workload};

    fn record(uid: &str, name: &str, queue: &str, gpus: u32) -> JobRecord {
        let yaml = format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\n\
             spec: {{engine: command, command: [sleep, '1'], queue: {queue}, \
             resources: {{gpusPerNode: {gpus}}}}}\n"
        );
        let ferry_spec::Resource::TrainJob(job) = ferry_spec::parse_documents(&yaml, "job.yaml")
            .unwrap()
            .remove(0)
        else {
            panic!("not a job")
        };
        let t = DateTime::UNIX_EPOCH;
        JobRecord {
            uid: uid.into(),
            namespace: "team".into(),
            name: name.into(),
            job,
            phase: ferry_spec::JobPhase::Queued,
            attempt: 0,
            restarts: 0,
            message: None,
            gpus: Vec::new(),
            resumed_from: None,
            created_at: t,
            updated_at: t,
            started_at: None,
            finished_at: None,
        }
    }

    /// Queue `a` (nominal 2) borrows a GPU of `b`'s; `b`'s waiting jobs are listed in the
    /// order they are tried, each with what the last pass told it.
    #[test]
    fn a_queue_shows_what_it_borrows_and_its_waiting_jobs_in_order() {
        let mut sched = Scheduler::new(
            Cluster::local(4, "virtual"),
            vec![
                QueueSpec::any_flavor("a", Some("c"), 2),
                QueueSpec::any_flavor("b", Some("c"), 2),
            ],
            PriorityClass::standard(),
        )
        .unwrap();
        let w = |id: &str, q: &str, gpus: u32, t: u64, dur: u64| Workload {
            expected_duration_s: Some(dur),
            created_at: t,
            ..Workload::single(id, q, None, gpus, t)
        };
        sched.submit(w("a1", "a", 3, 0, 1_000)).unwrap();
        assert_eq!(sched.cycle(0).len(), 1);
        sched.submit(w("b-long", "b", 2, 1, 50_000)).unwrap();
        sched.submit(w("b-short", "b", 2, 2, 60)).unwrap();
        sched.cycle(3);
        let jobs = [
            record("a1", "a-one", "a", 3),
            record("b-long", "long", "b", 2),
            record("b-short", "short", "b", 2),
        ];
        let by_uid: HashMap<&str, &JobRecord> = jobs.iter().map(|j| (j.uid.as_str(), j)).collect();
        let views = queue_views(&sched, &by_uid);
        let told = |uid: &str| {
            (uid == "b-short").then(|| Waiting {
                reason: "first in line".into(),
                expected_start: Some(1_000),
            })
        };
        let a = status(&views[0], told);
        assert_eq!(
            (
                &a["usedGpus"],
                &a["borrowedGpus"],
                &a["running"],
                &a["pending"]
            ),
            (&json!(3), &json!(1), &json!(1), &json!(0)),
            "{a:#}"
        );
        assert_eq!(a["flavors"][0]["nominal"], 2, "{a:#}");
        // 1 GPU borrowed over weight 1.
        assert_eq!(a["weightedShare"], 1.0, "{a:#}");
        assert_eq!(a["flavors"][0]["maxGpus"], 4, "{a:#}");
        let b = status(&views[1], told);
        let listed = b["pendingWorkloads"].as_array().unwrap();
        let order: Vec<(&Value, &Value)> =
            listed.iter().map(|p| (&p["position"], &p["job"])).collect();
        assert_eq!(
            order,
            [
                (&json!(1), &json!("team/short")),
                (&json!(2), &json!("team/long"))
            ],
            "{b:#}"
        );
        assert_eq!(listed[0]["estimatedStartTime"], "1970-01-01T00:16:40+00:00");
        assert_eq!(
            (&a["state"], &b["state"]),
            (&json!("Active"), &json!("Active"))
        );
        assert_eq!(listed[0]["message"], "first in line");
        assert!(listed[1].get("estimatedStartTime").is_none(), "{b:#}");
    }

    /// A stopped queue says so: `Draining` while a job of it still runs or is stopping, then
    /// `Held`; a queue that admits work is `Active`.
    #[test]
    fn a_stopped_queue_says_whether_its_jobs_are_still_stopping() {
        let sched = |policy: StopPolicy| {
            Scheduler::new(
                Cluster::local(4, "virtual"),
                vec![QueueSpec {
                    stop_policy: policy,
                    ..QueueSpec::any_flavor("a", None, 4)
                }],
                PriorityClass::standard(),
            )
            .unwrap()
        };
        let mut job = record("a1", "one", "a", 2);
        let state_of = |s: &Scheduler, job: &JobRecord| {
            let by_uid: HashMap<&str, &JobRecord> = [(job.uid.as_str(), job)].into();
            status(&queue_views(s, &by_uid)[0], |_| None)["state"].clone()
        };
        let mut s = sched(StopPolicy::HoldAndDrain);
        let placement = [ferry_sched::PodPlacement {
            node: "local".into(),
            gpus: vec![0, 1],
        }];
        s.restore(Workload::single("a1", "a", None, 2, 0), &placement, 0)
            .unwrap();
        job.phase = ferry_spec::JobPhase::Running;
        assert_eq!(state_of(&s, &job), "Draining");
        assert_eq!(s.cycle(1).len(), 1, "told to stop");
        job.phase = ferry_spec::JobPhase::Preempted;
        assert_eq!(state_of(&s, &job), "Draining");
        s.evicted("a1").unwrap();
        job.phase = ferry_spec::JobPhase::Queued;
        assert_eq!(state_of(&s, &job), "Held");
        assert_eq!(state_of(&sched(StopPolicy::Hold), &job), "Held");
        assert_eq!(state_of(&sched(StopPolicy::None), &job), "Active");
    }
}

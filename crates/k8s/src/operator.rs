//! The `TrainJob` reconcile loop: render → server-side apply (field manager `ferry`) →
//! observe the gang → admit, preempt, suspend at the user's request (`spec.suspend`), restart
//! from the latest checkpoint, or finish — with
//! a finalizer for cleanup, the status subresource as the record, and an event for every
//! transition.
//!
//! Idempotence: the gang object of attempt `a` is named `<job>-<a>`, and a restart writes
//! the new restart count and attempt to the status *before* deleting the failed gang, so an
//! operator that dies between the two steps neither loses nor double-counts a restart.
//!
//! Pace: each running attempt's steps over time (rank 0's metrics lines, read every
//! reconcile) are kept in memory — an operator restart simply re-learns them — and give
//! `status.estimatedCompletionTime` and the scheduler's expected end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use ferry_sched::pace::Pace;
use ferry_spec::JobPhase;

use crate::admission::{Admission, Admit, AdmitAll, Gang, wall_clock};
use crate::crd::{Condition, ModelDeploymentResource, TrainJobClusterStatus, TrainJobResource};
use crate::error::{K8sError, Result};
use crate::options::{Attempt, LABEL_ATTEMPT, LABEL_TRAIN_JOB, RenderOptions};
use crate::train;

/// Finalizer Ferry puts on every `TrainJob` it manages.
pub const FINALIZER: &str = "ferry.dev/cleanup";
/// Field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "ferry";
/// Name the operator reports events under.
pub const CONTROLLER_NAME: &str = "ferry-operator";

/// Shared state of the reconcile loop.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Rendering options, with `cluster` filled by discovery.
    pub opts: RenderOptions,
    /// The admission seam.
    pub admission: Arc<dyn Admission>,
    /// Event publisher.
    pub recorder: Recorder,
    /// Each running job's attempt and that attempt's pace, by (namespace, name).
    paces: Mutex<HashMap<(String, String), (u32, Pace)>>,
    /// Milliseconds since the Unix epoch: when a metrics line was read.
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// Milliseconds since the Unix epoch (the pace's clock on a cluster).
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Context {
    /// A context with the `ferry-operator` event reporter.
    pub fn new(client: Client, opts: RenderOptions, admission: Arc<dyn Admission>) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            opts,
            admission,
            paces: Mutex::new(HashMap::new()),
            clock: Box::new(wall_clock_ms),
        }
    }

    /// Replaces the clock that times metrics lines, in Unix milliseconds (tests drive time by
    /// hand).
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// Feeds rank 0's metrics `line` of `attempt`, read at `now_ms`, to the job's pace (a new
    /// attempt starts a new one); returns the seconds left to `target_steps` (else the
    /// engine's `max_steps`) once the pace is known.
    fn pace(
        &self,
        key: (String, String),
        attempt: u32,
        line: &Value,
        target_steps: Option<i64>,
        now_ms: u64,
    ) -> Option<u64> {
        let mut paces = self.paces.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = paces.entry(key).or_default();
        if entry.0 != attempt {
            *entry = (attempt, Pace::default());
        }
        let pace = &mut entry.1;
        if let Some(step) = line["step"].as_i64() {
            pace.observe(step, now_ms);
        }
        if let Some(total) = line["max_steps"].as_i64() {
            pace.observe_total(total);
        }
        pace.time_left(target_steps, now_ms)
    }

    /// Drops the job's pace (a suspended or restarted gang's old pace would be wrong).
    fn forget_pace(&self, ns: &str, name: &str) {
        self.paces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(ns.to_owned(), name.to_owned()));
    }

    /// The job does not run (any more, or not yet in this attempt): its pace and its
    /// estimated completion go.
    fn not_running(&self, ns: &str, name: &str, status: &mut TrainJobClusterStatus) {
        self.forget_pace(ns, name);
        status.estimated_completion_time = None;
    }

    /// Keeps `status.runSeconds` and `status.runningSince` in step with the phase: a run opens
    /// when the job turns `Running` and closes (its seconds added) when it stops, whatever
    /// stopped it (success, failure, preemption, a budget); `ended_ms` is when the gang itself
    /// ended, if it did (an operator that was down does not count its downtime as running).
    fn account_run(&self, status: &mut TrainJobClusterStatus, ended_ms: Option<u64>) {
        let running = status.phase == Some(JobPhase::Running);
        match (&status.running_since, running) {
            (None, true) => status.running_since = Some(timestamp((self.clock)())),
            (Some(_), false) => {
                status.run_seconds += self.current_run_s(status, ended_ms);
                status.running_since = None;
            }
            _ => {}
        }
    }

    /// Whole seconds the current run (`status.runningSince`) has run: until its gang ended
    /// (`ended_ms`) if it has, else until now; 0 while none runs.
    fn current_run_s(&self, status: &TrainJobClusterStatus, ended_ms: Option<u64>) -> u64 {
        let now_ms = (self.clock)();
        let until = ended_ms.map_or(now_ms, |e| e.min(now_ms));
        status
            .running_since
            .as_deref()
            .map_or(0, |since| run_seconds(since, until))
    }

    /// Where the job stands against `spec.maxTotalRuntimeSeconds` (its ended runs plus the
    /// current one, which ran until `ended_ms` if its gang ended); `None` without a budget.
    fn budget(
        &self,
        job: &TrainJobResource,
        status: &TrainJobClusterStatus,
        ended_ms: Option<u64>,
    ) -> Option<Budget> {
        let budget = job.spec.max_total_runtime_seconds?;
        let current = self.current_run_s(status, ended_ms);
        let used = status.run_seconds + current;
        Some(if used < budget {
            Budget::Left(budget - used)
        } else {
            Budget::Spent(format!(
                "attempt {} ran {current} s after {} s of earlier runs, reaching \
                 spec.maxTotalRuntimeSeconds ({budget} s); {}",
                status.attempt,
                status.run_seconds,
                ferry_spec::BUDGET_NO_RESTART
            ))
        })
    }

    fn gang_api(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            ns,
            &gang_resource(self.opts.cluster.jobset),
        )
    }
}

/// The API resource of the gang object (JobSet or Job).
pub fn gang_resource(jobset: bool) -> ApiResource {
    if jobset {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
            "jobsets",
        )
    } else {
        ApiResource::erase::<Job>(&())
    }
}

/// What the gang object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangState {
    /// `spec.suspend` is true.
    pub suspended: bool,
    /// A `Failed` condition is true.
    pub failed: bool,
    /// A `Complete` (Job) or `Completed` (JobSet) condition is true.
    pub succeeded: bool,
    /// When the true `Failed` or `Complete(d)` condition last changed (Unix milliseconds): when
    /// the gang ended, if it did.
    pub ended_ms: Option<u64>,
}

/// Reads a gang's state from its JSON (Job or JobSet).
pub fn gang_state(obj: &Value) -> GangState {
    let cond = |types: &[&str]| {
        obj["status"]["conditions"].as_array().and_then(|cs| {
            cs.iter().find(|c| {
                c["status"] == "True" && c["type"].as_str().is_some_and(|t| types.contains(&t))
            })
        })
    };
    let (failed, succeeded) = (cond(&["Failed"]), cond(&["Complete", "Completed"]));
    GangState {
        suspended: obj["spec"]["suspend"].as_bool().unwrap_or(false),
        failed: failed.is_some(),
        succeeded: succeeded.is_some(),
        ended_ms: failed.or(succeeded).and_then(|c| {
            let at: Timestamp = c["lastTransitionTime"].as_str()?.parse().ok()?;
            u64::try_from(at.as_millisecond()).ok()
        }),
    }
}

/// A job's standing against `spec.maxTotalRuntimeSeconds`.
enum Budget {
    /// Seconds of running left.
    Left(u64),
    /// All spent: why the job ends.
    Spent(String),
}

/// Unix milliseconds as an RFC 3339 time.
fn timestamp(ms: u64) -> String {
    Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Whole seconds from the RFC 3339 time `since` to `now_ms` (0 when unreadable or later).
fn run_seconds(since: &str, now_ms: u64) -> u64 {
    since
        .parse::<Timestamp>()
        .ok()
        .and_then(|t| u64::try_from(t.as_millisecond()).ok())
        .map_or(0, |t| now_ms.saturating_sub(t) / 1000)
}

fn now() -> String {
    Timestamp::now().to_string()
}

fn set_condition(
    status: &mut TrainJobClusterStatus,
    type_: &str,
    on: bool,
    reason: &str,
    message: &str,
) {
    let value = if on { "True" } else { "False" };
    if let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != value || c.reason != reason {
            c.last_transition_time = now();
        }
        c.status = value.into();
        c.reason = reason.into();
        c.message = message.into();
    } else {
        status.conditions.push(Condition {
            type_: type_.into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now(),
        });
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn publish(
    ctx: &Context,
    job: &TrainJobResource,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    // Events explain; failing to publish one must not stop the reconcile.
    if let Err(e) = ctx.recorder.publish(&ev, &job.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish event");
    }
}

fn owner_reference<K: Resource<DynamicType = ()>>(obj: &K) -> Value {
    json!([{
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "name": obj.meta().name.clone().unwrap_or_default(),
        "uid": obj.meta().uid.clone().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

/// The API of a rendered object, from its `apiVersion` and `kind` (plural: lowercase + `s`,
/// which holds for every kind Ferry renders).
fn api_of(client: &Client, ns: &str, obj: &Value) -> Api<DynamicObject> {
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().unwrap_or_default();
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Server-side applies `obj` (field manager `ferry`, forced) with `owner` as its controller.
async fn apply(client: &Client, ns: &str, mut obj: Value, owner: &Value) -> Result<()> {
    obj["metadata"]["ownerReferences"] = owner.clone();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api_of(client, ns, &obj)
        .patch(&name, &pp, &Patch::Apply(&obj))
        .await?;
    Ok(())
}

async fn set_suspend(ctx: &Context, ns: &str, gang: &str, suspend: bool) -> Result<()> {
    let patch = json!({"spec": {"suspend": suspend}});
    ctx.gang_api(ns)
        .patch(gang, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Deletes the current gang and the headless Service (owner references take the rest).
async fn cleanup(ctx: &Context, job: &TrainJobResource) -> Result<()> {
    let ns = job.namespace().unwrap_or_default();
    let attempt = job.status.as_ref().map_or(0, |s| s.attempt);
    let spec = job.to_spec();
    let gangs = ctx.gang_api(&ns);
    delete_ignoring_missing(&gangs, &train::child_name(&spec, attempt)).await?;
    if !ctx.opts.cluster.jobset {
        let svc = Api::<Service>::namespaced(ctx.client.clone(), &ns);
        delete_ignoring_missing(&svc, &job.name_any()).await?;
    }
    Ok(())
}

/// One reconcile of one `TrainJob`.
pub async fn reconcile(job: Arc<TrainJobResource>, ctx: Arc<Context>) -> Result<Action> {
    let ns = job.namespace().ok_or_else(|| {
        K8sError::invalid(
            "TrainJob/?",
            "metadata.namespace",
            "TrainJobs are namespaced; set it",
        )
    })?;
    let name = job.name_any();
    let jobs: Api<TrainJobResource> = Api::namespaced(ctx.client.clone(), &ns);
    let has_finalizer = job.finalizers().iter().any(|f| f == FINALIZER);

    if job.metadata.deletion_timestamp.is_some() {
        ctx.admission.finished(&job);
        ctx.forget_pace(&ns, &name);
        if has_finalizer {
            cleanup(&ctx, &job).await?;
            let rest: Vec<&String> = job
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .collect();
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": job.resource_version()}});
            jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            publish(
                &ctx,
                &job,
                EventType::Normal,
                "CleanedUp",
                "deleted the gang and its service".into(),
            )
            .await;
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut all: Vec<String> = job.finalizers().to_vec();
        all.push(FINALIZER.into());
        let patch =
            json!({"metadata": {"finalizers": all, "resourceVersion": job.resource_version()}});
        jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    let old = job.status.clone().unwrap_or_default();
    let mut status = old.clone();
    if status.phase.is_some_and(JobPhase::is_terminal) {
        return Ok(Action::await_change());
    }
    status.observed_generation = job.metadata.generation;
    let spec = job.to_spec();
    let kueue = ctx.opts.cluster.kueue;
    let gangs = ctx.gang_api(&ns);
    let gang_name = train::child_name(&spec, status.attempt);
    let mut action = Action::requeue(Duration::from_secs(60));
    // When the gang ended, if it has: the end of the current run.
    let mut ended_ms = None;

    let current = gangs.get_opt(&gang_name).await?;
    if let Some(action) =
        follow_suspend(&ctx, &job, &mut status, &gang_name, current.as_ref()).await?
    {
        // Suspended (or still stopping to be): no run, no completion or start to estimate.
        ctx.not_running(&ns, &name, &mut status);
        ctx.account_run(&mut status, None);
        status.estimated_start_time = None;
        if status != old {
            write_status(&jobs, &name, &status).await?;
        }
        return Ok(action);
    }

    match current {
        None => {
            // A new attempt starts: nothing of its pace is known.
            ctx.not_running(&ns, &name, &mut status);
            if status.attempt > 0 {
                // The failed attempt may survive an operator crash between the status
                // update and its deletion: delete it now (a no-op when already gone).
                delete_ignoring_missing(&gangs, &train::child_name(&spec, status.attempt - 1))
                    .await?;
            }
            let decision = if kueue {
                Admit::Wait("waiting for Kueue to admit the workload".into())
            } else {
                ctx.admission.decide(&job, &Gang::Absent)
            };
            if let Admit::Never(why) = &decision {
                status.phase = Some(JobPhase::Failed);
                status.message = Some(why.clone());
                status.completion_time = Some(now());
                set_condition(&mut status, "Failed", true, "Inadmissible", why);
                publish(&ctx, &job, EventType::Warning, "Inadmissible", why.clone()).await;
                write_status(&jobs, &name, &status).await?;
                return Ok(Action::await_change());
            }
            let run = matches!(decision, Admit::Run(_));
            let mut objs = train::render(
                &spec,
                Attempt {
                    number: status.attempt,
                    suspend: !run,
                },
                &ctx.opts,
            )?;
            if let Admit::Run(placement) = &decision {
                train::pin(&mut objs.gang, placement, wall_clock());
            }
            let owner = owner_reference(job.as_ref());
            for obj in objs.all() {
                apply(&ctx.client, &ns, obj, &owner).await?;
            }
            status.gang = Some(objs.child_name.clone());
            status.master_addr = Some(objs.master_addr.clone());
            status.start_time.get_or_insert_with(now);
            let resume = if status.attempt > 0 {
                " (resuming from the latest checkpoint)"
            } else {
                ""
            };
            if run {
                status.phase = Some(JobPhase::Running);
                status.message = Some(format!("attempt {} started{resume}", status.attempt));
                set_condition(
                    &mut status,
                    "Admitted",
                    true,
                    "Admitted",
                    "admitted by Ferry's scheduler",
                );
                publish(
                    &ctx,
                    &job,
                    EventType::Normal,
                    "Started",
                    format!("created {} {}{resume}", gang_kind(&ctx), objs.child_name),
                )
                .await;
            } else {
                let why = match decision {
                    Admit::Wait(w) | Admit::Preempt(w) | Admit::Never(w) => w,
                    Admit::Run(_) => String::new(),
                };
                status.phase = Some(JobPhase::Queued);
                status.message = Some(why.clone());
                set_condition(&mut status, "Admitted", false, "Queued", &why);
                publish(
                    &ctx,
                    &job,
                    EventType::Normal,
                    "Queued",
                    format!(
                        "created {} {} suspended: {why}",
                        gang_kind(&ctx),
                        objs.child_name
                    ),
                )
                .await;
            }
        }
        Some(obj) => {
            let value = gang_json(&ctx, &gang_name, &obj)?;
            let state = gang_state(&value);
            ended_ms = state.ended_ms;
            if state.succeeded {
                status.phase = Some(JobPhase::Succeeded);
                status.message = Some(format!("attempt {} finished", status.attempt));
                status.completion_time = Some(now());
                set_condition(
                    &mut status,
                    "Succeeded",
                    true,
                    "Completed",
                    "every rank exited 0",
                );
                publish(
                    &ctx,
                    &job,
                    EventType::Normal,
                    "Succeeded",
                    format!("{gang_name} completed"),
                )
                .await;
                ctx.admission.finished(&job);
                action = Action::await_change();
            } else if state.failed {
                let max = spec.spec.on_failure.max_restarts.max(0) as u32;
                if let Some(Budget::Spent(why)) = ctx.budget(&job, &status, ended_ms) {
                    // No restart the budget would stop at once.
                    let msg = format!("{gang_name} failed; {why}");
                    fail_for_good(&ctx, &job, &mut status, "BudgetExhausted", msg).await;
                    action = Action::await_change();
                } else if status.restarts < max {
                    status.restarts += 1;
                    status.attempt += 1;
                    status.phase = Some(JobPhase::Restarting);
                    let msg = format!(
                        "{gang_name} failed; restart {}/{max} from the latest checkpoint as attempt {}",
                        status.restarts, status.attempt
                    );
                    status.message = Some(msg.clone());
                    set_condition(&mut status, "Running", false, "Restarting", &msg);
                    ctx.not_running(&ns, &name, &mut status);
                    ctx.account_run(&mut status, ended_ms);
                    // Record first, then delete: see the module docs.
                    write_status(&jobs, &name, &status).await?;
                    publish(&ctx, &job, EventType::Warning, "Restarting", msg).await;
                    delete_ignoring_missing(&gangs, &gang_name).await?;
                    // The next attempt queues again (its pods are being deleted).
                    ctx.admission.finished(&job);
                    return Ok(Action::requeue(
                        spec.spec.on_failure.backoff(status.restarts),
                    ));
                } else {
                    let msg =
                        format!("{gang_name} failed and no restarts are left ({max} allowed)");
                    fail_for_good(&ctx, &job, &mut status, "RestartsExhausted", msg).await;
                    action = Action::await_change();
                }
            } else if kueue {
                if state.suspended {
                    status.phase = Some(JobPhase::Queued);
                } else {
                    status.phase = Some(JobPhase::Running);
                    observe_progress(&ctx, &job, &mut status).await;
                }
            } else {
                match (
                    state.suspended,
                    ctx.admission.decide(&job, &Gang::observe(&value)),
                ) {
                    (true, Admit::Run(placement)) => {
                        if placement.is_empty() {
                            set_suspend(&ctx, &ns, &gang_name, false).await?;
                        } else {
                            // Pin and unsuspend in one apply, as Kueue does.
                            let mut objs = train::render(
                                &spec,
                                Attempt {
                                    number: status.attempt,
                                    suspend: false,
                                },
                                &ctx.opts,
                            )?;
                            train::pin(&mut objs.gang, &placement, wall_clock());
                            apply(&ctx.client, &ns, objs.gang, &owner_reference(job.as_ref()))
                                .await?;
                        }
                        status.phase = Some(JobPhase::Running);
                        status.message = Some(format!("attempt {} admitted", status.attempt));
                        set_condition(
                            &mut status,
                            "Admitted",
                            true,
                            "Admitted",
                            "admitted by Ferry's scheduler",
                        );
                        publish(
                            &ctx,
                            &job,
                            EventType::Normal,
                            "Admitted",
                            format!("unsuspended {gang_name}"),
                        )
                        .await;
                    }
                    (false, Admit::Preempt(why)) => {
                        set_suspend(&ctx, &ns, &gang_name, true).await?;
                        status.phase = Some(JobPhase::Preempted);
                        status.message = Some(why.clone());
                        set_condition(&mut status, "Admitted", false, "Preempted", &why);
                        publish(&ctx, &job, EventType::Warning, "Preempted", format!("suspended {gang_name}: {why}; it resumes from its latest checkpoint when readmitted")).await;
                    }
                    (true, Admit::Preempt(why)) => {
                        // Suspended to preempt: the scheduler frees its GPUs once no pod
                        // of the gang is left.
                        let left = live_pods(&ctx, &ns, &job.name_any(), status.attempt).await?;
                        if left == 0 {
                            ctx.admission.evicted(&job);
                            status.phase = Some(JobPhase::Queued);
                            status.message = Some(format!("{why}; requeued"));
                            set_condition(&mut status, "Admitted", false, "Evicted", &why);
                            publish(
                                &ctx,
                                &job,
                                EventType::Normal,
                                "Evicted",
                                format!("every pod of {gang_name} is gone; requeued"),
                            )
                            .await;
                        } else {
                            action = Action::requeue(Duration::from_secs(5));
                        }
                    }
                    (_, Admit::Never(why)) => {
                        set_suspend(&ctx, &ns, &gang_name, true).await?;
                        ctx.admission.finished(&job);
                        status.phase = Some(JobPhase::Failed);
                        status.message = Some(why.clone());
                        status.completion_time = Some(now());
                        set_condition(&mut status, "Failed", true, "Inadmissible", &why);
                        publish(&ctx, &job, EventType::Warning, "Inadmissible", why).await;
                        action = Action::await_change();
                    }
                    (true, Admit::Wait(_)) => {}
                    (false, _) => {
                        status.phase = Some(JobPhase::Running);
                        observe_progress(&ctx, &job, &mut status).await;
                        action = Action::requeue(Duration::from_secs(30));
                    }
                }
            }
        }
    }
    if status.phase == Some(JobPhase::Running) {
        ctx.account_run(&mut status, None);
        match ctx.budget(&job, &status, None) {
            Some(Budget::Spent(why)) => {
                // Suspending deletes the pods: SIGTERM, then their grace period to checkpoint.
                set_suspend(&ctx, &ns, &gang_name, true).await?;
                fail_for_good(&ctx, &job, &mut status, "BudgetExhausted", why).await;
                action = Action::await_change();
            }
            Some(Budget::Left(s)) => {
                action = Action::requeue(Duration::from_secs(s.clamp(1, 30)));
            }
            None => {}
        }
    }
    if status.phase != Some(JobPhase::Running) {
        // Succeeded, failed, preempted, requeued or queued: no completion to estimate.
        ctx.not_running(&ns, &name, &mut status);
    }
    ctx.account_run(&mut status, ended_ms);
    // A queued job is told when it starts: first in line by its reservation, behind it by the
    // admission's kept forecast (refreshed each reconcile, at least every minute while it
    // waits; removed by name when none is known).
    status.estimated_start_time = (status.phase == Some(JobPhase::Queued))
        .then(|| ctx.admission.expected_start(&job))
        .flatten()
        .map(|s| timestamp(s.saturating_mul(1000)));
    // A queued job says why it waits now; its `Waiting` event is written when the reason
    // changes, not when the estimate moves.
    if status.phase == Some(JobPhase::Queued)
        && let Some(reason) = ctx.admission.waiting(&job)
        && status.message.as_deref() != Some(reason.as_str())
    {
        publish(&ctx, &job, EventType::Normal, "Waiting", reason.clone()).await;
        status.message = Some(reason);
    }
    // One that arrived after the kept forecast is told its start as soon as the next may
    // replay, not at the next minute's reconcile.
    if status.phase == Some(JobPhase::Queued)
        && let Some(s) = ctx.admission.retell_in(&job)
    {
        action = Action::requeue(Duration::from_secs(s));
    }
    if status != old {
        write_status(&jobs, &name, &status).await?;
    }
    Ok(action)
}

/// `status.conditions`' `Suspended` reason while the suspended run's pods still exit (their
/// GPUs are theirs until then).
const SUSPENDING: &str = "Suspending";

/// The condition reason of a suspended job once no pod of its run is left: its admission has
/// been told it left.
const SUSPENDED: &str = "Suspended";

fn suspended_reason(status: &TrainJobClusterStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended" && c.status == "True")
        .map(|c| c.reason.as_str())
}

/// Follows `spec.suspend` (Kubernetes' own, as on a Job, JobSet or Kueue workload). Set, the
/// job is stopped as a preemption stops it — its gang suspended, so its pods get SIGTERM and
/// their grace period to checkpoint (under Kueue, which would unsuspend an admitted gang, the
/// gang is deleted instead) — and is `Suspended`; its admission is told it left once no pod
/// of the run is left. Cleared, the job is `Queued` again once those pods are gone, and its
/// gang is admitted like any queued one, resuming from the latest checkpoint. Returns the
/// action when the reconcile ends here (the job is, or stays, suspended); `None` to go on.
async fn follow_suspend(
    ctx: &Context,
    job: &TrainJobResource,
    status: &mut TrainJobClusterStatus,
    gang_name: &str,
    current: Option<&DynamicObject>,
) -> Result<Option<Action>> {
    let suspended = status.phase == Some(JobPhase::Suspended);
    if !job.spec.suspend && !suspended {
        return Ok(None);
    }
    let ns = job.namespace().unwrap_or_default();
    let kueue = ctx.opts.cluster.kueue;
    let state = current
        .map(|obj| gang_json(ctx, gang_name, obj).map(|v| gang_state(&v)))
        .transpose()?;
    // Whether pods of the suspended run are left (they hold their GPUs): the admission is told
    // the job left only once none is. Under Kueue, whose quota is its own, only the resume
    // waits, for the deleted gang to be gone.
    let stopping = match (state, suspended_reason(status)) {
        _ if kueue => false,
        (None, _) => false,
        (Some(_), Some(SUSPENDED)) => false,
        // Running until the suspension written now takes its pods.
        (Some(st), _) if !st.suspended => true,
        (Some(_), _) => live_pods(ctx, &ns, &job.name_any(), status.attempt).await? > 0,
    };
    if job.spec.suspend {
        if let Some(state) = state {
            if !suspended && (state.succeeded || state.failed) {
                // A run that has ended is recorded first (success, or a failure's restart).
                return Ok(None);
            }
            if kueue {
                if current.is_some_and(|g| g.metadata.deletion_timestamp.is_none()) {
                    delete_ignoring_missing(&ctx.gang_api(&ns), gang_name).await?;
                }
            } else if !state.suspended {
                set_suspend(ctx, &ns, gang_name, true).await?;
            }
        }
        let reason = if stopping { SUSPENDING } else { SUSPENDED };
        if !stopping {
            ctx.admission.finished(job);
        }
        if !suspended {
            let msg = match current {
                Some(_) => format!(
                    "suspended (spec.suspend: true): {} {gang_name} stops, its pods get SIGTERM and \
                     their grace period to checkpoint; it resumes from its latest checkpoint once \
                     spec.suspend is false",
                    gang_kind(ctx)
                ),
                None => {
                    "suspended (spec.suspend: true): out of its queue until spec.suspend is false"
                        .to_owned()
                }
            };
            status.phase = Some(JobPhase::Suspended);
            status.message = Some(msg.clone());
            set_condition(status, "Suspended", true, reason, &msg);
            publish(ctx, job, EventType::Normal, "Suspended", msg).await;
        } else if suspended_reason(status) != Some(reason) {
            let msg = status.message.clone().unwrap_or_default();
            set_condition(status, "Suspended", true, reason, &msg);
        }
        return Ok(Some(if stopping {
            Action::requeue(Duration::from_secs(5))
        } else {
            Action::await_change()
        }));
    }
    // Resumed: once the suspended run's pods are gone (under Kueue, its deleted gang).
    if stopping || (kueue && current.is_some()) {
        return Ok(Some(Action::requeue(Duration::from_secs(5))));
    }
    ctx.admission.finished(job);
    let msg = "resumed (spec.suspend: false): queued again; it resumes from its latest \
               checkpoint once admitted";
    status.phase = Some(JobPhase::Queued);
    status.message = Some(msg.to_owned());
    set_condition(status, "Suspended", false, "Resumed", msg);
    publish(ctx, job, EventType::Normal, "Resumed", msg.to_owned()).await;
    Ok(None)
}

/// Copies rank 0's latest metrics line into `status.progress` and feeds its step to the
/// attempt's pace; once the pace is known, sets `status.estimatedCompletionTime` and tells
/// Ferry's scheduler the time left (Kueue has none). An unreadable log is logged, never
/// fatal (progress is informative).
async fn observe_progress(
    ctx: &Context,
    job: &TrainJobResource,
    status: &mut TrainJobClusterStatus,
) {
    let (ns, name) = (job.namespace().unwrap_or_default(), job.name_any());
    let line = match crate::progress::read(&ctx.client, &ns, &name, status.attempt).await {
        Ok(Some(line)) => line,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(job = %name, error = %e, "could not read rank 0's metrics");
            return;
        }
    };
    let now_ms = (ctx.clock)();
    let left = ctx.pace(
        (ns, name),
        status.attempt,
        &line,
        job.spec.train.steps,
        now_ms,
    );
    status.progress = Some(line);
    let Some(left) = left else { return };
    let end_s = (now_ms / 1000).saturating_add(left);
    status.estimated_completion_time = i64::try_from(end_s)
        .ok()
        .and_then(|s| Timestamp::from_second(s).ok())
        .map(|t| t.to_string());
    if !ctx.opts.cluster.kueue {
        ctx.admission.progress(job, left);
    }
}

/// Pods of one attempt that still run or are being stopped (they hold their GPUs).
async fn live_pods(ctx: &Context, ns: &str, job: &str, attempt: u32) -> Result<usize> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{LABEL_TRAIN_JOB}={job},{LABEL_ATTEMPT}={attempt}"
    ));
    let list = pods.list(&lp).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .count())
}

/// The gang object `gang_name` as JSON, to read its state.
fn gang_json(ctx: &Context, gang_name: &str, obj: &DynamicObject) -> Result<Value> {
    serde_json::to_value(obj).map_err(|source| K8sError::Json {
        what: format!("{} {gang_name}", gang_kind(ctx)),
        source,
    })
}

fn gang_kind(ctx: &Context) -> &'static str {
    if ctx.opts.cluster.jobset {
        "JobSet"
    } else {
        "Job"
    }
}

/// The job fails without restart (`reason`: `RestartsExhausted`, `BudgetExhausted`): status,
/// condition and event; the scheduler forgets it.
async fn fail_for_good(
    ctx: &Context,
    job: &TrainJobResource,
    status: &mut TrainJobClusterStatus,
    reason: &str,
    msg: String,
) {
    status.phase = Some(JobPhase::Failed);
    status.message = Some(msg.clone());
    status.completion_time = Some(now());
    set_condition(status, "Failed", true, reason, &msg);
    publish(ctx, job, EventType::Warning, reason, msg).await;
    ctx.admission.finished(job);
}

async fn write_status(
    jobs: &Api<TrainJobResource>,
    name: &str,
    status: &TrainJobClusterStatus,
) -> Result<()> {
    let mut patch = json!({"status": status});
    // A merge patch keeps what it does not name: an estimate that no longer holds, and the
    // start of a run that ended, are removed by name.
    if status.estimated_completion_time.is_none() {
        patch["status"]["estimatedCompletionTime"] = Value::Null;
    }
    if status.running_since.is_none() {
        patch["status"]["runningSince"] = Value::Null;
    }
    if status.estimated_start_time.is_none() {
        patch["status"]["estimatedStartTime"] = Value::Null;
    }
    jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// One reconcile of one `ModelDeployment`: apply the Deployment, Service and autoscaler,
/// then mirror the ready replicas into the status.
pub async fn reconcile_deployment(
    md: Arc<ModelDeploymentResource>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let ns = md.namespace().ok_or_else(|| {
        K8sError::invalid(
            "ModelDeployment/?",
            "metadata.namespace",
            "ModelDeployments are namespaced; set it",
        )
    })?;
    let name = md.name_any();
    let api: Api<ModelDeploymentResource> = Api::namespaced(ctx.client.clone(), &ns);
    let old = md.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let reference = md.object_ref(&());
    match crate::serve::render(&md.to_spec(), &ctx.opts) {
        Err(e) => {
            status.phase = "Failed".into();
            status.message = Some(e.to_string());
        }
        Ok(objs) => {
            let owner = owner_reference(md.as_ref());
            for obj in objs {
                apply(&ctx.client, &ns, obj, &owner).await?;
            }
            let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
            let ready = deployments
                .get_opt(&name)
                .await?
                .and_then(|d| d.status)
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0)
                .max(0) as u32;
            let wanted = md.spec.replicas.max(0) as u32;
            status.ready_replicas = ready;
            status.phase = if ready == 0 && wanted > 0 {
                "Pending"
            } else if ready < wanted {
                "Degraded"
            } else {
                "Ready"
            }
            .into();
            status.message = Some(format!("{ready}/{wanted} replicas pass /health"));
        }
    }
    if status != old {
        let patch = json!({"status": status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if status.phase != old.phase {
            let type_ = if status.phase == "Failed" {
                EventType::Warning
            } else {
                EventType::Normal
            };
            let ev = Event {
                type_,
                reason: status.phase.clone(),
                note: status.message.clone(),
                action: "Reconcile".into(),
                secondary: None,
            };
            if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
                tracing::warn!(error = %e, "could not publish event");
            }
        }
    }
    Ok(if status.phase == "Failed" {
        Action::await_change()
    } else {
        Action::requeue(Duration::from_secs(30))
    })
}

/// Requeue with a delay after a deployment reconcile error; the error is logged.
pub fn deployment_error_policy(
    _md: Arc<ModelDeploymentResource>,
    err: &K8sError,
    _ctx: Arc<Context>,
) -> Action {
    tracing::warn!(error = %err, "deployment reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

/// Requeue with a delay after an error; the error is logged.
pub fn error_policy(_job: Arc<TrainJobResource>, err: &K8sError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

/// Re-registers every running gang with the scheduler before anything else is admitted, so
/// an operator restart preempts nothing (gangs pinned by an earlier operator carry their
/// placement in annotations).
pub async fn restore_running(
    client: &Client,
    jobset: bool,
    admission: &dyn Admission,
) -> Result<usize> {
    let jobs = Api::<TrainJobResource>::all(client.clone());
    let mut restored = 0;
    for job in jobs.list(&ListParams::default()).await?.items {
        let status = job.status.clone().unwrap_or_default();
        if status.phase.is_some_and(JobPhase::is_terminal)
            || job.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let Some(ns) = job.namespace() else { continue };
        let name = train::child_name(&job.to_spec(), status.attempt);
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &gang_resource(jobset));
        let Some(obj) = api.get_opt(&name).await? else {
            continue;
        };
        let value = serde_json::to_value(&obj).map_err(|source| K8sError::Json {
            what: format!("gang {ns}/{name}"),
            source,
        })?;
        let gang = Gang::observe(&value);
        if matches!(
            gang,
            Gang::Running {
                placement: Some(_),
                ..
            }
        ) {
            match admission.decide(&job, &gang) {
                Admit::Run(_) => restored += 1,
                other => {
                    tracing::warn!(job = %name, decision = ?other, "running gang not restored")
                }
            }
        }
    }
    Ok(restored)
}

/// Renews the lease every 5 s; returns an error once another operator holds it.
async fn keep_leading(elector: &crate::leader::LeaderElector) -> Result<()> {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if !elector.try_acquire_or_renew().await? {
            return Err(K8sError::invalid(
                "Lease/ferry-operator",
                "spec.holderIdentity",
                "another operator took the lease; exiting so only one leader reconciles",
            ));
        }
    }
}

/// Runs the operator until the lease is lost or the process is signalled: waits to lead,
/// discovers the cluster, then reconciles every `TrainJob` while renewing the lease; Ferry's
/// scheduler (when Queues exist and Kueue does not admit) runs with the switches in `policy`.
pub async fn run(
    client: Client,
    mut opts: RenderOptions,
    policy: ferry_sched::Options,
    lease_namespace: &str,
    identity: String,
) -> Result<()> {
    let elector = crate::leader::LeaderElector::new(
        client.clone(),
        lease_namespace,
        CONTROLLER_NAME,
        identity,
        Duration::from_secs(15),
    );
    while !elector.try_acquire_or_renew().await? {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    tracing::info!("leading; starting the TrainJob controller");
    crate::cluster::discover(&client, &mut opts.cluster).await?;
    let jobset = opts.cluster.jobset;
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let rack_label = opts.cluster.rack_label.clone();
    let mut inputs = None;
    let mut scheduler = None;
    let admission: Arc<dyn Admission> = if opts.cluster.kueue {
        Arc::new(AdmitAll)
    } else {
        let found = crate::cluster::scheduler_inputs(&client, rack_label.as_deref()).await?;
        inputs = Some(found.clone());
        if found.queues.is_empty() {
            tracing::warn!(
                "no Ferry Queue exists: admitting every TrainJob (create Queues to turn on Ferry's scheduler)"
            );
            Arc::new(AdmitAll)
        } else {
            tracing::info!(
                nodes = found.cluster.nodes.len(),
                gpus = found.cluster.total_gpus(),
                queues = found.queues.len(),
                priorities = found.priorities.len(),
                "admission through Ferry's scheduler"
            );
            let admission = Arc::new(
                crate::admission::SchedAdmission::new(found, policy, Some(wake))?
                    .with_inter_rack_bandwidth_pct(opts.cluster.inter_rack_bandwidth_pct),
            );
            restore_running(&client, jobset, admission.as_ref()).await?;
            scheduler = Some(admission.clone());
            admission
        }
    };
    let ctx = Arc::new(Context::new(client.clone(), opts, admission));
    let ctx_deploy = ctx.clone();
    let jobs = Api::<TrainJobResource>::all(client.clone());
    let gangs = Api::<DynamicObject>::all_with(client.clone(), &gang_resource(jobset));
    let controller = Controller::new(jobs, watcher::Config::default())
        .owns_with(gangs, gang_resource(jobset), watcher::Config::default())
        .reconcile_all_on(woken)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::warn!(error = %e, "reconcile error");
            }
        });
    let deployments = Controller::new(
        Api::<ModelDeploymentResource>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(reconcile_deployment, deployment_error_policy, ctx_deploy)
    .for_each(|r| async move {
        if let Err(e) = r {
            tracing::warn!(error = %e, "deployment reconcile error");
        }
    });
    let renew = keep_leading(&elector);
    let changed = watch_inputs(&client, rack_label.as_deref(), inputs, scheduler);
    tokio::select! {
        () = controller => Ok(()),
        () = deployments => Ok(()),
        r = renew => r,
        r = changed => r,
    }
}

/// Re-reads the GPU nodes, the Ferry `Queue`s and `Cohort`s and the `PriorityClass`es every
/// 60 s; when they differ from what the scheduler was built from, rebuilds it in place
/// ([`SchedAdmission::rebuild`]: running gangs stay where they run, waiting jobs keep their
/// order). Returns — so that the operator exits and its restart builds the right admission —
/// only when Ferry's scheduler must start or stop (the first Queue created, the last one
/// deleted); never returns without inputs to watch.
pub async fn watch_inputs(
    client: &Client,
    rack_label: Option<&str>,
    initial: Option<crate::cluster::SchedulerInputs>,
    scheduler: Option<Arc<crate::admission::SchedAdmission>>,
) -> Result<()> {
    let Some(mut current) = initial else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let now = match crate::cluster::scheduler_inputs(client, rack_label).await {
            Ok(now) if now != current => now,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "could not re-read nodes and queues");
                continue;
            }
        };
        let Some(sched) = scheduler.as_ref().filter(|_| !now.queues.is_empty()) else {
            tracing::info!(
                queues = now.queues.len(),
                "Ferry's scheduler starts or stops with the Queues: exiting so the restarted operator admits through the right one"
            );
            return Ok(());
        };
        match sched.rebuild(now.clone()) {
            Ok(r) => {
                tracing::info!(
                    nodes = now.cluster.nodes.len(),
                    queues = now.queues.len(),
                    priorities = now.priorities.len(),
                    kept = r.kept,
                    preempted = ?r.preempted,
                    dropped = ?r.dropped,
                    "GPU nodes, Queues, Cohorts or PriorityClasses changed: scheduler rebuilt in place"
                );
                current = now;
            }
            // The old scheduler stays; the next look tries again.
            Err(e) => tracing::error!(
                error = %e,
                "the changed Queues or Cohorts do not build a scheduler"
            ),
        }
    }
}

//! The whole of `ferry render --target k8s`: every object a set of Ferry resources becomes,
//! checked first so that bad input fails before anything would be created.

use std::collections::BTreeSet;

use ferry_spec::{Cohort, Resource, TrainJob};
use serde_json::Value;

use crate::error::{K8sError, Result};
use crate::options::{Attempt, ClusterState, RenderOptions, object_id};
use crate::{serve, tenancy, train};

/// The queue a job goes to.
pub fn job_queue(job: &TrainJob) -> String {
    job.spec.queue.clone().unwrap_or_else(|| "default".into())
}

/// The resources with every `Sweep` replaced by the `TrainJob`s it expands to, in index order:
/// on Kubernetes a sweep is its jobs (no controller watches sweeps).
pub fn expand_sweeps(resources: &[Resource]) -> Result<Vec<Resource>> {
    let mut out = Vec::with_capacity(resources.len());
    let mut errs = Vec::new();
    for r in resources {
        let Resource::Sweep(sweep) = r else {
            out.push(r.clone());
            continue;
        };
        match sweep.expand() {
            Ok(jobs) => out.extend(jobs.into_iter().map(|j| Resource::TrainJob(j.job))),
            Err(problems) => {
                let m = &sweep.metadata;
                errs.extend(problems.into_iter().map(|p| {
                    K8sError::invalid(object_id("Sweep", &m.namespace, &m.name), p.path, p.message)
                }));
            }
        }
    }
    K8sError::collect(errs)?;
    Ok(out)
}

/// What rendering `resources` cannot carry over, for the user to read beside the objects: a
/// sweep's `spec.maxParallel`, which only `ferry up` enforces (its jobs are rendered all, and
/// Kueue admits them as their queue's quota allows).
pub fn warnings(resources: &[Resource]) -> Vec<String> {
    resources
        .iter()
        .filter_map(|r| match r {
            Resource::Sweep(s) => s.spec.max_parallel.map(|n| {
                format!(
                    "Sweep {}/{}: spec.maxParallel ({n}) is enforced only by `ferry up`; all {} of its jobs are rendered, and Kueue admits them as queue {} has quota (lower its quota to run fewer at once)",
                    s.metadata.namespace,
                    s.metadata.name,
                    s.combinations(),
                    s.spec.template.spec.queue.as_deref().unwrap_or("default")
                )
            }),
            _ => None,
        })
        .collect()
}

/// Checks every resource against the others (and the cluster, when `state` is given):
/// each job's namespace has its queue, claims exist, gangs fit the nodes, no Cohort is its own
/// ancestor; a sweep's jobs as jobs. Returns every problem at once.
pub fn check(
    resources: &[Resource],
    opts: &RenderOptions,
    state: Option<&ClusterState>,
) -> Result<()> {
    let resources = &expand_sweeps(resources)?;
    let mut errs = Vec::new();
    let mut queues: BTreeSet<(String, String)> = resources
        .iter()
        .filter_map(|r| match r {
            Resource::Queue(q) => Some((q.metadata.namespace.clone(), q.metadata.name.clone())),
            _ => None,
        })
        .collect();
    if let Some(state) = state {
        for (ns, names) in &state.queues {
            queues.extend(names.iter().map(|n| (ns.clone(), n.clone())));
        }
    }
    let has_claim = |ns: &str, claim: &str| {
        state.is_none_or(|s| s.claims.get(ns).is_some_and(|c| c.contains(claim)))
    };
    let missing_queue = |kind: &str, ns: &str, name: &str, queue: &str| {
        let in_ns: Vec<&str> = queues
            .iter()
            .filter(|(n, _)| n == ns)
            .map(|(_, q)| q.as_str())
            .collect();
        let hint = if in_ns.is_empty() {
            format!(
                "namespace {ns} has no queue; add a Queue {{metadata: {{name: {queue}, namespace: {ns}}}}} to the file (or apply one to the cluster)"
            )
        } else {
            format!(
                "no queue {queue:?} in namespace {ns}; its queues are {}",
                in_ns.join(", ")
            )
        };
        K8sError::invalid(object_id(kind, ns, name), "spec.queue", hint)
    };
    for r in resources {
        match r {
            Resource::TrainJob(job) => {
                let (ns, name) = (&job.metadata.namespace, &job.metadata.name);
                let queue = job_queue(job);
                if !queues.contains(&(ns.clone(), queue.clone())) {
                    errs.push(missing_queue("TrainJob", ns, name, &queue));
                }
                errs.extend(train::check(job, opts));
                for (field, claim) in [
                    ("data", &opts.claims.data),
                    ("models", &opts.claims.models),
                    ("checkpoints", &opts.claims.checkpoints),
                ] {
                    if !has_claim(ns, claim) {
                        errs.push(K8sError::invalid(
                            object_id("TrainJob", ns, name),
                            format!("claims.{field}"),
                            format!(
                                "PersistentVolumeClaim {claim:?} does not exist in namespace {ns}; create it or pass --{field}-claim NAME"
                            ),
                        ));
                    }
                }
            }
            Resource::ModelDeployment(d) => {
                let (ns, name) = (&d.metadata.namespace, &d.metadata.name);
                if let Some(q) = &d.spec.queue
                    && !queues.contains(&(ns.clone(), q.clone()))
                {
                    errs.push(missing_queue("ModelDeployment", ns, name, q));
                }
                if !has_claim(ns, &opts.claims.models) {
                    errs.push(K8sError::invalid(
                        object_id("ModelDeployment", ns, name),
                        "claims.models",
                        format!(
                            "PersistentVolumeClaim {:?} does not exist in namespace {ns}; create it or pass --models-claim NAME",
                            opts.claims.models
                        ),
                    ));
                }
            }
            // Expanded above.
            Resource::Queue(_) | Resource::Sweep(_) => {}
            Resource::Cohort(c) => errs.extend(cohort_loop(c, resources)),
            Resource::PriorityClass(c) => {
                let name = &c.metadata.name;
                if crate::options::PRIORITIES.iter().any(|(n, _)| n == name) {
                    errs.push(K8sError::invalid(
                        object_id("PriorityClass", &c.metadata.namespace, name),
                        "metadata.name",
                        format!(
                            "on Kubernetes `{name}` is Ferry's own class (PriorityClass ferry-{name}, rendered with the Queues); choose another name"
                        ),
                    ));
                }
            }
        }
    }
    K8sError::collect(errs)
}

/// Renders every object `resources` become: tenancy first, then jobs (created suspended
/// unless Kueue is absent and `admit` is set; a sweep's as its jobs), then deployments.
pub fn render(
    resources: &[Resource],
    opts: &RenderOptions,
    state: Option<&ClusterState>,
) -> Result<Vec<Value>> {
    check(resources, opts, state)?;
    let resources = &expand_sweeps(resources)?;
    let queues: Vec<_> = resources
        .iter()
        .filter_map(|r| match r {
            Resource::Queue(q) => Some(q),
            _ => None,
        })
        .collect();
    let cohorts = cohorts(resources);
    let mut out = if queues.is_empty() && cohorts.is_empty() {
        Vec::new()
    } else {
        tenancy::render(&queues, &cohorts, opts)
    };
    let mut errs = Vec::new();
    for r in resources {
        match r {
            Resource::TrainJob(job) => {
                // Kueue's protocol: jobs are created suspended and unsuspended on admission.
                let attempt = Attempt {
                    number: 0,
                    suspend: true,
                };
                match train::render(job, attempt, opts) {
                    Ok(objs) => out.extend(objs.all()),
                    Err(e) => errs.push(e),
                }
            }
            Resource::ModelDeployment(d) => match serve::render(d, opts) {
                Ok(objs) => out.extend(objs),
                Err(e) => errs.push(e),
            },
            Resource::Queue(_) | Resource::Cohort(_) | Resource::Sweep(_) => {}
            Resource::PriorityClass(c) => {
                out.extend(tenancy::applied_priority_class(c, opts.cluster.kueue));
            }
        }
    }
    K8sError::collect(errs)?;
    Ok(out)
}

/// The Cohorts among `resources`.
fn cohorts(resources: &[Resource]) -> Vec<&Cohort> {
    resources
        .iter()
        .filter_map(|r| match r {
            Resource::Cohort(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// The problem of a Cohort that is its own ancestor through the file's Cohorts (Kueue admits
/// nothing to such a tree's queues), reported at the loop's first Cohort in the file only.
fn cohort_loop(c: &Cohort, resources: &[Resource]) -> Option<K8sError> {
    let all = cohorts(resources);
    let parent_of = |name: &str| {
        all.iter()
            .find(|o| o.metadata.name == name)
            .and_then(|o| o.spec.parent.as_deref())
    };
    let mut path = vec![c.metadata.name.as_str()];
    while let Some(parent) = parent_of(path[path.len() - 1]) {
        if let Some(start) = path.iter().position(|n| *n == parent) {
            let first = all
                .iter()
                .find(|o| path[start..].contains(&o.metadata.name.as_str()))?;
            if start != 0 || first.metadata.name != c.metadata.name {
                return None;
            }
            path.push(parent);
            return Some(K8sError::invalid(
                format!("Cohort/{}", c.metadata.name),
                "spec.parent",
                format!(
                    "cohort `{}` is its own ancestor ({}); remove or change one spec.parent in \
                     the loop",
                    c.metadata.name,
                    path.join(" -> ")
                ),
            ));
        }
        path.push(parent);
    }
    None
}

/// Objects as a multi-document YAML stream (`---` separated), for GitOps.
pub fn to_yaml(objects: &[Value]) -> Result<String> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        let text = serde_saphyr::to_string(o).map_err(|e| K8sError::Json {
            what: "YAML output".into(),
            source: serde::ser::Error::custom(e.to_string()),
        })?;
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

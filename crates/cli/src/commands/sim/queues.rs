//! Where `ferry sim`'s queues come from: `--quota` flags, or a `--queues` file of Ferry
//! `Queue`s and `Cohort`s, Kueue's ClusterQueues, LocalQueues and Cohorts, Kubernetes
//! ResourceQuotas, Volcano Queues or plain scheduler queues; for another system's objects, each
//! trace team is sent to the queue that would admit its work there, and what is not replayed is
//! said. Cohort trees (Ferry's, Kueue's and Volcano's queue trees) are replayed, and said.

use std::path::Path;

use anyhow::Context as _;

use super::parse_yaml;

/// Queues from `--quota`: one per trace team, in one cohort, each with an any-flavor nominal
/// quota; a trace team without one, a team given twice or one the trace lacks is refused.
pub(super) fn quota_queues(
    trace: &[ferry_sched::TraceJob],
    quotas: &[(String, u32)],
) -> anyhow::Result<Vec<ferry_sched::QueueSpec>> {
    let teams: std::collections::BTreeSet<&str> = trace.iter().map(|j| j.team.as_str()).collect();
    let mut seen = std::collections::BTreeSet::new();
    for (team, _) in quotas {
        anyhow::ensure!(
            teams.contains(team.as_str()),
            "--quota {team}=…: the trace has no team `{team}` (its teams: {}); fix: use one of them",
            teams.iter().copied().collect::<Vec<_>>().join(", ")
        );
        anyhow::ensure!(
            seen.insert(team.as_str()),
            "--quota {team}=… is given twice; fix: give each team once"
        );
    }
    if let Some(missing) = teams.iter().find(|t| !seen.contains(*t)) {
        anyhow::bail!(
            "--quota: the trace's team `{missing}` has none; fix: add --quota {missing}=GPUS \
             (every team needs one when any is given)"
        );
    }
    let cohort = (quotas.len() > 1).then_some("all");
    Ok(quotas
        .iter()
        .map(|(team, gpus)| ferry_sched::QueueSpec::any_flavor(team, cohort, *gpus))
        .collect())
}

/// What `--queues FILE` gives: the scheduler's queues and cohort trees, and for another
/// system's objects where each trace team's work goes and what is not replayed.
pub(super) struct QueuesFile {
    /// The scheduler's queues.
    pub queues: Vec<ferry_sched::QueueSpec>,
    /// The cohorts of the file's cohort trees (Ferry's or Kueue's `Cohort`s, Volcano's parent
    /// queues; none: flat cohorts).
    pub cohorts: Vec<ferry_sched::CohortSpec>,
    /// Trace team → the queue its work goes to (other systems' objects only).
    pub teams: std::collections::BTreeMap<String, String>,
    /// One line each for the user, printed with the setup.
    pub notes: Vec<String>,
}

/// Queues from `--queues FILE`: Ferry `Queue` and `Cohort` documents (what `ferry apply` takes),
/// Kueue's ClusterQueues, LocalQueues and Cohorts, ResourceQuotas, Volcano Queues, or a plain
/// list of scheduler queues; a Ferry or plain queue serves the trace team of its name, compared
/// ignoring case since Ferry names are lowercase.
pub(super) fn queues_file(
    path: &Path,
    trace: &[ferry_sched::TraceJob],
    cluster: &ferry_sched::Cluster,
) -> anyhow::Result<QueuesFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read queues file {}", path.display()))?;
    let file = path.display().to_string();
    match ferry_spec::QueueObjects::of(&text) {
        Some(ferry_spec::QueueObjects::Kueue) => return kueue_queues(&text, &file, trace),
        Some(ferry_spec::QueueObjects::ResourceQuotas) => {
            return resource_quota_queues(&text, &file, trace);
        }
        Some(ferry_spec::QueueObjects::Volcano) => {
            return volcano_queues(&text, &file, trace, cluster);
        }
        None => {}
    }
    let mut queues = Vec::new();
    let mut cohorts = Vec::new();
    // The trace team a queue serves: the one of its name, compared ignoring case.
    let team_of = |name: String| {
        (trace.iter())
            .find(|j| j.team.eq_ignore_ascii_case(&name))
            .map_or(name, |j| j.team.clone())
    };
    // Documents (YAML or JSON) have a `kind`; a plain list of scheduler queues has none.
    if !ferry_spec::holds_kubernetes_objects(&text) {
        queues = parse_yaml::<Vec<ferry_sched::QueueSpec>>(&text, path, "queues")?;
        for q in &mut queues {
            q.name = team_of(std::mem::take(&mut q.name));
        }
    } else {
        for doc in ferry_spec::parse_documents(&text, &file)? {
            let q = match doc {
                ferry_spec::Resource::Queue(q) => q,
                ferry_spec::Resource::Cohort(c) => {
                    cohorts.push(ferry_sched::CohortSpec::from(&c));
                    continue;
                }
                doc => anyhow::bail!(
                    "queues file {file}: a {} document; fix: keep only `kind: Queue` and `kind: \
                     Cohort` documents there (or Kueue's ClusterQueues, LocalQueues and Cohorts)",
                    doc.kind().as_str()
                ),
            };
            let mut spec = ferry_k8s::admission::queue_spec("", &q.metadata.name, &q.spec);
            spec.name = team_of(q.metadata.name);
            queues.push(spec);
        }
    }
    Ok(QueuesFile {
        queues,
        notes: ferry_sched::describe_cohorts(&cohorts)
            .into_iter()
            .collect(),
        cohorts,
        teams: Default::default(),
    })
}

/// Where a team's work goes among queues read from another system's objects.
struct Foreign {
    /// The queues, by their name there.
    queues: Vec<(String, ferry_spec::QueueSpec)>,
    /// The cohorts of its cohort trees, by their name there (Kueue's Cohorts, Volcano's parent
    /// queues).
    cohorts: Vec<(String, ferry_spec::CohortSpec)>,
    /// What the queues are called there (`ClusterQueue`, `namespace`).
    noun: &'static str,
    /// What was read but is not replayed.
    notes: Vec<String>,
}

/// Queues from Kueue's objects: one per ClusterQueue, each trace team sent to the ClusterQueue
/// named as it or behind its LocalQueue (see `ferry_spec::KueueQueues::cluster_queue_of`).
fn kueue_queues(
    text: &str,
    file: &str,
    trace: &[ferry_sched::TraceJob],
) -> anyhow::Result<QueuesFile> {
    let kueue = ferry_spec::read_kueue_queues(text, file)?;
    let foreign = Foreign {
        queues: kueue.cluster_queues.clone(),
        cohorts: kueue.cohorts.clone(),
        noun: "ClusterQueue",
        notes: kueue.not_modelled.clone(),
    };
    foreign.serving(
        trace,
        file,
        "kueue",
        |team| kueue.cluster_queue_of(team).map(|cq| cq.map(str::to_owned)),
        "add a LocalQueue for the team in its namespace, or rename the team in the trace",
    )
}

/// Queues from Kubernetes ResourceQuotas: each namespace's GPU cap, a queue of its own that
/// neither lends nor borrows; a trace team is the namespace of its name.
fn resource_quota_queues(
    text: &str,
    file: &str,
    trace: &[ferry_sched::TraceJob],
) -> anyhow::Result<QueuesFile> {
    let caps = ferry_spec::read_resource_quotas(text, file)?;
    let foreign = Foreign {
        queues: caps.queues,
        cohorts: Vec::new(),
        noun: "namespace",
        notes: caps.not_modelled,
    };
    let names: Vec<String> = foreign.queues.iter().map(|(n, _)| n.clone()).collect();
    let mut queues = foreign.serving(
        trace,
        file,
        "ResourceQuota",
        |team| Ok(names.iter().find(|n| n.eq_ignore_ascii_case(team)).cloned()),
        "add a ResourceQuota with a requests.nvidia.com/gpu cap in the team's namespace, or \
        rename the team in the trace",
    )?;
    queues.notes.push(
        "ResourceQuotas are hard caps: no namespace lends or borrows (Queue documents in one \
         cohort, or --quota, replay the same quotas shared)"
            .into(),
    );
    Ok(queues)
}

/// Queues from Volcano's Queues: all in one cohort, or, when they form a tree (`spec.parent`),
/// the leaf queues in cohorts of their parent queues; each owed its `deserved` GPUs (or its
/// weight's share of what its parent is owed), preempting as the scheduler's ConfigMap in the
/// file says (said first among the notes); a trace team is the leaf Queue of its name (see
/// `ferry_spec::VolcanoQueues::queue_of`).
fn volcano_queues(
    text: &str,
    file: &str,
    trace: &[ferry_sched::TraceJob],
    cluster: &ferry_sched::Cluster,
) -> anyhow::Result<QueuesFile> {
    let volcano = ferry_spec::read_volcano_queues(text, file)?;
    let gpus = u32::try_from(cluster.total_gpus()).unwrap_or(u32::MAX);
    let foreign = Foreign {
        queues: volcano.queue_specs(gpus),
        cohorts: volcano.cohort_specs(gpus),
        noun: "Queue",
        notes: volcano.not_modelled.clone(),
    };
    let mut queues = foreign.serving(
        trace,
        file,
        "volcano",
        |team| volcano.queue_of(team).map(|q| q.map(str::to_owned)),
        "add a Volcano Queue named as the team, or rename the team in the trace",
    )?;
    let replayed = volcano
        .replayed
        .iter()
        .map(|line| format!("volcano: {line}"));
    queues.notes.splice(0..0, replayed);
    Ok(queues)
}

impl Foreign {
    /// The scheduler's queues, with every trace team sent where `queue_of` says (`Err` or
    /// `None`: refused naming the team and `fix`); notes are prefixed with `source`.
    fn serving(
        self,
        trace: &[ferry_sched::TraceJob],
        file: &str,
        source: &str,
        queue_of: impl Fn(&str) -> Result<Option<String>, String>,
        fix: &str,
    ) -> anyhow::Result<QueuesFile> {
        let noun = self.noun;
        let mut teams = std::collections::BTreeMap::new();
        for job in trace {
            if teams.contains_key(&job.team) {
                continue;
            }
            let queue = queue_of(&job.team)
                .map_err(|e| anyhow::anyhow!("queues file {file}: trace team `{}`: {e}", job.team))?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "queues file {file}: trace team `{team}` (job `{id}`) has no {noun} \
                         ({noun}s: {all}); fix: {fix}",
                        team = job.team,
                        id = job.job_id,
                        all = self
                            .queues
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            teams.insert(job.team.clone(), queue);
        }
        let mut notes: Vec<String> = self
            .notes
            .iter()
            .map(|n| format!("{source}, not replayed: {n}"))
            .collect();
        let mut by_queue: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for (team, queue) in &teams {
            by_queue
                .entry(queue.as_str())
                .or_default()
                .push(team.as_str());
        }
        for (queue, shared) in by_queue.iter().filter(|(_, t)| t.len() > 1) {
            notes.push(format!(
                "teams {} share {noun} {queue}: shares are judged per {noun}",
                shared.join(", ")
            ));
        }
        let queues = self
            .queues
            .iter()
            .map(|(name, spec)| {
                let mut q = ferry_k8s::admission::queue_spec("", name, spec);
                q.name.clone_from(name);
                q
            })
            .collect();
        let cohorts: Vec<ferry_sched::CohortSpec> = (self.cohorts.iter())
            .map(|(name, spec)| spec.to_sched(name))
            .collect();
        notes.extend(ferry_sched::describe_cohorts(&cohorts));
        Ok(QueuesFile {
            queues,
            cohorts,
            teams,
            notes,
        })
    }
}

/// On a cluster `ferry sim` made up (no `--cluster`), nodes take the one GPU flavor the
/// queues and cohorts name, so quotas written for `h100` apply; `None` when they name none or
/// several.
pub(super) fn flavor_to_assume(
    queues: &[ferry_sched::QueueSpec],
    cohorts: &[ferry_sched::CohortSpec],
) -> Option<String> {
    let flavors: std::collections::BTreeSet<&str> = (queues.iter().map(|q| &q.quotas))
        .chain(cohorts.iter().map(|c| &c.quotas))
        .flat_map(|quotas| quotas.iter().map(|f| f.flavor.as_str()))
        .filter(|f| *f != ferry_sched::ANY_FLAVOR)
        .collect();
    match flavors.into_iter().collect::<Vec<_>>()[..] {
        [one] => Some(one.to_owned()),
        _ => None,
    }
}

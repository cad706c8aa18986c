//! Whether a trace can be replayed at all on the simulated cluster and queues, checked once
//! before any policy runs, so a job that no policy could ever start is named with its trace id
//! and the fix instead of surfacing as a scheduler error about an internal workload number.

use std::collections::BTreeMap;

use super::{Site, TraceJob, trace_err, whole_cluster_queue};
use crate::config::{MAX_CLUSTER_NODES, Options, StopPolicy, Topology, Workload};
use crate::error::{Result, SchedError};
use crate::scheduler::Scheduler;

/// Refuses a trace that cannot be replayed on `site` (`file` names it in the message): a team
/// without a queue, a priority class the site does not define, or jobs no policy could ever
/// start — more GPUs than the cluster, a pod larger than any node, or more than the team's
/// quota with all the borrowing it may do. The message names the first such job (in file
/// order), how many there are, the scheduler's reason and what to change.
pub fn check_replayable(trace: &[TraceJob], site: Site<'_>, file: &str) -> Result<()> {
    let Site {
        cluster,
        queues,
        cohorts,
        classes,
    } = site;
    if cluster.nodes.len() > MAX_CLUSTER_NODES {
        return Err(SchedError::InvalidConfig {
            field: "cluster.nodes".into(),
            problem: format!(
                "the cluster has {} nodes, more than the {MAX_CLUSTER_NODES} the simulator takes",
                cluster.nodes.len()
            ),
            fix: format!("describe at most {MAX_CLUSTER_NODES} nodes"),
        });
    }
    let teams: BTreeMap<&str, ()> = queues.iter().map(|q| (q.name.as_str(), ())).collect();
    if let Some(t) = trace.iter().find(|t| !teams.contains_key(t.team.as_str())) {
        return Err(trace_err(
            file,
            0,
            format!(
                "job `{}`: team `{}` has no queue (queues: {})",
                t.job_id,
                t.team,
                teams.keys().copied().collect::<Vec<_>>().join(", ")
            ),
            "add a queue with that name, give it a --quota, or omit --queues and --quota",
        ));
    }
    let named = |t: &&TraceJob| {
        t.priority
            .as_ref()
            .is_some_and(|p| !classes.iter().any(|c| &c.name == p))
    };
    if let Some(t) = trace.iter().find(named) {
        let mut known: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        known.sort_unstable();
        return Err(trace_err(
            file,
            0,
            format!(
                "job `{}`: priority class `{}` is not defined ({} jobs name classes that are \
                 not; classes: {})",
                t.job_id,
                t.priority.as_deref().unwrap_or_default(),
                trace.iter().filter(named).count(),
                known.join(", ")
            ),
            "define the class in --priority-classes (a Kubernetes PriorityClass, a Kueue \
             WorkloadPriorityClass or `name: value`), or write one of those classes",
        ));
    }
    // A held queue admits nothing for the whole replay (the simulator has no release event).
    if let Some(q) = queues
        .iter()
        .find(|q| q.stop_policy != StopPolicy::None && trace.iter().any(|t| t.team == q.name))
    {
        let jobs = trace.iter().filter(|t| t.team == q.name).count();
        return Err(trace_err(
            file,
            0,
            format!(
                "queue `{}` is stopped (stopPolicy {:?}): its {jobs} jobs would never start",
                q.name, q.stop_policy
            ),
            "replay it with stopPolicy None (stopping a queue is an operator's action, not a \
             policy to compare)",
        ));
    }
    // Ferry and Kueue replay with the team queues, the other policies with one queue holding
    // the whole cluster: a job must be admissible under both.
    // (The classes go through the scheduler's own checks here, before any policy runs.)
    let mut by_team = Scheduler::with_cohorts(
        cluster.clone(),
        queues.to_vec(),
        cohorts,
        classes.to_vec(),
        Options::default(),
    )?;
    let whole = whole_cluster_queue(cluster);
    let all = whole.name.clone();
    let mut alone =
        Scheduler::with_options(cluster.clone(), vec![whole], Vec::new(), Options::default())?;
    // One probe per distinct shape, team and topology; the probes only ever wait.
    let mut verdicts: BTreeMap<(&str, u32, u32, Option<Topology>), Option<Refusal>> =
        BTreeMap::new();
    let mut refused: Vec<(&TraceJob, Refusal)> = Vec::new();
    for t in trace {
        let (pods, per) = t.shape();
        for topology in [None, t.topology] {
            let key = (t.team.as_str(), pods, per, topology);
            if verdicts.contains_key(&key) {
                continue;
            }
            let n = verdicts.len();
            let probe = |id: String, queue: &str| Workload {
                id,
                queue: queue.to_string(),
                priority: None,
                pods,
                gpus_per_pod: per,
                flavor: None,
                expected_duration_s: None,
                created_at: 0,
                topology,
                split_slowdown_pct: None,
            };
            let problem = |e: SchedError| match e {
                SchedError::InvalidWorkload { problem, .. } => problem,
                other => other.to_string(),
            };
            // The cluster's own limit first; else the team's quota is what refuses it.
            let why = match (
                alone.submit(probe(format!("all-{n}"), &all)),
                by_team.submit(probe(format!("team-{n}"), &t.team)),
            ) {
                (Err(e), _) => Some(Refusal::Cluster(problem(e))),
                (Ok(()), Err(e)) => Some(Refusal::Quota(problem(e))),
                (Ok(()), Ok(())) => None,
            };
            verdicts.insert(key, why);
        }
        if let Some(why) = &verdicts[&(t.team.as_str(), pods, per, t.topology)] {
            refused.push((t, why.clone()));
        }
    }
    let Some((first, refusal)) = refused.first() else {
        return Ok(());
    };
    let (Refusal::Cluster(why) | Refusal::Quota(why)) = refusal;
    let largest_pod = refused.iter().map(|(t, _)| t.shape().1).max().unwrap_or(0);
    let largest = refused.iter().map(|(t, _)| t.gpus).max().unwrap_or(0);
    let node_max = cluster.nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
    // The job would start without its topology requirement: the domains are too small.
    let (pods, per) = first.shape();
    let untied = verdicts[&(first.team.as_str(), pods, per, None)].is_none();
    let fix = if let Some(level) = first.topology.filter(|_| untied) {
        format!(
            "label the nodes so that one {} holds the job (`{}` on the nodes of --cluster), or \
             clear the job's `topology` column",
            level.noun(),
            level.name()
        )
    } else if refused.iter().all(|(_, r)| matches!(r, Refusal::Quota(_))) {
        // The cluster holds every one: their teams' queues may not reach them.
        let mut short: BTreeMap<&str, u64> = BTreeMap::new();
        for (t, _) in &refused {
            let most = short.entry(t.team.as_str()).or_default();
            *most = (*most).max(u64::from(t.gpus));
        }
        let teams: Vec<String> = short
            .iter()
            .map(|(team, gpus)| format!("`{team}` to {gpus}"))
            .collect();
        format!(
            "let each queue reach its largest job ({}) with a larger nominal quota, borrowing \
             limit or cohort, or leave those jobs out of the trace",
            teams.join(", ")
        )
    } else if largest_pod > node_max {
        format!(
            "simulate nodes of at least {largest_pod} GPUs (--cluster with `gpus: \
             {largest_pod}` nodes), or leave those jobs out of the trace"
        )
    } else {
        format!(
            "simulate at least {largest} GPUs (--gpus {largest}, or a larger --cluster) and \
             quotas that let each team reach its largest job, or leave those jobs out of the \
             trace"
        )
    };
    Err(trace_err(
        file,
        0,
        format!(
            "{} of its {} jobs can never start on the simulated cluster of {} GPUs ({} nodes \
             of at most {node_max}), e.g. job `{}` ({} GPUs on {} nodes, team `{}`): {why}",
            refused.len(),
            trace.len(),
            cluster.total_gpus(),
            cluster.nodes.len(),
            first.job_id,
            first.gpus,
            first.nodes.max(1),
            first.team,
        ),
        fix,
    ))
}

/// What keeps a trace job from ever starting, with the scheduler's words for it: the cluster
/// itself (too few GPUs, nodes too small), or only its team's queue (the quota it may reach
/// with borrowing).
#[derive(Debug, Clone)]
enum Refusal {
    Cluster(String),
    Quota(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cluster, PriorityClass, QueueSpec};
    use crate::sim::{cluster_with_gpus, default_cluster, default_queues, parse_trace};

    const HEADER: &str = "job_id,submit_s,duration_s,gpus,nodes,team,status\n";

    fn trace(rows: &str) -> Vec<TraceJob> {
        parse_trace(&format!("{HEADER}{rows}"), "t.csv").unwrap()
    }

    /// `check_replayable` of `t` on `cluster` and `queues`, with the standard classes.
    fn check(t: &[TraceJob], cluster: &Cluster, queues: &[QueueSpec]) -> Result<()> {
        let classes = PriorityClass::standard();
        let site = Site {
            cluster,
            queues,
            cohorts: &[],
            classes: &classes,
        };
        check_replayable(t, site, "t.csv")
    }

    /// The message `check_replayable` refuses `t` with.
    fn refusal(t: &[TraceJob], cluster: &Cluster, queues: &[QueueSpec]) -> String {
        check(t, cluster, queues).unwrap_err().to_string()
    }

    #[test]
    fn a_class_no_one_defined_is_named_with_the_classes_there_are() {
        let t = parse_trace(
            "job_id,submit_s,duration_s,gpus,team,priority\n\
             a,0,60,8,a,high\nb,1,60,8,a,\nc,2,60,8,a,urgent\nd,3,60,8,a,urgent\n",
            "t.csv",
        )
        .unwrap();
        let cluster = default_cluster(&t);
        let queues = default_queues(&t, &cluster);
        let msg = refusal(&t, &cluster, &queues);
        assert!(
            msg.contains("job `c`: priority class `urgent` is not defined (2 jobs"),
            "{msg}"
        );
        assert!(msg.contains("classes: high, low, normal"), "{msg}");
        assert!(msg.contains("--priority-classes"), "{msg}");
        check(&t[..2], &cluster, &queues).unwrap();
    }

    /// The message refusing `t` on `gpus` GPUs with default quotas.
    fn refusal_on(t: &[TraceJob], gpus: u32) -> String {
        let cluster = cluster_with_gpus(gpus);
        refusal(t, &cluster, &default_queues(t, &cluster))
    }

    #[test]
    fn a_job_larger_than_the_cluster_is_named_with_its_count_and_the_fix() {
        let t = trace("a1,0,60,8,1,a,\nbig,5,60,128,16,b,\nbig2,9,60,128,16,b,\nb1,9,60,64,8,b,\n");
        let msg = refusal_on(&t, 64);
        assert!(msg.starts_with("trace `t.csv`"), "{msg}");
        assert!(msg.contains("2 of its 4 jobs"), "{msg}");
        assert!(
            msg.contains("job `big` (128 GPUs on 16 nodes, team `b`)"),
            "{msg}"
        );
        assert!(msg.contains("--gpus 128"), "{msg}");
        // The default cluster is sized for the largest job: nothing to refuse.
        let cluster = default_cluster(&t);
        check(&t, &cluster, &default_queues(&t, &cluster)).unwrap();
    }

    #[test]
    fn a_pod_larger_than_every_node_asks_for_larger_nodes() {
        let t = trace("a1,0,60,8,1,a,\nwide,5,60,16,1,a,\n");
        let msg = refusal_on(&t, 64);
        assert!(msg.contains("1 of its 2 jobs"), "{msg}");
        assert!(msg.contains("job `wide`"), "{msg}");
        assert!(msg.contains("nodes of at least 16 GPUs"), "{msg}");
    }

    #[test]
    fn a_team_without_a_queue_or_beyond_its_quota_is_refused() {
        let t = trace("a1,0,60,8,1,a,\nb1,5,60,8,1,b,\n");
        let cluster = cluster_with_gpus(16);
        let only_a = vec![QueueSpec::any_flavor("a", None, 16)];
        let msg = refusal(&t, &cluster, &only_a);
        assert!(msg.contains("job `b1`: team `b` has no queue"), "{msg}");
        // Team b may use 4 GPUs and borrow nothing (no cohort): its 8-GPU job never starts.
        let queues = vec![
            QueueSpec::any_flavor("a", None, 12),
            QueueSpec::any_flavor("b", None, 4),
        ];
        let msg = refusal(&t, &cluster, &queues);
        assert!(
            msg.contains("1 of its 2 jobs") && msg.contains("job `b1`"),
            "{msg}"
        );
        assert!(msg.contains("queue `b` can use at most 4"), "{msg}");
        // The cluster holds the job, so the fix is the quota, not a larger cluster.
        assert!(
            msg.contains("fix: let each queue reach its largest job (`b` to 8)")
                && !msg.contains("simulate at least"),
            "{msg}"
        );
    }

    #[test]
    fn a_gang_no_domain_holds_is_named_even_after_the_same_shape_without_topology() {
        // Two 2-node gangs of one team: the first may span racks, the second must stay in
        // one, and no node of the cluster carries a rack label.
        let text = "job_id,submit_s,duration_s,gpus,nodes,team,status,topology\n\
                    free,0,60,16,2,a,,\ntied,5,60,16,2,a,,rack\n";
        let t = parse_trace(text, "t.csv").unwrap();
        let msg = refusal_on(&t, 32);
        assert!(
            msg.contains("1 of its 2 jobs") && msg.contains("job `tied`"),
            "{msg}"
        );
        assert!(
            msg.contains("label the nodes so that one rack holds the job")
                && msg.contains("clear the job's `topology` column"),
            "{msg}"
        );
    }

    #[test]
    fn a_cluster_past_the_simulators_size_is_refused_before_it_is_indexed() {
        let t = trace("a1,0,60,8,1,a,\n");
        let cluster = Cluster::uniform(MAX_CLUSTER_NODES + 1, 8, "gpu");
        let msg = refusal(&t, &cluster, &default_queues(&t, &cluster));
        assert!(
            msg.contains("`cluster.nodes`") && msg.contains("more than the 131072"),
            "{msg}"
        );
    }

    #[test]
    fn the_default_cluster_of_a_burst_is_what_the_burst_uses_at_once() {
        // Ten 8-GPU jobs of an hour, submitted together: an offered load of 288,000 GPUs over
        // the one-second span, but never more than 80 GPUs in use.
        let rows: String = (0..10).map(|i| format!("j{i},0,3600,8,1,a,\n")).collect();
        let t = trace(&rows);
        assert_eq!(default_cluster(&t).total_gpus(), 80);
        // Two waves an hour apart: the peak is one wave, and the load (160 GPU-hours over an
        // hour) asks for more, so the peak decides.
        let rows: String = (0..20)
            .map(|i| format!("j{i},{},3600,8,1,a,\n", (i / 10) * 3600))
            .collect();
        assert_eq!(default_cluster(&trace(&rows)).total_gpus(), 80);
        // A pod larger than any node may hold is left to `check_replayable` to name.
        let t = trace("big,0,60,80,1,a,\n");
        assert_eq!(
            default_cluster(&t).nodes[0].gpus,
            crate::config::MAX_NODE_GPUS
        );
        assert!(
            refusal(
                &t,
                &default_cluster(&t),
                &default_queues(&t, &default_cluster(&t))
            )
            .contains("nodes of at least 80 GPUs")
        );
    }

    #[test]
    fn a_stopped_queue_is_refused_not_replayed_forever() {
        let t = trace("a1,0,60,8,1,a,\nb1,0,60,8,1,b,\nb2,9,60,8,1,b,\n");
        let cluster = cluster_with_gpus(16);
        let mut queues = default_queues(&t, &cluster);
        assert!(check(&t, &cluster, &queues).is_ok());
        queues[1].stop_policy = StopPolicy::Hold;
        let msg = refusal(&t, &cluster, &queues);
        assert!(
            msg.contains("queue `b` is stopped (stopPolicy Hold): its 2 jobs would never start")
                && msg.contains("fix: replay it with stopPolicy None"),
            "{msg}"
        );
    }
}

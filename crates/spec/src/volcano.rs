//! Volcano's `Queue` objects (`scheduling.volcano.sh/v1beta1`) read as Ferry queue specs, so a
//! platform team on Volcano can replay its queues (`ferry sim --queues`). Volcano lets every
//! queue use idle GPUs up to its `capability`, which is one cohort shared by all; `deserved`
//! is what a queue is owed (its nominal quota), `guarantee` what is kept for it and never lent,
//! and `weight` splits what no `deserved` covers, as Ferry's entitlements do. Queues that name
//! a parent queue (`spec.parent`, Volcano's hierarchical queues of the capacity plugin) form a
//! tree under the root queue: jobs run only in its leaves, which are Ferry queues, and each
//! parent queue is a Ferry cohort of the same name (see [`VolcanoQueues::cohort_specs`]).
//! Preemption and reclaim are actions of the scheduler's configuration
//! (`volcano-scheduler.conf`, in the `volcano-scheduler-configmap` ConfigMap), not of a queue:
//! off, as in Volcano's default configuration, unless that ConfigMap is in the file and turns
//! them on, for every queue.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::cohort::{CohortQuota, CohortSpec};
use crate::error::{FieldError, SpecError};
use crate::foreign::{Object, TreeNode, finish, kubernetes_objects, tree_problems, unknown_fields};
use crate::parse::documents;
use crate::quantity::whole_gpus;
use crate::queue::{FlavorQuota, Preemption, QueueSpec, ReclaimWithinCohort, WithinQueue};
use crate::schema::closest;

/// Volcano's API group, the prefix of the `apiVersion` of the queues this reader takes.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// The cohort all Volcano queues share when they form no tree: the cluster's idle GPUs are any
/// queue's to use.
pub const VOLCANO_COHORT: &str = "volcano";

/// Volcano's root queue, the top of its queue tree (a `spec.parent` unset is `root`): it runs
/// no job, and in a tree it is the root cohort.
pub const VOLCANO_ROOT: &str = "root";

/// The `capacity` plugin's option that turns Volcano's queue trees on.
const ENABLE_HIERARCHY: &str = "enableHierarchy";

/// The `spec` fields of a Volcano Queue (v1beta1): a field outside them is refused.
pub const VOLCANO_QUEUE_FIELDS: [&str; 11] = [
    "affinity",
    "capability",
    "dequeueStrategy",
    "deserved",
    "extendClusters",
    "guarantee",
    "parent",
    "priority",
    "reclaimable",
    "type",
    "weight",
];

/// The Volcano Queue fields that change scheduling and that Ferry does not replay.
const NOT_MODELLED: [&str; 5] = [
    "affinity",
    "dequeueStrategy",
    "extendClusters",
    "priority",
    "type",
];

/// The key of the scheduler's ConfigMap whose text is `volcano-scheduler.conf`.
const SCHEDULER_CONF: &str = "volcano-scheduler.conf";

/// The actions Volcano's scheduler knows (v1.15.1's, with `elect` and `reserve` of older
/// releases): the scheduler refuses a configuration naming another, and so does this reader.
const VOLCANO_ACTIONS: [&str; 10] = [
    "allocate",
    "backfill",
    "elect",
    "enqueue",
    "gangpreempt",
    "gangreclaim",
    "preempt",
    "reclaim",
    "reserve",
    "shuffle",
];

/// The actions of `volcano-scheduler.conf` that are what Ferry's replay always does: admit
/// (whole gangs), place, and fill the gaps.
const ALWAYS: [&str; 3] = ["enqueue", "allocate", "backfill"];

/// The actions by which a job preempts lower-priority jobs of its own queue (the second one
/// picks whole gangs as victims, as Ferry always does).
const PREEMPT: [&str; 2] = ["preempt", "gangpreempt"];

/// The actions by which a queue below its deserved share takes back what other queues use
/// beyond theirs.
const RECLAIM: [&str; 2] = ["reclaim", "gangreclaim"];

/// What a file of Volcano Queues says about queues.
#[derive(Debug, Clone, PartialEq)]
pub struct VolcanoQueues {
    /// Each queue, in file order; the root queue ([`VOLCANO_ROOT`]) is the top of the tree, not
    /// a queue, and is left out.
    pub queues: Vec<VolcanoQueue>,
    /// What every queue may preempt, from the scheduler's `preempt` and `reclaim` actions (both
    /// off, Volcano's default, without its ConfigMap).
    pub preemption: Preemption,
    /// What the scheduler's configuration makes the replay do, one line each, for the user to
    /// see beside results (empty without its ConfigMap).
    pub replayed: Vec<String>,
    /// What was read but is not replayed, one line each, for the user to see beside results.
    pub not_modelled: Vec<String>,
}

/// One Volcano Queue's place in the tree and its GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct VolcanoQueue {
    /// Its name, what a job's `queue` names.
    pub name: String,
    /// Its parent queue (`spec.parent`); `None` directly under the root queue.
    pub parent: Option<String>,
    /// GPUs it is owed (`spec.deserved`); unset, the proportion plugin's weighted share.
    pub deserved: Option<i32>,
    /// The most GPUs it (with its subtree) may hold (`spec.capability`).
    pub capability: Option<i32>,
    /// GPUs kept for it (and its subtree) and never lent (`spec.guarantee.resource`).
    pub guarantee: Option<i32>,
    /// Its share of what no `deserved` covers, and against its siblings (`spec.weight`, 1 to
    /// 65535).
    pub weight: u32,
}

impl VolcanoQueue {
    /// What it is owed before any weighted share: its `deserved`, else its guarantee.
    fn fixed(&self) -> i64 {
        i64::from(self.deserved.or(self.guarantee).unwrap_or(0))
    }
}

impl VolcanoQueues {
    /// The leaf queues (those no queue names as its parent: Volcano runs jobs only there) as
    /// Ferry queue specs on a cluster of `cluster_gpus` GPUs. A queue without `deserved` is
    /// owed its weight's share of what its parent is owed (the cluster, under the root) beyond
    /// what its siblings' `deserved` cover (up to its capability, the rest going to the others,
    /// as Volcano's proportion plugin divides them); each may borrow up to its capability (no
    /// more than the rest of its tree can lend), lends all but its guarantee, and preempts as
    /// [`Self::preemption`] says. Without a tree all are in the cohort [`VOLCANO_COHORT`] (a
    /// lone queue in none); in a tree each is in the cohort of its parent queue, or
    /// [`VOLCANO_ROOT`] (see [`Self::cohort_specs`]).
    pub fn queue_specs(&self, cluster_gpus: u32) -> Vec<(String, QueueSpec)> {
        let s = self.shares(cluster_gpus);
        let leaves = s.has_children.iter().filter(|c| !**c).count();
        (self.queues.iter().enumerate())
            .filter(|&(i, _)| !s.has_children[i])
            .map(|(i, q)| {
                let cohort = if s.tree {
                    Some(q.parent.as_deref().unwrap_or(VOLCANO_ROOT).to_owned())
                } else {
                    // A cohort of one is no cohort: there is no one to borrow from.
                    (leaves > 1).then(|| VOLCANO_COHORT.to_owned())
                };
                let spec = QueueSpec {
                    cohort,
                    quotas: vec![FlavorQuota {
                        flavor: "any".into(),
                        nominal: clamp(s.owed[i]),
                        borrowing_limit: s.borrow[i].map(clamp),
                        lending_limit: q.guarantee.map(|_| clamp(s.lendable[i])),
                    }],
                    weight: f64::from(q.weight),
                    stop_policy: Default::default(),
                    preemption: self.preemption,
                };
                (q.name.clone(), spec)
            })
            .collect()
    }

    /// The parent queues of a tree (some queue names another in `spec.parent`) as Ferry
    /// cohorts on a cluster of `cluster_gpus` GPUs, in file order; none without a tree. Each
    /// is under its own parent queue's cohort, or [`VOLCANO_ROOT`] (a root with no GPUs of its
    /// own, as Volcano's root queue deserves what its children do). Its own GPUs are what it is
    /// owed beyond what its children are (its `deserved` minus theirs: GPUs of the department
    /// its teams share); it borrows at most `capability` minus what it is owed (its subtree
    /// holds at most its capability), no more than the rest of the tree lends; it lends all but
    /// its guarantee: a parent's guarantee is what its whole subtree keeps, at least its
    /// children's guarantees added up (which they keep themselves), so the subtree lends what
    /// it is owed minus the guarantee. Its `weight` is its fair-sharing weight against its
    /// siblings. A tree of one leaf queue and no GPUs of a parent's own is replayed flat.
    pub fn cohort_specs(&self, cluster_gpus: u32) -> Vec<(String, CohortSpec)> {
        let s = self.shares(cluster_gpus);
        if !s.tree {
            return Vec::new();
        }
        (self.queues.iter().enumerate())
            .filter(|&(i, _)| s.has_children[i])
            .map(|(i, q)| {
                let spec = CohortSpec {
                    parent: Some(q.parent.as_deref().unwrap_or(VOLCANO_ROOT).to_owned()),
                    quotas: vec![CohortQuota {
                        flavor: "any".into(),
                        nominal: clamp(s.own[i]),
                        borrowing_limit: s.borrow[i].map(clamp),
                        lending_limit: q.guarantee.map(|_| clamp(s.lendable[i])),
                    }],
                    weight: f64::from(q.weight),
                };
                (q.name.clone(), spec)
            })
            .collect()
    }

    /// The queue a trace team's work goes to: the leaf queue named as the team (ignoring case,
    /// since trace teams keep their own spelling). `Err` says why a parent queue, or the root,
    /// runs no job and which leaf queues do.
    pub fn queue_of(&self, team: &str) -> Result<Option<&str>, String> {
        let leaves_under = |top: Option<&str>| {
            let mut leaves = Vec::new();
            let mut at: Vec<Option<&str>> = vec![top];
            // Each queue is visited once: a loop (refused when read) ends the walk.
            let mut seen = BTreeSet::new();
            while let Some(p) = at.pop() {
                for q in self.queues.iter().filter(|q| q.parent.as_deref() == p) {
                    if !seen.insert(q.name.as_str()) {
                        continue;
                    }
                    if self
                        .queues
                        .iter()
                        .any(|c| c.parent.as_ref() == Some(&q.name))
                    {
                        at.push(Some(q.name.as_str()));
                    } else {
                        leaves.push(q.name.as_str());
                    }
                }
            }
            leaves.sort_unstable();
            leaves.join(", ")
        };
        if team.eq_ignore_ascii_case(VOLCANO_ROOT) {
            return Err(format!(
                "Queue/{VOLCANO_ROOT} is the top of Volcano's queue tree and runs no job; fix: \
                 rename the team in the trace to a leaf queue ({})",
                leaves_under(None)
            ));
        }
        let Some(q) = self
            .queues
            .iter()
            .find(|q| q.name.eq_ignore_ascii_case(team))
        else {
            return Ok(None);
        };
        let children: Vec<String> = (self.queues.iter())
            .filter(|c| c.parent.as_ref() == Some(&q.name))
            .map(|c| format!("Queue/{}", c.name))
            .collect();
        if children.is_empty() {
            return Ok(Some(&q.name));
        }
        Err(format!(
            "Queue/{name} is a parent queue ({children} {verb} it in spec.parent) and Volcano \
             runs jobs only in leaf queues; fix: rename the team in the trace to a leaf queue \
             under it ({leaves})",
            name = q.name,
            verb = if children.len() == 1 { "names" } else { "name" },
            children = and_list(&children.iter().map(String::as_str).collect::<Vec<_>>()),
            leaves = leaves_under(Some(&q.name)),
        ))
    }

    /// Each queue's place in the tree and GPUs on a cluster of `cluster` GPUs: what it is owed,
    /// divided from the root down; then from the leaves up what each lends and each parent's
    /// pool holds; then from the root down what each may borrow, within what the rest of the
    /// tree can lend (the scheduler refuses a borrowing limit above that).
    fn shares(&self, cluster: u32) -> Shares {
        let n = self.queues.len();
        let mut index = BTreeMap::new();
        for (i, q) in self.queues.iter().enumerate() {
            index.entry(q.name.as_str()).or_insert(i);
        }
        // A parent no queue defines (refused when read) is read as the root.
        let parent: Vec<Option<usize>> = (self.queues.iter())
            .map(|q| q.parent.as_deref().and_then(|p| index.get(p).copied()))
            .collect();
        let mut children = vec![Vec::new(); n];
        let mut top = Vec::new();
        for (i, p) in parent.iter().enumerate() {
            match p {
                Some(p) => children[*p].push(i),
                None => top.push(i),
            }
        }
        // From the root down, each queue once (a loop, refused when read, is never reached).
        let mut order = top.clone();
        let mut seen = vec![false; n];
        top.iter().for_each(|&i| seen[i] = true);
        let mut next = 0;
        while next < order.len() {
            for &c in &children[order[next]] {
                if !std::mem::replace(&mut seen[c], true) {
                    order.push(c);
                }
            }
            next += 1;
        }
        let mut owed: Vec<i64> = self.queues.iter().map(VolcanoQueue::fixed).collect();
        self.divide(&top, i64::from(cluster), &mut owed);
        for &p in &order {
            self.divide(&children[p], owed[p], &mut owed);
        }
        let has_children: Vec<bool> = children.iter().map(|c| !c.is_empty()).collect();
        // Of what a queue is owed, what it lends: all but its guarantee.
        let lendable: Vec<i64> = (self.queues.iter().zip(&owed))
            .map(|(q, &o)| o - i64::from(q.guarantee.unwrap_or(0)).min(o))
            .collect();
        let (mut own, mut pool, mut lend) = (vec![0; n], vec![0; n], lendable.clone());
        for &p in order.iter().rev().filter(|&&p| has_children[p]) {
            let kids = &children[p];
            own[p] = (owed[p] - kids.iter().map(|&c| owed[c]).sum::<i64>()).max(0);
            pool[p] = own[p] + kids.iter().map(|&c| lend[c]).sum::<i64>();
            lend[p] = if self.queues[p].guarantee.is_some() {
                lendable[p].min(pool[p])
            } else {
                pool[p]
            };
        }
        // What each pool's members could use beyond what they keep, the rest of the tree idle.
        let root_room: i64 = top.iter().map(|&i| lend[i]).sum();
        let (mut room, mut borrow) = (vec![0; n], vec![None; n]);
        for &i in &order {
            let above = parent[i].map_or(root_room, |p| room[p]);
            let others = (above - lend[i]).max(0);
            borrow[i] =
                (self.queues[i].capability).map(|c| (i64::from(c) - owed[i]).clamp(0, others));
            room[i] = borrow[i]
                .map_or(i64::MAX, |b| pool[i].saturating_add(b))
                .min(pool[i] - lend[i] + above);
        }
        let leaves = has_children.iter().filter(|c| !**c).count();
        let tree = has_children.iter().any(|c| *c) && (leaves > 1 || own.iter().any(|o| *o > 0));
        Shares {
            has_children,
            owed,
            lendable,
            own,
            borrow,
            tree,
        }
    }

    /// Divides `pool` GPUs among `members` (siblings): each is owed its `deserved` (else its
    /// guarantee), and those without `deserved` a weighted share of the rest, filled up to
    /// their capabilities in rounds and rounded by largest remainder.
    fn divide(&self, members: &[usize], pool: i64, owed: &mut [i64]) {
        let mut open: Vec<usize> = (members.iter().copied())
            .filter(|&i| self.queues[i].deserved.is_none())
            .collect();
        let cap = |i: usize| self.queues[i].capability.map_or(i64::MAX, i64::from);
        loop {
            let pool = pool - members.iter().map(|&i| owed[i]).sum::<i64>();
            let weights: i64 = open.iter().map(|&i| i64::from(self.queues[i].weight)).sum();
            if pool <= 0 || weights == 0 {
                return;
            }
            let mut shares: Vec<(usize, i64, i64)> = open
                .iter()
                .map(|&i| {
                    let w = i64::from(self.queues[i].weight);
                    (i, pool * w / weights, pool * w % weights)
                })
                .collect();
            let mut left = pool - shares.iter().map(|s| s.1).sum::<i64>();
            shares.sort_by_key(|&(i, _, rem)| (std::cmp::Reverse(rem), i));
            for s in &mut shares {
                if left > 0 {
                    s.1 += 1;
                    left -= 1;
                }
            }
            let capped: Vec<usize> = shares
                .iter()
                .filter(|&&(i, share, _)| owed[i] + share >= cap(i))
                .map(|s| s.0)
                .collect();
            if capped.is_empty() {
                for (i, share, _) in shares {
                    owed[i] += share;
                }
                return;
            }
            // Queues that reach their capability take it and leave the rest to the others.
            for i in capped {
                owed[i] = owed[i].max(cap(i));
                open.retain(|&o| o != i);
            }
        }
    }
}

/// Each queue's GPUs in the tree ([`VolcanoQueues::shares`]), by its index.
struct Shares {
    /// Whether some queue names it as its parent (then it is a cohort, not a queue).
    has_children: Vec<bool>,
    /// GPUs it is owed (a parent queue: its whole subtree).
    owed: Vec<i64>,
    /// Of those, what it lends: all but its guarantee.
    lendable: Vec<i64>,
    /// A parent queue's GPUs of its own: what it is owed beyond its children.
    own: Vec<i64>,
    /// The most it (a parent queue: its subtree) may borrow, from its capability.
    borrow: Vec<Option<i64>>,
    /// Whether the queues are replayed as a cohort tree.
    tree: bool,
}

/// A GPU count as a quota field holds it.
fn clamp(n: i64) -> i32 {
    n.clamp(0, i64::from(i32::MAX)) as i32
}

/// Reads every Volcano `Queue` in `text` (YAML documents, JSON, or a `List`), with the
/// scheduler's ConfigMap when the file has it (its `preempt` and `reclaim` actions turn
/// preemption on); `source_name` labels errors. Other objects are skipped and said so.
pub fn read_volcano_queues(text: &str, source_name: &str) -> Result<VolcanoQueues, SpecError> {
    volcano_queues_of(kubernetes_objects(text, source_name)?, source_name)
}

/// [`read_volcano_queues`] of a file's objects already read.
pub(crate) fn volcano_queues_of(
    objects: Vec<Object>,
    source_name: &str,
) -> Result<VolcanoQueues, SpecError> {
    let mut queues: Vec<VolcanoQueue> = Vec::new();
    // Where each queue read is, for errors about the tree; and every Queue's name.
    let (mut ats, mut named) = (Vec::new(), BTreeSet::new());
    let mut notes = Vec::new();
    let mut unreclaimable = Vec::new();
    let mut config_maps = Vec::new();
    let mut skipped = BTreeMap::<String, usize>::new();
    let mut problems = Vec::new();
    for object in objects {
        let (kind, api) = (object.kind.as_str(), object.api_version.as_str());
        if kind == "ConfigMap" && api == "v1" {
            config_maps.push((object.label(), object.body));
            continue;
        }
        if kind != "Queue" || !api.starts_with(&format!("{VOLCANO_GROUP}/")) {
            *skipped.entry(format!("{kind} ({api})")).or_default() += 1;
            continue;
        }
        let (name, at, obj) = (object.name(), object.label(), &object.body);
        let mut problem = |field: &str, message: String| {
            problems.push(FieldError::new(format!("{at}: {field}"), message));
        };
        if api != format!("{VOLCANO_GROUP}/v1beta1") {
            problem(
                "apiVersion",
                format!("{api} is not read; write {VOLCANO_GROUP}/v1beta1"),
            );
            continue;
        }
        if name.is_empty() {
            problem("metadata.name", "is required".into());
            continue;
        }
        named.insert(name.to_owned());
        let is_root = name == VOLCANO_ROOT;
        let empty = Map::new();
        let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
        if spec.get("reclaimable") == Some(&Value::Bool(false)) && !is_root {
            unreclaimable.push(at.clone());
        }
        let before = problems.len();
        let mut queue_notes = Vec::new();
        match read_queue(&at, name, spec, &mut queue_notes) {
            // The root queue is the top of the tree: Volcano runs no job in it, and makes
            // its deserved and guarantee its children's.
            Ok(q) if is_root => {
                if let Some(parent) = &q.parent {
                    problems.push(FieldError::new(
                        format!("{at}: spec.parent"),
                        format!(
                            "the root queue is the top of the tree and has no parent (got \
                             `{parent}`); remove spec.parent"
                        ),
                    ));
                }
                if q.capability.is_some() {
                    notes.push(format!(
                        "{at}: spec.capability (the replayed cluster's GPUs bound the tree)"
                    ));
                }
            }
            Ok(q) if problems.len() == before => {
                notes.append(&mut queue_notes);
                queues.push(q);
                ats.push(at);
            }
            Ok(_) => {}
            Err(mut found) => problems.append(&mut found),
        }
    }
    problems.extend(queue_tree_problems(&queues, &ats, &named));
    let conf = scheduler_conf(config_maps, &mut skipped, &mut problems);
    let preemption =
        (conf.as_ref()).map_or(SchedulerConf::default().preemption(), |c| c.preemption());
    if conf.is_none() {
        notes.insert(
            0,
            "preemption and reclaim (volcano-scheduler.conf actions, off by default) are \
             replayed off: no queue preempts"
                .to_owned(),
        );
    }
    let reclaim = preemption.reclaim_within_cohort != ReclaimWithinCohort::Never;
    notes.extend(unreclaimable.iter().map(|at| {
        if reclaim {
            format!(
                "{at}: spec.reclaimable false (reclaim takes back what it uses beyond its \
                 deserved GPUs, as from any queue: Ferry cannot exempt one borrower)"
            )
        } else {
            format!("{at}: spec.reclaimable false (moot: reclaim is off, nothing is taken back)")
        }
    }));
    if queues.iter().any(|q| q.parent.is_some()) && conf.as_ref().is_some_and(|c| !c.hierarchy) {
        notes.push(format!(
            "volcano-scheduler.conf leaves queue trees off (no `capacity` plugin with \
             `{ENABLE_HIERARCHY}: true`), so Volcano would share the Queues as one level; the \
             replay follows their spec.parent tree"
        ));
    }
    notes.extend(conf.as_ref().and_then(SchedulerConf::not_replayed));
    let replayed = conf.iter().map(SchedulerConf::replayed).collect();
    finish(
        source_name,
        problems,
        !queues.is_empty(),
        &if named.contains(VOLCANO_ROOT) {
            format!(
                "only the root queue found (Volcano runs no job in it); the file needs at least \
                 one other {VOLCANO_GROUP} Queue"
            )
        } else {
            format!("no {VOLCANO_GROUP} Queue found; the file needs at least one")
        },
        skipped,
        &mut notes,
    )?;
    Ok(VolcanoQueues {
        queues,
        preemption,
        replayed,
        not_modelled: notes,
    })
}

/// What `volcano-scheduler.conf` says, as far as Ferry reads it.
#[derive(Debug, Default)]
struct SchedulerConf {
    /// Its `actions`, split at the commas, each one Volcano knows.
    actions: Vec<String>,
    /// The plugins of its tiers, each once, in order.
    plugins: Vec<String>,
    /// The plugins' options (`gang.enablePreemptable`), each once, in order.
    options: Vec<String>,
    /// Whether its `capacity` plugin has queue trees on (`enableHierarchy: true`).
    hierarchy: bool,
}

impl SchedulerConf {
    /// Whether it runs any of `actions`.
    fn runs(&self, actions: &[&str]) -> bool {
        self.actions.iter().any(|a| actions.contains(&a.as_str()))
    }

    /// Every queue's preemption: [`PREEMPT`] lets a job preempt lower-priority jobs of its own
    /// queue, [`RECLAIM`] lets a queue below its deserved GPUs take back what others use beyond
    /// theirs.
    fn preemption(&self) -> Preemption {
        Preemption {
            within_queue: if self.runs(&PREEMPT) {
                WithinQueue::LowerPriority
            } else {
                WithinQueue::Never
            },
            reclaim_within_cohort: if self.runs(&RECLAIM) {
                ReclaimWithinCohort::Any
            } else {
                ReclaimWithinCohort::Never
            },
            // Volcano's reclaim never preempts for a queue going above its deserved GPUs.
            ..Preemption::default()
        }
    }

    /// The line saying what its actions make the replay do.
    fn replayed(&self) -> String {
        let on_off = |on: bool| if on { "on" } else { "off" };
        let always: Vec<&str> = ALWAYS.into_iter().filter(|a| self.runs(&[a])).collect();
        let always = match always[..] {
            [] => String::new(),
            [one] => format!("; {one} is what Ferry always does"),
            _ => format!("; {} are what Ferry always does", and_list(&always)),
        };
        format!(
            "volcano-scheduler.conf actions \"{}\": preempt {} (a job preempts lower-priority \
             jobs of its own queue), reclaim {} (a queue below its deserved GPUs takes back what \
             others use beyond theirs), for every queue{always}",
            self.actions.join(", "),
            on_off(self.runs(&PREEMPT)),
            on_off(self.runs(&RECLAIM)),
        )
    }

    /// The line listing what else it says, none of it replayed: the plugins Ferry has its own
    /// way for, and the plugins, options and actions it does not model.
    fn not_replayed(&self) -> Option<String> {
        let own_way = |plugin: &str| match plugin {
            "priority" => Some("Ferry orders and preempts by the trace's priority classes"),
            "gang" => Some("Ferry always admits gangs whole"),
            "proportion" => Some("the deserved and weight shares read from the Queues"),
            "capacity" => Some("the deserved, capability and guarantee read from the Queues"),
            _ => None,
        };
        let mut parts = Vec::new();
        let owned: Vec<String> = (self.plugins.iter())
            .filter_map(|p| own_way(p).map(|why| format!("{p} ({why})")))
            .collect();
        if !owned.is_empty() {
            parts.push(format!("plugins {}", owned.join(", ")));
        }
        let not_modelled = |what: &str, names: Vec<&str>| {
            (!names.is_empty()).then(|| format!("{what} {} not modelled", names.join(", ")))
        };
        let plugins = (self.plugins.iter().map(String::as_str))
            .filter(|p| own_way(p).is_none())
            .collect();
        // The tree read from the Queues is what `capacity.enableHierarchy` turns on.
        let options = (self.options.iter().map(String::as_str))
            .filter(|o| *o != format!("capacity.{ENABLE_HIERARCHY}"))
            .collect();
        let replayed = [&ALWAYS[..], &PREEMPT, &RECLAIM].concat();
        let mut actions = Vec::new();
        for action in self.actions.iter().map(String::as_str) {
            if !replayed.contains(&action) && !actions.contains(&action) {
                actions.push(action);
            }
        }
        parts.extend(not_modelled("plugins", plugins));
        parts.extend(not_modelled("plugin options", options));
        parts.extend(not_modelled("actions", actions));
        (!parts.is_empty()).then(|| format!("volcano-scheduler.conf: {}", parts.join("; ")))
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The scheduler's configuration among the file's `v1` ConfigMaps (labels and objects): the
/// one with a `volcano-scheduler.conf` key, read, other ConfigMaps skipped beside it; when none
/// has the key each is refused (the wrong ConfigMap was exported), and so is a second one
/// with it.
fn scheduler_conf(
    config_maps: Vec<(String, Value)>,
    skipped: &mut BTreeMap<String, usize>,
    problems: &mut Vec<FieldError>,
) -> Option<SchedulerConf> {
    let conf_of = |body: &Value| {
        body.get("data")
            .and_then(|d| d.get(SCHEDULER_CONF))
            .cloned()
    };
    let (with, without): (Vec<_>, Vec<_>) = config_maps
        .into_iter()
        .partition(|(_, body)| conf_of(body).is_some());
    let Some((first, body)) = with.first() else {
        for (at, body) in without {
            let keys = (body.get("data").and_then(Value::as_object))
                .map(|data| data.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>())
                .filter(|keys| !keys.is_empty())
                .map_or("none".to_owned(), |keys| keys.join(", "));
            problems.push(FieldError::new(
                format!("{at}: data"),
                format!(
                    "has no `{SCHEDULER_CONF}` key (its keys: {keys}); fix: export the \
                     scheduler's own ConfigMap with `kubectl get configmap \
                     volcano-scheduler-configmap -n volcano-system -o yaml`"
                ),
            ));
        }
        return None;
    };
    if !without.is_empty() {
        *skipped.entry("ConfigMap (v1)".into()).or_default() += without.len();
    }
    for (at, _) in &with[1..] {
        problems.push(FieldError::new(
            at.clone(),
            format!(
                "a second ConfigMap with `{SCHEDULER_CONF}` (the first is {first}); fix: keep \
                 only the one the scheduler reads"
            ),
        ));
    }
    match read_conf(first, &conf_of(body).unwrap_or_default()) {
        Ok(conf) if with.len() == 1 => Some(conf),
        Ok(_) => None,
        Err(mut found) => {
            problems.append(&mut found);
            None
        }
    }
}

/// `volcano-scheduler.conf`'s text (untrusted: read by the parser and within the budgets of
/// every file); `Err` lists every problem.
fn read_conf(at: &str, conf: &Value) -> Result<SchedulerConf, Vec<FieldError>> {
    let path = |field: &str| format!("{at}: data[{SCHEDULER_CONF}]{field}");
    let refused = |field: &str, message: String| vec![FieldError::new(path(field), message)];
    let Some(text) = conf.as_str() else {
        return Err(refused(
            "",
            format!("must be the configuration's text, a string (got {conf})"),
        ));
    };
    let docs: Vec<Value> = documents(text, SCHEDULER_CONF)
        .map_err(|e| {
            let why = match e {
                SpecError::Syntax {
                    format, message, ..
                } => format!(
                    "not valid {format}: {}",
                    message.trim_start_matches("error: ")
                ),
                other => other.to_string(),
            };
            refused(
                "",
                format!("{why}; fix: correct it, or export the ConfigMap again"),
            )
        })?
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let conf = match &docs[..] {
        [Value::Object(conf)] => conf,
        [] => return Err(refused("", "is empty; it needs `actions`".into())),
        [other] => {
            return Err(refused(
                "",
                format!("must be a mapping with `actions` and `tiers` (got {other})"),
            ));
        }
        _ => {
            return Err(refused(
                "",
                format!(
                    "holds {} YAML documents; keep the one the scheduler reads",
                    docs.len()
                ),
            ));
        }
    };
    let mut problems = Vec::new();
    let mut problem = |field: &str, message: String| {
        problems.push(FieldError::new(path(field), message));
    };
    let mut read = SchedulerConf::default();
    match conf.get("actions") {
        Some(Value::String(actions)) => {
            for action in actions.split(',').map(str::trim) {
                if VOLCANO_ACTIONS.contains(&action) {
                    read.actions.push(action.to_owned());
                } else if action.is_empty() {
                    problem(
                        ".actions",
                        "has an empty action between commas; remove the extra comma".into(),
                    );
                } else {
                    let hint = closest(action, VOLCANO_ACTIONS)
                        .map(|best| format!("did you mean `{best}`?"))
                        .unwrap_or_else(|| format!("Volcano's: {}", VOLCANO_ACTIONS.join(", ")));
                    problem(
                        ".actions",
                        format!("`{action}` is not a Volcano action; {hint}"),
                    );
                }
            }
        }
        None | Some(Value::Null) => problem(
            ".actions",
            "is required: the actions the scheduler runs, comma-separated, such as \
             \"enqueue, allocate, backfill\""
                .into(),
        ),
        Some(other) => problem(
            ".actions",
            format!(
                "must be one string of comma-separated actions, such as \"enqueue, allocate, \
                 preempt, reclaim, backfill\" (got {other})"
            ),
        ),
    }
    let no_tiers = Vec::new();
    let tiers = match conf.get("tiers") {
        None | Some(Value::Null) => &no_tiers,
        Some(Value::Array(tiers)) => tiers,
        Some(other) => {
            problem(
                ".tiers",
                format!("must be a list of tiers, each with `plugins` (got {other})"),
            );
            &no_tiers
        }
    };
    for (i, tier) in tiers.iter().enumerate() {
        let plugins = match tier.get("plugins") {
            None | Some(Value::Null) => continue,
            Some(Value::Array(plugins)) => plugins,
            Some(other) => {
                problem(
                    &format!(".tiers[{i}].plugins"),
                    format!("must be a list of plugins, each `{{name: ...}}` (got {other})"),
                );
                continue;
            }
        };
        for (j, plugin) in plugins.iter().enumerate() {
            let Some(name) = plugin.get("name").and_then(Value::as_str) else {
                problem(
                    &format!(".tiers[{i}].plugins[{j}].name"),
                    "is required: the plugin's name, such as `gang`".into(),
                );
                continue;
            };
            if !read.plugins.iter().any(|p| p == name) {
                read.plugins.push(name.to_owned());
            }
            read.hierarchy |=
                name == "capacity" && plugin.get(ENABLE_HIERARCHY) == Some(&Value::Bool(true));
            let options = (plugin.as_object().into_iter().flat_map(|p| p.keys()))
                .filter(|key| *key != "name")
                .map(|key| format!("{name}.{key}"));
            for option in options {
                if !read.options.contains(&option) {
                    read.options.push(option);
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(read)
    } else {
        Err(problems)
    }
}

/// One Queue's spec; `Err` lists every problem.
fn read_queue(
    at: &str,
    name: &str,
    spec: &Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<VolcanoQueue, Vec<FieldError>> {
    let mut problems = unknown_fields(
        &format!("{at}: spec."),
        spec.keys(),
        &VOLCANO_QUEUE_FIELDS,
        "a Volcano Queue field",
    );
    let mut problem = |field: &str, message: String| {
        problems.push(FieldError::new(format!("{at}: spec.{field}"), message));
    };
    for field in NOT_MODELLED {
        if spec.get(field).is_some_and(|v| !v.is_null()) {
            notes.push(format!("{at}: spec.{field}"));
        }
    }
    // Unset, empty or `root`: directly under the root queue.
    let parent = match spec.get("parent") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if p.is_empty() || p == VOLCANO_ROOT => None,
        Some(Value::String(p)) => Some(p.clone()),
        Some(other) => {
            problem(
                "parent",
                format!(
                    "must be its parent queue's name, or root (got {other}); quote a name YAML \
                     reads as a number or a boolean"
                ),
            );
            None
        }
    };
    let mut gpus = |field: &str, list: Option<&Value>| -> Option<i32> {
        let list = list?.as_object()?;
        let (resource, v) = list.iter().find(|(r, _)| r.ends_with("/gpu"))?;
        let n = whole_gpus(v);
        if n.is_none() {
            problem(
                &format!("{field}[{resource}]"),
                format!("must be a whole number of GPUs, 0 or more, such as \"8\" (got {v})"),
            );
        }
        n
    };
    let deserved = gpus("deserved", spec.get("deserved"));
    let capability = gpus("capability", spec.get("capability"));
    let guarantee = gpus(
        "guarantee.resource",
        spec.get("guarantee").and_then(|g| g.get("resource")),
    );
    let nominal = deserved.or(guarantee).unwrap_or(0);
    if let Some(g) = guarantee.filter(|g| deserved.is_some_and(|d| *g > d)) {
        problem(
            "guarantee.resource",
            format!("{g} GPUs guaranteed, more than the {nominal} deserved; lower it"),
        );
    }
    if let Some(c) = capability.filter(|c| *c < nominal) {
        problem(
            "capability",
            format!("{c} GPUs, fewer than the {nominal} deserved or guaranteed; raise it"),
        );
    }
    let weight = match spec.get("weight") {
        None | Some(Value::Null) => 1,
        Some(w) => match w.as_u64().filter(|w| (1..=65_535).contains(w)) {
            Some(w) => w as u32,
            None => {
                problem(
                    "weight",
                    format!("must be a whole number from 1 to 65535 (got {w})"),
                );
                1
            }
        },
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(VolcanoQueue {
        name: name.to_owned(),
        parent,
        deserved,
        capability,
        guarantee,
        weight,
    })
}

/// Problems of the Queues' tree, as Volcano's admission webhook and its capacity plugin refuse
/// them (`ats` says where each queue is, `named` every Queue of the file, read or not): a queue
/// defined twice, a parent no Queue defines, a queue its own ancestor, a parent deserving or
/// guaranteeing less than its children together, and a capability above an ancestor's.
fn queue_tree_problems(
    queues: &[VolcanoQueue],
    ats: &[String],
    named: &BTreeSet<String>,
) -> Vec<FieldError> {
    let nodes: Vec<TreeNode> = (queues.iter().zip(ats))
        .map(|(q, at)| (q.name.as_str(), at.as_str(), q.parent.as_deref()))
        .collect();
    let mut problems = tree_problems(
        &nodes,
        "Queue",
        "spec.parent",
        "Volcano's capacity plugin schedules nothing while the tree has a loop; fix: remove or \
         change one spec.parent in the loop",
    );
    for (q, at) in queues.iter().zip(ats) {
        if let Some(p) = q.parent.as_ref().filter(|p| !named.contains(*p)) {
            problems.push(FieldError::new(
                format!("{at}: spec.parent"),
                format!(
                    "names queue `{p}`, which no Queue of the file defines (Volcano refuses a \
                     queue whose parent does not exist); fix: add Queue `{p}`, correct the name, \
                     or write root"
                ),
            ));
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    let by_name: BTreeMap<&str, &VolcanoQueue> =
        queues.iter().map(|q| (q.name.as_str(), q)).collect();
    for (p, at) in queues.iter().zip(ats) {
        let children: Vec<&VolcanoQueue> = (queues.iter())
            .filter(|c| c.parent.as_ref() == Some(&p.name))
            .collect();
        if children.is_empty() {
            continue;
        }
        let each = |gpus: &dyn Fn(&VolcanoQueue) -> i64| -> (i64, String) {
            let listed: Vec<String> = (children.iter())
                .filter(|c| gpus(c) > 0)
                .map(|c| format!("{} {}", c.name, gpus(c)))
                .collect();
            (children.iter().map(|c| gpus(c)).sum(), listed.join(" + "))
        };
        // What a queue deserves is its `deserved`, else its guarantee, as for its nominal quota.
        let (deserve, listed) = each(&VolcanoQueue::fixed);
        if deserve > p.fixed() {
            let mine = match (p.deserved, p.guarantee) {
                (Some(d), _) => format!("{d} GPUs, fewer than"),
                (None, Some(g)) => format!("is unset and its guarantee ({g} GPUs) is less than"),
                (None, None) => "is unset, less than".to_owned(),
            };
            problems.push(FieldError::new(
                format!("{at}: spec.deserved"),
                format!(
                    "{mine} what its child queues deserve together ({listed} = {deserve}), \
                     which Volcano's webhook refuses; fix: raise it to at least {deserve} GPUs, \
                     or lower theirs"
                ),
            ));
        }
        let (guaranteed, listed) = each(&|c| i64::from(c.guarantee.unwrap_or(0)));
        if guaranteed > i64::from(p.guarantee.unwrap_or(0)) {
            let mine = p.guarantee.map_or("is unset, less than".to_owned(), |g| {
                format!("{g} GPUs, fewer than")
            });
            problems.push(FieldError::new(
                format!("{at}: spec.guarantee.resource"),
                format!(
                    "{mine} what its child queues are guaranteed together ({listed} = \
                     {guaranteed}), which Volcano's webhook refuses; fix: raise it to at least \
                     {guaranteed} GPUs, or lower theirs"
                ),
            ));
        }
    }
    for (q, at) in queues.iter().zip(ats) {
        let Some(cap) = q.capability else { continue };
        // The nearest ancestor with a capability (the walk is bounded: loops are refused above).
        let mut up = q.parent.as_deref();
        for _ in 0..queues.len() {
            let Some(a) = up.and_then(|a| by_name.get(a)) else {
                break;
            };
            if let Some(limit) = a.capability {
                if cap > limit {
                    problems.push(FieldError::new(
                        format!("{at}: spec.capability"),
                        format!(
                            "{cap} GPUs, more than its ancestor queue `{}` may hold ({limit}); \
                             Volcano's webhook refuses it; fix: lower it to at most {limit}",
                            a.name
                        ),
                    ));
                }
                break;
            }
            up = a.parent.as_deref();
        }
    }
    problems
}

#[cfg(test)]
mod tests;

//! Volcano's `Queue` objects (`scheduling.volcano.sh/v1beta1`) read as Ferry queue specs, so a
//! platform team on Volcano can replay its queues (`ferry sim --queues`). Volcano lets every
//! queue use idle GPUs up to its `capability`, which is one cohort shared by all; `deserved`
//! is what a queue is owed (its nominal quota), `guarantee` what is kept for it and never lent,
//! and `weight` splits what no `deserved` covers, as Ferry's entitlements do. Preemption and
//! reclaim are actions of the scheduler's configuration (`volcano-scheduler.conf`, in the
//! `volcano-scheduler-configmap` ConfigMap), not of a queue: off, as in Volcano's default
//! configuration, unless that ConfigMap is in the file and turns them on, for every queue.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{FieldError, SpecError};
use crate::foreign::{finish, kubernetes_objects, unknown_fields};
use crate::parse::documents;
use crate::quantity::whole_gpus;
use crate::queue::{FlavorQuota, Preemption, QueueSpec, ReclaimWithinCohort, WithinQueue};
use crate::schema::closest;

/// Volcano's API group, the prefix of the `apiVersion` of the queues this reader takes.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// The cohort all Volcano queues share: the cluster's idle GPUs are any queue's to use.
pub const VOLCANO_COHORT: &str = "volcano";

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
    /// Each queue, in file order.
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

/// One Volcano Queue's GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct VolcanoQueue {
    /// Its name, what a job's `queue` names.
    pub name: String,
    /// GPUs it is owed (`spec.deserved`); unset, the proportion plugin's weighted share.
    pub deserved: Option<i32>,
    /// The most GPUs it may hold (`spec.capability`).
    pub capability: Option<i32>,
    /// GPUs kept for it and never lent (`spec.guarantee.resource`).
    pub guarantee: Option<i32>,
    /// Its share of what no `deserved` covers (`spec.weight`, 1 to 65535).
    pub weight: u32,
}

impl VolcanoQueues {
    /// The queues as Ferry queue specs on a cluster of `cluster_gpus` GPUs, all in the cohort
    /// [`VOLCANO_COHORT`] (a lone queue in none): a queue without `deserved` is owed its
    /// weight's share of the GPUs no `deserved` covers (up to its capability, the rest going to
    /// the others, as Volcano's proportion plugin divides them), may borrow up to its
    /// capability (no more than the others can lend), lends all but its guarantee, and
    /// preempts as [`Self::preemption`] says.
    pub fn queue_specs(&self, cluster_gpus: u32) -> Vec<(String, QueueSpec)> {
        let nominal = self.owed(i64::from(cluster_gpus));
        let lendable: Vec<i64> = self
            .queues
            .iter()
            .zip(&nominal)
            .map(|(q, n)| n - i64::from(q.guarantee.unwrap_or(0)).min(*n))
            .collect();
        let all_lendable: i64 = lendable.iter().sum();
        self.queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let n = nominal[i];
                let others = all_lendable - lendable[i];
                let spec = QueueSpec {
                    // A cohort of one is no cohort: there is no one to borrow from.
                    cohort: (self.queues.len() > 1).then(|| VOLCANO_COHORT.to_owned()),
                    quotas: vec![FlavorQuota {
                        flavor: "any".into(),
                        nominal: clamp(n),
                        borrowing_limit: q
                            .capability
                            .map(|c| clamp((i64::from(c) - n).clamp(0, others))),
                        lending_limit: q.guarantee.map(|_| clamp(lendable[i])),
                    }],
                    weight: f64::from(q.weight),
                    stop_policy: Default::default(),
                    preemption: self.preemption,
                };
                (q.name.clone(), spec)
            })
            .collect()
    }

    /// Each queue's owed GPUs: its `deserved` (else its guarantee), and for the queues without
    /// `deserved` a weighted share of the rest, filled up to their capabilities in rounds and
    /// rounded by largest remainder.
    fn owed(&self, cluster: i64) -> Vec<i64> {
        let mut owed: Vec<i64> = self
            .queues
            .iter()
            .map(|q| i64::from(q.deserved.or(q.guarantee).unwrap_or(0)))
            .collect();
        let mut open: Vec<usize> = (0..self.queues.len())
            .filter(|&i| self.queues[i].deserved.is_none())
            .collect();
        let cap = |i: usize| self.queues[i].capability.map_or(i64::MAX, i64::from);
        loop {
            let pool = cluster - owed.iter().sum::<i64>();
            let weights: i64 = open.iter().map(|&i| i64::from(self.queues[i].weight)).sum();
            if pool <= 0 || weights == 0 {
                return owed;
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
                return owed;
            }
            // Queues that reach their capability take it and leave the rest to the others.
            for i in capped {
                owed[i] = owed[i].max(cap(i));
                open.retain(|&o| o != i);
            }
        }
    }
}

/// A GPU count as a quota field holds it.
fn clamp(n: i64) -> i32 {
    n.clamp(0, i64::from(i32::MAX)) as i32
}

/// Reads every Volcano `Queue` in `text` (YAML documents, JSON, or a `List`), with the
/// scheduler's ConfigMap when the file has it (its `preempt` and `reclaim` actions turn
/// preemption on); `source_name` labels errors. Other objects are skipped and said so.
pub fn read_volcano_queues(text: &str, source_name: &str) -> Result<VolcanoQueues, SpecError> {
    let mut queues: Vec<VolcanoQueue> = Vec::new();
    let mut notes = Vec::new();
    let mut unreclaimable = Vec::new();
    let mut config_maps = Vec::new();
    let mut skipped = BTreeMap::<String, usize>::new();
    let mut problems = Vec::new();
    for object in kubernetes_objects(text, source_name)? {
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
        let empty = Map::new();
        let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
        if spec.get("reclaimable") == Some(&Value::Bool(false)) {
            unreclaimable.push(at.clone());
        }
        let before = problems.len();
        match read_queue(&at, name, spec, &mut notes) {
            Ok(q) if problems.len() == before => queues.push(q),
            Ok(_) => {}
            Err(mut found) => problems.append(&mut found),
        }
    }
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
    notes.extend(conf.as_ref().and_then(SchedulerConf::not_replayed));
    let replayed = conf.iter().map(SchedulerConf::replayed).collect();
    finish(
        source_name,
        problems,
        !queues.is_empty(),
        &format!("no {VOLCANO_GROUP} Queue found; the file needs at least one"),
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
        let options = self.options.iter().map(String::as_str).collect();
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
    // Volcano's hierarchical queues are not modelled: a parent other than `root` is refused,
    // never dropped (the replay would share GPUs the tree keeps apart).
    match spec.get("parent") {
        None | Some(Value::Null) => {}
        Some(Value::String(parent)) if parent == "root" => {}
        Some(Value::String(parent)) => problem(
            "parent",
            format!(
                "queue trees are not modelled (parent `{parent}`); replay the leaf queues \
                 under root"
            ),
        ),
        Some(other) => problem(
            "parent",
            format!(
                "must be a queue's name (got {other}); queue trees are not modelled, so only \
                 `root` is read: remove it or write root"
            ),
        ),
    }
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
        deserved,
        capability,
        guarantee,
        weight,
    })
}

#[cfg(test)]
mod tests;

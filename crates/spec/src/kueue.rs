//! Kueue's own queue objects (`ClusterQueue`, `LocalQueue`, `Cohort`, `ResourceFlavor`, in
//! `kueue.x-k8s.io/v1beta1` or `v1beta2`, as files or as `kubectl get -o yaml` lists) read as
//! Ferry queue and cohort specs (cohort trees included), so a platform team can replay the
//! quotas it runs today (`ferry sim --queues`) without translating them by hand. Kueue's defaults apply where a field is absent
//! (they differ from Ferry's: Kueue preempts nothing unless told). What Ferry's scheduler does
//! not model is listed for the user, never dropped silently.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::cohort::{CohortQuota, CohortSpec};
use crate::error::{FieldError, SpecError};
use crate::foreign::{Object, TreeNode, finish, kubernetes_objects, tree_problems, unknown_fields};
use crate::quantity::{quantity, whole_gpus};
use crate::queue::{
    BorrowPolicy, BorrowWithinCohort, FlavorQuota, Preemption, QueueSpec, ReclaimWithinCohort,
    WithinQueue,
};

/// Kueue's API group, the prefix of every object's `apiVersion` this reader takes.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";

/// Ferry's flavor that matches every node, what a ResourceFlavor without node labels is.
pub(crate) const ANY_FLAVOR: &str = "any";

/// The `spec` fields of a ClusterQueue in Kueue's v1beta1 and v1beta2 (both served): a
/// field outside them is a typo or a newer Kueue, refused either way.
pub const CLUSTER_QUEUE_FIELDS: [&str; 13] = [
    "admissionChecks",
    "admissionChecksStrategy",
    "admissionScope",
    "cohort",
    "cohortName",
    "concurrentAdmissionPolicy",
    "fairSharing",
    "flavorFungibility",
    "namespaceSelector",
    "preemption",
    "queueingStrategy",
    "resourceGroups",
    "stopPolicy",
];

/// The `spec` fields of a Cohort in Kueue's v1beta1 and v1beta2 (both served): a field outside
/// them is refused, as for a ClusterQueue.
pub(crate) const COHORT_FIELDS: [&str; 3] = ["fairSharing", "parentName", "resourceGroups"];

/// The `spec.fairSharing` fields of a ClusterQueue and of a Cohort in Kueue's v1beta1 and
/// v1beta2: its weight only.
pub(crate) const FAIR_SHARING_FIELDS: [&str; 1] = ["weight"];

/// The ClusterQueue fields that change admission and that Ferry's scheduler does not model;
/// each one set is named in [`KueueQueues::not_modelled`].
const NOT_MODELLED: [&str; 5] = [
    "admissionChecks",
    "admissionChecksStrategy",
    "admissionScope",
    "concurrentAdmissionPolicy",
    "flavorFungibility",
];

/// What a file of Kueue objects says about queues.
#[derive(Debug, Clone, PartialEq)]
pub struct KueueQueues {
    /// Each ClusterQueue by name, in file order, as a Ferry queue spec.
    pub cluster_queues: Vec<(String, QueueSpec)>,
    /// Each Cohort by name, in file order, as a Ferry cohort spec: its parent (`parentName`),
    /// its own GPU quotas with their borrowing and lending limits, and its weight
    /// (`fairSharing.weight`). Cohorts only
    /// ClusterQueues name need none (roots with no GPUs of their own), nor parents no Cohort
    /// defines (Kueue makes such a parent a root too).
    pub cohorts: Vec<(String, CohortSpec)>,
    /// Each LocalQueue: where a team submits, and the ClusterQueue that admits its work.
    pub local_queues: Vec<LocalQueue>,
    /// What was read but is not modelled, one line each, for the user to see beside results.
    pub not_modelled: Vec<String>,
}

/// A Kueue LocalQueue: a namespace's name for a ClusterQueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalQueue {
    /// The namespace (a team, usually) that submits to it.
    pub namespace: String,
    /// Its name, what workloads put in their `kueue.x-k8s.io/queue-name` label.
    pub name: String,
    /// The ClusterQueue that admits its workloads.
    pub cluster_queue: String,
}

impl KueueQueues {
    /// The ClusterQueue a trace team's work goes to: the one named as the team, else the one
    /// behind a LocalQueue named as the team or in a namespace named as it (names compared
    /// ignoring case, since trace teams keep their own spelling). `Err` names the candidates
    /// when LocalQueues disagree.
    pub fn cluster_queue_of(&self, team: &str) -> Result<Option<&str>, String> {
        if let Some((name, _)) = self
            .cluster_queues
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(team))
        {
            return Ok(Some(name));
        }
        let targets: BTreeSet<&str> = self
            .local_queues
            .iter()
            .filter(|l| l.name.eq_ignore_ascii_case(team) || l.namespace.eq_ignore_ascii_case(team))
            .map(|l| l.cluster_queue.as_str())
            .collect();
        match targets.len() {
            0 => Ok(None),
            1 => Ok(targets.into_iter().next()),
            _ => Err(format!(
                "LocalQueues named `{team}` or in namespace `{team}` lead to different \
                 ClusterQueues ({}); rename the trace's team to one ClusterQueue's name",
                targets.into_iter().collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

/// Reads every Kueue queue object in `text` (YAML documents, a JSON object or list, or a
/// Kubernetes `List` of items); `source_name` labels errors. Objects of other API groups and
/// Kueue kinds about something else than quotas are skipped, and said so in `not_modelled`.
pub fn read_kueue_queues(text: &str, source_name: &str) -> Result<KueueQueues, SpecError> {
    kueue_queues_of(kubernetes_objects(text, source_name)?, source_name)
}

/// [`read_kueue_queues`] of a file's objects already read.
pub(crate) fn kueue_queues_of(
    objects: Vec<Object>,
    source_name: &str,
) -> Result<KueueQueues, SpecError> {
    let mut r = Reader::default();
    for object in objects {
        r.object(object);
    }
    r.finish(source_name)
}

/// What has been read so far, and every problem found.
#[derive(Default)]
struct Reader {
    queues: Vec<(String, QueueSpec)>,
    /// Each Cohort with where it is in the file (`Cohort/name`) for errors found at the end.
    cohorts: Vec<(String, String, CohortSpec)>,
    local_queues: Vec<LocalQueue>,
    /// ResourceFlavor name → whether it selects nodes by label (one without labels is every node).
    flavors: BTreeMap<String, bool>,
    not_modelled: Vec<String>,
    skipped: BTreeMap<String, usize>,
    problems: Vec<FieldError>,
}

impl Reader {
    fn problem(&mut self, at: &str, message: impl Into<String>) {
        self.problems.push(FieldError::new(at, message));
    }

    fn object(&mut self, object: Object) {
        let (name, label) = (object.name().to_owned(), object.label());
        let Object {
            at,
            kind,
            api_version: api,
            body,
        } = object;
        let Value::Object(obj) = body else {
            self.problem(
                &at,
                "must be a mapping with apiVersion, kind, metadata and spec",
            );
            return;
        };
        let (kind, api, at) = (kind.as_str(), api.as_str(), label);
        let Some(version) = api.strip_prefix(&format!("{KUEUE_GROUP}/")) else {
            *self.skipped.entry(format!("{kind} ({api})")).or_default() += 1;
            return;
        };
        let known = ["ClusterQueue", "LocalQueue", "Cohort", "ResourceFlavor"];
        if !known.contains(&kind) {
            *self.skipped.entry(kind.to_owned()).or_default() += 1;
            return;
        }
        if !matches!(version, "v1beta1" | "v1beta2") {
            self.problem(
                &format!("{at}: apiVersion"),
                format!("{api} is not read; write {KUEUE_GROUP}/v1beta2 or v1beta1"),
            );
            return;
        }
        if name.is_empty() {
            self.problem(&format!("{at}: metadata.name"), "is required");
            return;
        }
        let empty = Map::new();
        let spec = match obj.get("spec") {
            Some(Value::Object(s)) => s,
            None | Some(Value::Null) => &empty,
            Some(_) => {
                self.problem(&format!("{at}: spec"), "must be a mapping");
                return;
            }
        };
        match kind {
            "ClusterQueue" => {
                if let Some(q) = self.cluster_queue(&at, spec) {
                    self.queues.push((name, q));
                }
            }
            "LocalQueue" => self.local_queue(&at, &name, &obj, spec),
            "Cohort" => self.cohort(&at, &name, spec),
            _ => {
                let labelled = spec
                    .get("nodeLabels")
                    .and_then(Value::as_object)
                    .is_some_and(|l| !l.is_empty());
                for field in ["nodeTaints", "topologyName"] {
                    if spec.get(field).is_some_and(|v| !v.is_null()) {
                        self.not_modelled.push(format!(
                            "{at}: spec.{field} (simulated nodes carry the flavor's name only)"
                        ));
                    }
                }
                self.flavors.insert(name, labelled);
            }
        }
    }

    fn cluster_queue(&mut self, at: &str, spec: &Map<String, Value>) -> Option<QueueSpec> {
        let before = self.problems.len();
        self.problems.extend(unknown_fields(
            &format!("{at}: spec."),
            spec.keys(),
            &CLUSTER_QUEUE_FIELDS,
            "a ClusterQueue field of Kueue v1beta1 or v1beta2",
        ));
        for field in NOT_MODELLED {
            if spec.get(field).is_some_and(|v| !is_empty(v)) {
                self.not_modelled.push(format!("{at}: spec.{field}"));
            }
        }
        if spec.get("queueingStrategy").and_then(Value::as_str) == Some("StrictFIFO") {
            self.not_modelled.push(format!(
                "{at}: spec.queueingStrategy StrictFIFO (ferry's policy orders by priority, then \
                 age, and backfills; the kueue-strict peer is the StrictFIFO replay)"
            ));
        }
        let cohort = match (
            self.name_field(at, spec, "cohort"),
            self.name_field(at, spec, "cohortName"),
        ) {
            (Some(a), Some(b)) if a != b => {
                self.problem(
                    &format!("{at}: spec.cohortName"),
                    format!("names cohort `{b}` but spec.cohort names `{a}`; keep one"),
                );
                None
            }
            (a, b) => a.or(b),
        };
        let quotas = self.resource_groups(at, spec, Owner::ClusterQueue);
        let preemption = self.preemption(at, spec);
        let weight = self.fair_sharing_weight(at, spec);
        let stop_policy = self
            .enum_field(&format!("{at}: spec"), spec, "stopPolicy")
            .unwrap_or_default();
        (self.problems.len() == before).then_some(QueueSpec {
            cohort,
            quotas,
            weight,
            stop_policy,
            preemption,
        })
    }

    /// `spec.fairSharing.weight` of a ClusterQueue or a Cohort, 1 when unset (Kueue's default):
    /// a positive quantity. Kueue's 0 (a share only of what nobody else wants) is refused, as
    /// Ferry gives every queue and cohort some share; a tiny weight is the nearest.
    fn fair_sharing_weight(&mut self, at: &str, spec: &Map<String, Value>) -> f64 {
        let at = format!("{at}: spec.fairSharing");
        let fair = match spec.get("fairSharing") {
            None | Some(Value::Null) => return 1.0,
            Some(Value::Object(f)) => f,
            Some(v) => {
                self.problem(
                    &at,
                    format!("must be a mapping such as {{weight: \"2\"}} (got {v})"),
                );
                return 1.0;
            }
        };
        self.problems.extend(unknown_fields(
            &format!("{at}."),
            fair.keys(),
            &FAIR_SHARING_FIELDS,
            "a fairSharing field of Kueue",
        ));
        match fair.get("weight") {
            None | Some(Value::Null) => 1.0,
            Some(w) => match quantity(w) {
                Some(w) if w > 0.0 && w.is_finite() => w,
                _ => {
                    self.problem(
                        &format!("{at}.weight"),
                        format!(
                            "must be a positive quantity such as \"1\" or \"500m\" (got {w}); \
                             ferry gives every queue and cohort some share, so write e.g. \"10m\" \
                             for almost none"
                        ),
                    );
                    1.0
                }
            },
        }
    }

    /// A string field naming a cohort, if set.
    fn name_field(&mut self, at: &str, spec: &Map<String, Value>, field: &str) -> Option<String> {
        match spec.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(v) => {
                self.problem(
                    &format!("{at}: spec.{field}"),
                    format!(
                        "must be a cohort's name (got {v}); quote a name YAML reads as a \
                         boolean or number, e.g. \"on\""
                    ),
                );
                None
            }
        }
    }

    /// A field holding one of Kueue's enum values (which Ferry's enums spell the same).
    fn enum_field<T: serde::de::DeserializeOwned>(
        &mut self,
        at: &str,
        obj: &Map<String, Value>,
        field: &str,
    ) -> Option<T> {
        let v = obj.get(field).filter(|v| !v.is_null())?;
        match serde_json::from_value(v.clone()) {
            Ok(t) => Some(t),
            Err(e) => {
                self.problem(&format!("{at}.{field}"), format!("{v}: {e}"));
                None
            }
        }
    }

    /// Kueue's preemption, with Kueue's defaults: a queue preempts nothing unless told.
    fn preemption(&mut self, at: &str, spec: &Map<String, Value>) -> Preemption {
        let mut p = Preemption {
            within_queue: WithinQueue::Never,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            borrow_within_cohort: BorrowWithinCohort::default(),
        };
        let Some(Value::Object(pre)) = spec.get("preemption") else {
            return p;
        };
        let at = format!("{at}: spec.preemption");
        if let Some(w) = self.enum_field(&at, pre, "withinClusterQueue") {
            p.within_queue = w;
        }
        if let Some(r) = self.enum_field(&at, pre, "reclaimWithinCohort") {
            p.reclaim_within_cohort = r;
        }
        p.borrow_within_cohort = self.borrow_within_cohort(&at, pre);
        if p.borrow_within_cohort.policy == BorrowPolicy::Never {
            return p;
        }
        // Kueue's CRD rule: borrowing may only preempt where reclaiming may.
        if p.reclaim_within_cohort == ReclaimWithinCohort::Never {
            self.problem(
                &format!("{at}.borrowWithinCohort.policy"),
                "LowerPriority with reclaimWithinCohort Never (Kueue's default) is refused by \
                 Kueue; set reclaimWithinCohort to Any or LowerPriority, or the policy to Never",
            );
        }
        if spec.get("fairSharing").is_some_and(|v| !is_empty(v)) {
            self.not_modelled.push(format!(
                "{at}.borrowWithinCohort beside spec.fairSharing (Kueue allows borrowWithinCohort \
                 only with classical preemption, not with fair sharing enabled; Ferry's fair \
                 sharing always runs, and it applies borrowWithinCohort as well)"
            ));
        }
        p
    }

    /// `borrowWithinCohort: {policy, maxPriorityThreshold}` as Kueue's v1beta1 and v1beta2
    /// spell it; a threshold under `policy: Never` does nothing in Kueue and is dropped.
    fn borrow_within_cohort(&mut self, at: &str, pre: &Map<String, Value>) -> BorrowWithinCohort {
        let at = format!("{at}.borrowWithinCohort");
        let b = match pre.get("borrowWithinCohort") {
            None | Some(Value::Null) => return BorrowWithinCohort::default(),
            Some(Value::Object(b)) => b,
            Some(v) => {
                self.problem(
                    &at,
                    format!(
                        "must be a mapping such as {{policy: LowerPriority, \
                         maxPriorityThreshold: 100}} (got {v})"
                    ),
                );
                return BorrowWithinCohort::default();
            }
        };
        self.problems.extend(unknown_fields(
            &format!("{at}."),
            b.keys(),
            &["maxPriorityThreshold", "policy"],
            "a borrowWithinCohort field of Kueue",
        ));
        let policy: BorrowPolicy = self.enum_field(&at, b, "policy").unwrap_or_default();
        let threshold = match b.get("maxPriorityThreshold") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let t = v.as_i64().and_then(|t| i32::try_from(t).ok());
                if t.is_none() {
                    self.problem(
                        &format!("{at}.maxPriorityThreshold"),
                        format!(
                            "must be a whole priority value, a 32-bit integer such as 100 \
                             (got {v})"
                        ),
                    );
                }
                t
            }
        };
        BorrowWithinCohort {
            policy,
            max_priority_threshold: threshold.filter(|_| policy == BorrowPolicy::LowerPriority),
        }
    }

    /// The GPU quota of each flavor in `spec.resourceGroups` of a ClusterQueue or a Cohort;
    /// other resources are noted.
    fn resource_groups(
        &mut self,
        at: &str,
        spec: &Map<String, Value>,
        owner: Owner,
    ) -> Vec<FlavorQuota> {
        let mut quotas: Vec<FlavorQuota> = Vec::new();
        let groups = match spec.get("resourceGroups") {
            None | Some(Value::Null) => return quotas,
            Some(Value::Array(g)) => g,
            Some(_) => {
                self.problem(&format!("{at}: spec.resourceGroups"), "must be a list");
                return quotas;
            }
        };
        let mut other = BTreeSet::new();
        for (g, group) in groups.iter().enumerate() {
            let flavors = group
                .get("flavors")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (f, flavor) in flavors.iter().enumerate() {
                let here = format!("{at}: spec.resourceGroups[{g}].flavors[{f}]");
                let Some(fname) = flavor.get("name").and_then(Value::as_str) else {
                    self.problem(
                        &format!("{here}.name"),
                        "is required (a ResourceFlavor's name)",
                    );
                    continue;
                };
                let resources = flavor
                    .get("resources")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                for (r, res) in resources.iter().enumerate() {
                    let rname = res.get("name").and_then(Value::as_str).unwrap_or_default();
                    if !is_gpu(rname) {
                        other.insert(rname.to_owned());
                        continue;
                    }
                    let here = format!("{here}.resources[{r}]");
                    if quotas.iter().any(|q| q.flavor == fname) {
                        self.problem(
                            &here,
                            format!("a second GPU quota of flavor `{fname}`; keep one GPU resource per flavor"),
                        );
                        continue;
                    }
                    let nominal = self.gpus(&here, res, "nominalQuota");
                    let borrowing_limit = self.gpus(&here, res, "borrowingLimit");
                    let lending_limit = self.gpus(&here, res, "lendingLimit");
                    let Some(nominal) = nominal else {
                        if res.get("nominalQuota").is_none() {
                            self.problem(&format!("{here}.nominalQuota"), "is required");
                        }
                        continue;
                    };
                    // A Cohort lends what its subtree's queues lend too: more than its own.
                    if let Some(l) = lending_limit.filter(|l| *l > nominal)
                        && owner == Owner::ClusterQueue
                    {
                        self.problem(
                            &format!("{here}.lendingLimit"),
                            format!("must not exceed nominalQuota ({nominal}) (got {l})"),
                        );
                    }
                    if let Owner::Cohort { has_parent: false } = owner {
                        for (field, limit) in [
                            ("borrowingLimit", borrowing_limit),
                            ("lendingLimit", lending_limit),
                        ] {
                            if limit.is_some() {
                                self.problem(
                                    &format!("{here}.{field}"),
                                    format!(
                                        "is only allowed on a Cohort with spec.parentName (Kueue \
                                         refuses it on a root); set spec.parentName or remove \
                                         {field}"
                                    ),
                                );
                            }
                        }
                    }
                    quotas.push(FlavorQuota {
                        flavor: fname.to_owned(),
                        nominal,
                        borrowing_limit,
                        lending_limit,
                    });
                }
            }
        }
        other.remove("");
        if !other.is_empty() {
            self.not_modelled.push(format!(
                "{at}: quotas of {} (the trace asks for GPUs only)",
                other.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        quotas
    }

    /// A whole number of GPUs at `res.field`, if set.
    fn gpus(&mut self, at: &str, res: &Value, field: &str) -> Option<i32> {
        let v = res.get(field).filter(|v| !v.is_null())?;
        let gpus = whole_gpus(v);
        if gpus.is_none() {
            self.problem(
                &format!("{at}.{field}"),
                format!("must be a whole number of GPUs, 0 or more, such as 8 or \"8\" (got {v})"),
            );
        }
        gpus
    }

    fn local_queue(
        &mut self,
        at: &str,
        name: &str,
        obj: &Map<String, Value>,
        spec: &Map<String, Value>,
    ) {
        let namespace = obj
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let Some(cq) = spec.get("clusterQueue").and_then(Value::as_str) else {
            self.problem(
                &format!("{at}: spec.clusterQueue"),
                "is required (the ClusterQueue it feeds)",
            );
            return;
        };
        for field in ["stopPolicy", "fairSharing"] {
            if spec.get(field).is_some_and(|v| !is_empty(v) && v != "None") {
                self.not_modelled.push(format!(
                    "{at}: spec.{field} (LocalQueues are only names here)"
                ));
            }
        }
        self.local_queues.push(LocalQueue {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            cluster_queue: cq.to_owned(),
        });
    }

    /// A Cohort: its parent (`parentName`), its own GPU quota with the limits on what its
    /// subtree borrows from and lends to that parent, and its fair-sharing weight among its
    /// siblings (read as a ClusterQueue's).
    fn cohort(&mut self, at: &str, name: &str, spec: &Map<String, Value>) {
        let before = self.problems.len();
        self.problems.extend(unknown_fields(
            &format!("{at}: spec."),
            spec.keys(),
            &COHORT_FIELDS,
            "a Cohort field of Kueue v1beta1 or v1beta2",
        ));
        let parent = self.name_field(at, spec, "parentName");
        let weight = self.fair_sharing_weight(at, spec);
        let owner = Owner::Cohort {
            has_parent: parent.is_some(),
        };
        let quotas = self
            .resource_groups(at, spec, owner)
            .into_iter()
            .map(|q| CohortQuota {
                flavor: q.flavor,
                nominal: q.nominal,
                borrowing_limit: q.borrowing_limit,
                lending_limit: q.lending_limit,
            })
            .collect();
        if self.problems.len() == before {
            let spec = CohortSpec {
                parent,
                quotas,
                weight,
            };
            self.cohorts.push((name.to_owned(), at.to_owned(), spec));
        }
    }

    /// Problems of the file's cohort tree: a Cohort defined twice, one that is its own
    /// ancestor (Kueue stops admitting to every queue of such a tree).
    fn cohort_tree_problems(&self) -> Vec<FieldError> {
        let nodes: Vec<TreeNode> = (self.cohorts.iter())
            .map(|(name, at, spec)| (name.as_str(), at.as_str(), spec.parent.as_deref()))
            .collect();
        tree_problems(
            &nodes,
            "Cohort",
            "spec.parentName",
            "Kueue admits nothing to the queues of such a tree; remove or change one parentName \
             in the loop",
        )
    }

    fn finish(mut self, source_name: &str) -> Result<KueueQueues, SpecError> {
        let names: BTreeSet<&str> = self.queues.iter().map(|(n, _)| n.as_str()).collect();
        let mut problems = std::mem::take(&mut self.problems);
        problems.extend(self.cohort_tree_problems());
        if names.len() < self.queues.len() {
            problems.push(FieldError::new(
                "",
                "a ClusterQueue name is given twice; keep one of each",
            ));
        }
        for l in &self.local_queues {
            if !names.contains(l.cluster_queue.as_str()) {
                problems.push(FieldError::new(
                    format!("LocalQueue/{}: spec.clusterQueue", l.name),
                    format!(
                        "ClusterQueue `{}` is not in the file; add it, or fix the name (ClusterQueues: {})",
                        l.cluster_queue,
                        names.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        finish(
            source_name,
            problems,
            !self.queues.is_empty(),
            &format!("no {KUEUE_GROUP} ClusterQueue found; the file needs at least one"),
            std::mem::take(&mut self.skipped),
            &mut self.not_modelled,
        )?;
        // A flavor without node labels admits onto every node: Ferry's `any`.
        let unlabelled = |flavor: &mut String| {
            if self.flavors.get(flavor.as_str()) == Some(&false) {
                *flavor = ANY_FLAVOR.to_owned();
            }
        };
        for (_, q) in &mut self.queues {
            q.quotas.iter_mut().for_each(|f| unlabelled(&mut f.flavor));
        }
        for (_, _, c) in &mut self.cohorts {
            c.quotas.iter_mut().for_each(|f| unlabelled(&mut f.flavor));
        }
        Ok(KueueQueues {
            cohorts: (self.cohorts.into_iter())
                .map(|(name, _, spec)| (name, spec))
                .collect(),
            cluster_queues: self.queues,
            local_queues: self.local_queues,
            not_modelled: self.not_modelled,
        })
    }
}

/// Whose `resourceGroups` are read: a ClusterQueue's, or a Cohort's (which may lend more than
/// its own nominal quota, and may have limits only under a parent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    ClusterQueue,
    Cohort { has_parent: bool },
}

/// A resource Ferry schedules: a device plugin's GPU (`nvidia.com/gpu`, `amd.com/gpu`).
fn is_gpu(resource: &str) -> bool {
    resource.ends_with("/gpu")
}

/// Null, an empty string, list or mapping: a field set to nothing.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;

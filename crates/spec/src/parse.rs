//! From text (YAML or JSON) or a JSON value to typed, validated resources.

use serde::Serialize;
use serde_json::Value;

use crate::cohort::Cohort;
use crate::deployment::ModelDeployment;
use crate::error::{FieldError, SpecError};
use crate::meta::{API_VERSION, ObjectMeta};
use crate::priority_class::PriorityClass;
use crate::queue::Queue;
use crate::schema;
use crate::sweep::Sweep;
use crate::train_job::TrainJob;
use crate::validate::Problems;

/// The kinds of resource Ferry knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A training job.
    TrainJob = 0,
    /// A served model.
    ModelDeployment = 1,
    /// A team queue.
    Queue = 2,
    /// A named priority.
    PriorityClass = 3,
    /// Many training jobs from one template and a grid of parameters.
    Sweep = 4,
    /// A cohort of a cohort tree: GPUs its queues share, a parent it borrows from.
    Cohort = 5,
}

impl ResourceKind {
    /// Every kind.
    pub const ALL: [ResourceKind; 6] = [
        ResourceKind::TrainJob,
        ResourceKind::ModelDeployment,
        ResourceKind::Queue,
        ResourceKind::PriorityClass,
        ResourceKind::Sweep,
        ResourceKind::Cohort,
    ];

    /// The `kind:` value in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::TrainJob => "TrainJob",
            ResourceKind::ModelDeployment => "ModelDeployment",
            ResourceKind::Queue => "Queue",
            ResourceKind::PriorityClass => "PriorityClass",
            ResourceKind::Sweep => "Sweep",
            ResourceKind::Cohort => "Cohort",
        }
    }

    /// The plural the API's routes and `ferry get` use (`jobs`, `deployments`, `queues`,
    /// `priorityclasses`, `sweeps`, `cohorts`).
    pub fn plural(self) -> &'static str {
        match self {
            ResourceKind::TrainJob => "jobs",
            ResourceKind::ModelDeployment => "deployments",
            ResourceKind::Queue => "queues",
            ResourceKind::PriorityClass => "priorityclasses",
            ResourceKind::Sweep => "sweeps",
            ResourceKind::Cohort => "cohorts",
        }
    }

    /// Whether objects of this kind are named across namespaces: a job's `spec.queue` and
    /// `spec.priority`, and a queue's `spec.cohort`, give a name only, as Kueue's
    /// `ClusterQueue` and `Cohort` and Kubernetes' `PriorityClass` are cluster-scoped. A
    /// `ferry up` control plane keeps one object of each name, whatever `metadata.namespace`
    /// says. (`ferry render` still reads a Queue's
    /// namespace as its team's, for the `LocalQueue` and quota it gets there.)
    pub fn is_cluster_scoped(self) -> bool {
        match self {
            ResourceKind::Queue | ResourceKind::PriorityClass | ResourceKind::Cohort => true,
            ResourceKind::TrainJob | ResourceKind::ModelDeployment | ResourceKind::Sweep => false,
        }
    }

    /// Parses a kind name, also accepting the plural and lowercase forms the CLI uses
    /// (`jobs`, `trainjob`, `deployments`, `queues`, `priorityclasses`, `pc`, `sweeps`,
    /// `cohorts`).
    pub fn from_name(name: &str) -> Option<ResourceKind> {
        match name.to_ascii_lowercase().as_str() {
            "trainjob" | "trainjobs" | "job" | "jobs" => Some(ResourceKind::TrainJob),
            "modeldeployment" | "modeldeployments" | "deployment" | "deployments" | "deploy" => {
                Some(ResourceKind::ModelDeployment)
            }
            "queue" | "queues" => Some(ResourceKind::Queue),
            "priorityclass" | "priorityclasses" | "pc" => Some(ResourceKind::PriorityClass),
            "sweep" | "sweeps" => Some(ResourceKind::Sweep),
            "cohort" | "cohorts" => Some(ResourceKind::Cohort),
            _ => None,
        }
    }
}

/// Any Ferry resource.
// Resources are handled a few at a time; boxing the large variant would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Resource {
    /// A training job.
    TrainJob(TrainJob),
    /// A served model.
    ModelDeployment(ModelDeployment),
    /// A team queue.
    Queue(Queue),
    /// A named priority.
    PriorityClass(PriorityClass),
    /// Many training jobs from one template.
    Sweep(Sweep),
    /// A cohort of a cohort tree.
    Cohort(Cohort),
}

impl Resource {
    /// Its kind.
    pub fn kind(&self) -> ResourceKind {
        match self {
            Resource::TrainJob(_) => ResourceKind::TrainJob,
            Resource::ModelDeployment(_) => ResourceKind::ModelDeployment,
            Resource::Queue(_) => ResourceKind::Queue,
            Resource::PriorityClass(_) => ResourceKind::PriorityClass,
            Resource::Sweep(_) => ResourceKind::Sweep,
            Resource::Cohort(_) => ResourceKind::Cohort,
        }
    }

    /// Its metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Resource::TrainJob(r) => &r.metadata,
            Resource::ModelDeployment(r) => &r.metadata,
            Resource::Queue(r) => &r.metadata,
            Resource::PriorityClass(r) => &r.metadata,
            Resource::Sweep(r) => &r.metadata,
            Resource::Cohort(r) => &r.metadata,
        }
    }

    /// Its metadata, mutably (the control plane sets `uid` and `creationTimestamp`).
    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Resource::TrainJob(r) => &mut r.metadata,
            Resource::ModelDeployment(r) => &mut r.metadata,
            Resource::Queue(r) => &mut r.metadata,
            Resource::PriorityClass(r) => &mut r.metadata,
            Resource::Sweep(r) => &mut r.metadata,
            Resource::Cohort(r) => &mut r.metadata,
        }
    }

    /// The resource as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("resources always serialize")
    }
}

/// Parses every document in `text` (YAML with `---` separators, a JSON object, or a
/// JSON list of objects). `source_name` labels errors (usually the file name).
pub fn parse_documents(text: &str, source_name: &str) -> Result<Vec<Resource>, SpecError> {
    let docs: Vec<Value> = documents(text, source_name)?
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    if docs.is_empty() {
        return Err(SpecError::Invalid {
            source_name: source_name.to_owned(),
            problems: vec![FieldError::new(
                "",
                "no resource found; the file is empty (expected apiVersion, kind, metadata, spec)",
            )],
        });
    }
    parse_values(docs, source_name)
}

/// Turns each of `docs` into a validated resource, labelled `SOURCE (document N)` when there
/// are several; every refused document is reported, not only the first.
pub fn parse_values(docs: Vec<Value>, source_name: &str) -> Result<Vec<Resource>, SpecError> {
    let many = docs.len() > 1;
    let (mut resources, mut errors) = (Vec::with_capacity(docs.len()), Vec::new());
    for (i, doc) in docs.into_iter().enumerate() {
        let label = if many {
            format!("{source_name} (document {})", i + 1)
        } else {
            source_name.to_owned()
        };
        match parse_value(doc, &label) {
            Ok(r) => resources.push(r),
            Err(e) => errors.push(e),
        }
    }
    match SpecError::gathered(errors) {
        None => Ok(resources),
        Some(e) => Err(e),
    }
}

/// The documents of `text` as JSON values: YAML with `---` separators, a JSON object, or a
/// JSON list of objects (each item one document).
pub(crate) fn documents(text: &str, source_name: &str) -> Result<Vec<Value>, SpecError> {
    let yaml = || {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| SpecError::Syntax {
            source_name: source_name.to_owned(),
            format: "YAML",
            message: e.to_string().lines().next().unwrap_or_default().to_owned(),
        })
    };
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return yaml();
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(v) => Ok(vec![v]),
        // YAML's flow style (`{kind: Queue, ...}`) starts the same way; text that is
        // neither gets the JSON parser's message, as it was most likely meant as JSON.
        Err(e) => yaml().map_err(|_| SpecError::Syntax {
            source_name: source_name.to_owned(),
            format: "JSON",
            message: e.to_string(),
        }),
    }
}

/// Turns one JSON value into a validated resource, reporting every problem found.
pub fn parse_value(mut doc: Value, source_name: &str) -> Result<Resource, SpecError> {
    let invalid = |problems: Vec<FieldError>| SpecError::Invalid {
        source_name: source_name.to_owned(),
        problems,
    };
    let Some(obj) = doc.as_object_mut() else {
        return Err(invalid(vec![FieldError::new(
            "",
            "must be a mapping with apiVersion, kind, metadata and spec",
        )]));
    };
    let kind_name = match obj.get("kind") {
        Some(Value::String(k)) => k.clone(),
        Some(other) => {
            return Err(invalid(vec![FieldError::new(
                "kind",
                format!("must be a string such as TrainJob (got {other})"),
            )]));
        }
        None => {
            return Err(invalid(vec![FieldError::new(
                "kind",
                "is required; one of TrainJob, ModelDeployment, Queue, PriorityClass, Sweep, Cohort",
            )]));
        }
    };
    let Some(kind) = ResourceKind::ALL
        .into_iter()
        .find(|k| k.as_str() == kind_name)
    else {
        let names = ResourceKind::ALL.map(ResourceKind::as_str);
        let mut msg = format!(
            "unknown kind {kind_name:?}; expected one of {}",
            names.join(", ")
        );
        if let Some(best) = schema::closest(&kind_name, names) {
            msg.push_str(&format!(" (did you mean `{best}`?)"));
        }
        return Err(invalid(vec![FieldError::new("kind", msg)]));
    };
    // Friendly shorthands: `parallelism: auto` means "all fields chosen by the planner" (in a
    // job's spec and a sweep's template); `status` is the control plane's to write, never the
    // user's.
    obj.remove("status");
    let job_spec = match kind {
        ResourceKind::Sweep => "/spec/template/spec",
        _ => "/spec",
    };
    if let Some(spec) = doc.pointer_mut(job_spec).and_then(Value::as_object_mut)
        && spec.get("parallelism") == Some(&Value::String("auto".into()))
    {
        spec.insert("parallelism".into(), Value::Object(Default::default()));
    }

    let mut problems = Problems::default();
    match doc.get("apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(v) => problems.push(
            "apiVersion",
            format!("must be {API_VERSION} (got {v}); update the document's apiVersion"),
        ),
        None => problems.push("apiVersion", format!("is required; use {API_VERSION}")),
    }
    let checked = schema::check(kind, &doc);
    let only_unknown_fields = checked.problems.len() == checked.unknown.len();
    // The checks above said what `apiVersion` must be; the schema's "is required" would say
    // it again.
    let said: Vec<String> = problems.0.iter().map(|p| p.path.clone()).collect();
    problems.0.extend(
        checked
            .problems
            .into_iter()
            .filter(|p| !said.contains(&p.path)),
    );

    // Unknown fields do not stop the typed checks: drop them and validate the rest so
    // the user sees every problem in one go.
    if only_unknown_fields {
        let pruned = prune_unknown(doc, &checked.unknown);
        match typed(kind, pruned) {
            Ok(resource) => {
                match &resource {
                    Resource::TrainJob(r) => r.validate(&mut problems),
                    Resource::ModelDeployment(r) => r.validate(&mut problems),
                    Resource::Queue(r) => r.validate(&mut problems),
                    Resource::PriorityClass(r) => r.validate(&mut problems),
                    Resource::Sweep(r) => r.validate(&mut problems),
                    Resource::Cohort(r) => r.validate(&mut problems),
                }
                if problems.0.is_empty() {
                    return Ok(resource);
                }
            }
            Err(e) => problems.0.push(e),
        }
    }
    problems.0.dedup();
    Err(invalid(problems.0))
}

fn typed(kind: ResourceKind, doc: Value) -> Result<Resource, FieldError> {
    fn de<T: serde::de::DeserializeOwned>(doc: Value) -> Result<T, FieldError> {
        serde_path_to_error::deserialize(doc).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            FieldError::new(path, e.into_inner().to_string())
        })
    }
    Ok(match kind {
        ResourceKind::TrainJob => Resource::TrainJob(de(doc)?),
        ResourceKind::ModelDeployment => Resource::ModelDeployment(de(doc)?),
        ResourceKind::Queue => Resource::Queue(de(doc)?),
        ResourceKind::PriorityClass => Resource::PriorityClass(de(doc)?),
        ResourceKind::Sweep => Resource::Sweep(de(doc)?),
        ResourceKind::Cohort => Resource::Cohort(de(doc)?),
    })
}

/// `doc` without the unknown fields at `places` (each its parents' keys, then its own).
fn prune_unknown(mut doc: Value, places: &[Vec<String>]) -> Value {
    for place in places {
        let Some((last, parents)) = place.split_last() else {
            continue;
        };
        let parent: String = parents
            .iter()
            .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
            .collect();
        if let Some(Value::Object(m)) = doc.pointer_mut(&parent) {
            m.shift_remove(last);
        }
    }
    doc
}

#[cfg(test)]
mod tests;

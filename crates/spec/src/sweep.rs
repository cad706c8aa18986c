//! `Sweep`: many fine-tunes from one `TrainJob` template, one per combination of a grid of
//! hyper-parameters, compared in one table — what researchers otherwise do by copying YAML or
//! looping over `swift sft` in a shell.
//!
//! This module owns the expansion (a sweep → its ordered, named, labelled jobs) and every
//! apply-time rule about it; the control plane stores and paces the jobs, `ferry render` renders
//! them.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::FieldError;
use crate::lifecycle::JobPhase;
use crate::meta::{API_VERSION, ObjectMeta};
use crate::parse::{Resource, parse_value};
use crate::train_job::{TrainJob, TrainJobSpec};
use crate::validate::Problems;

/// The most jobs one sweep may expand to: a grid larger than this is more likely a mistake
/// (one list too many) than a plan, and would flood the queue.
pub const MAX_SWEEP_JOBS: usize = 256;

/// The label every job of a sweep carries, with the sweep's name: how the control plane finds
/// a sweep's jobs again (after a restart too) and how users select them.
pub const SWEEP_LABEL: &str = "ferry.dev/sweep";

/// The label with a job's index in its sweep (`0`, `1`, …): the order jobs are released in.
pub const SWEEP_INDEX_LABEL: &str = "ferry.dev/sweep-index";

/// The annotation with a job's parameter values as compact JSON (`{"train.lr":0.0001}`), so a
/// job seen on its own says which combination it runs.
pub const SWEEP_PARAMETERS_ANNOTATION: &str = "ferry.dev/sweep-parameters";

/// The metric a sweep ranks by when `spec.metric` is left out.
pub const DEFAULT_SWEEP_METRIC: &str = "loss";

/// One job's values: each parameter path with its value, in the sweep's order of paths.
pub type Combination = IndexMap<String, Value>;

/// Many training jobs from one template: one per combination of `spec.parameters`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sweep {
    /// Always `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Sweep`.
    pub kind: String,
    /// The sweep's name is its jobs' prefix: `<name>-<index>`.
    pub metadata: ObjectMeta,
    /// The template, the grid, and how many jobs may run at once.
    pub spec: SweepSpec,
    /// What the control plane observed of its jobs; ignored on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SweepStatus>,
}

/// The desired state of a [`Sweep`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SweepSpec {
    /// The job every combination starts from: labels and a `TrainJob` spec.
    pub template: JobTemplate,
    /// Dotted paths into the template's spec (`train.lr`, `method`, `resources.gpusPerNode`,
    /// `env.SEED`), each with the values to try. Every combination becomes a job: paths in the
    /// order written, the last one varying fastest, each list's values in the order given.
    pub parameters: IndexMap<String, Vec<Value>>,
    /// At most this many of the sweep's jobs queued or running at once; the others wait
    /// suspended and are released, lowest index first, as jobs end. All at once when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<i32>,
    /// The key of the jobs' metrics lines the table ranks by, lower is better: the latest value
    /// of a job that succeeded. `loss` (the final training loss) when omitted.
    #[serde(default = "default_metric")]
    pub metric: String,
}

fn default_metric() -> String {
    DEFAULT_SWEEP_METRIC.to_owned()
}

/// The template of a sweep's jobs: labels and annotations they all carry, and their spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobTemplate {
    /// Labels and annotations copied to every job (names are the sweep's to give).
    #[serde(default)]
    pub metadata: TemplateMeta,
    /// A `TrainJob` spec; each job gets it with its combination's values set.
    pub spec: TrainJobSpec,
}

/// What a [`JobTemplate`] may say about its jobs' metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateMeta {
    /// Labels every job carries, beside `ferry.dev/sweep` and `ferry.dev/sweep-index`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations every job carries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What the control plane observed of a sweep's jobs, computed when it is read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepStatus {
    /// How many of its jobs are in each phase (jobs deleted meanwhile are not counted).
    #[serde(default)]
    pub phases: BTreeMap<String, u32>,
    /// The succeeded job with the lowest `spec.metric` so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<SweepBest>,
    /// One entry per combination, by index.
    #[serde(default)]
    pub jobs: Vec<SweepJobStatus>,
}

/// The best job of a sweep so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepBest {
    /// The job's name.
    pub job: String,
    /// Its value of `spec.metric`.
    pub value: f64,
}

/// One job of a sweep, as its table row shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepJobStatus {
    /// The job's name, `<sweep>-<index>`.
    pub name: String,
    /// Its place in the grid.
    pub index: u32,
    /// Its combination: each parameter path with the value it got.
    pub parameters: Combination,
    /// Its phase; absent when the job was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// The latest step its metrics lines reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    /// The latest value of `spec.metric` its metrics lines reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

/// One job a sweep expands to.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepJob {
    /// Its place in the grid, from 0.
    pub index: usize,
    /// Its combination: each parameter path with its value.
    pub parameters: Combination,
    /// The validated job, named `<sweep>-<index>` and labelled.
    pub job: TrainJob,
    /// Whether it starts suspended because of `spec.maxParallel`, to be released by the
    /// control plane when an earlier job ends.
    pub held: bool,
}

impl SweepJob {
    /// `method=lora, train.lr=0.0001`: the combination, for messages and tables.
    pub fn combination(&self) -> String {
        combination(&self.parameters)
    }
}

/// A parameter value as a table cell or message shows it: strings bare, the rest as JSON.
pub fn show_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn combination(parameters: &Combination) -> String {
    parameters
        .iter()
        .map(|(k, v)| format!("{k}={}", show_value(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name of a sweep's job `index`.
pub fn sweep_job_name(sweep: &str, index: usize) -> String {
    format!("{sweep}-{index}")
}

/// Paths a sweep may not set: the sweep sets `suspend` itself for `spec.maxParallel`.
const RESERVED_PATHS: [&str; 1] = ["suspend"];

impl Sweep {
    /// How many jobs the grid expands to (0 when a list is empty).
    pub fn combinations(&self) -> usize {
        self.spec
            .parameters
            .values()
            .try_fold(1usize, |n, values| n.checked_mul(values.len()))
            .unwrap_or(usize::MAX)
    }

    /// The jobs the sweep runs, by index: each the template with one combination applied,
    /// named, labelled and validated as any `TrainJob` is. Every problem is reported at once,
    /// each naming the field of the sweep to fix.
    pub fn expand(&self) -> Result<Vec<SweepJob>, Vec<FieldError>> {
        let mut p = Problems::default();
        let jobs = self.expand_into(&mut p);
        if p.0.is_empty() { Ok(jobs) } else { Err(p.0) }
    }

    pub(crate) fn validate(&self, p: &mut Problems) {
        self.expand_into(p);
    }

    /// The checks and the expansion; problems go to `p` (the jobs are complete only when
    /// none were found).
    fn expand_into(&self, p: &mut Problems) -> Vec<SweepJob> {
        let before = p.0.len();
        self.metadata.validate(p);
        let spec = &self.spec;
        if let Some(n) = spec.max_parallel {
            p.at_least("spec.maxParallel", i64::from(n), 1);
        }
        if spec.metric.trim().is_empty() {
            p.push(
                "spec.metric",
                "must name a key of the jobs' metrics lines, e.g. loss; leave it out for loss",
            );
        }
        for key in spec.template.metadata.labels.keys() {
            if key == SWEEP_LABEL || key == SWEEP_INDEX_LABEL {
                p.push(
                    format!("spec.template.metadata.labels[{key:?}]"),
                    "is set by the sweep on each of its jobs; remove it",
                );
            }
        }
        if spec.parameters.is_empty() {
            p.push(
                "spec.parameters",
                "is empty; give at least one path with the values to try, e.g. train.lr: [0.0001, 0.0003]",
            );
        }
        for (path, values) in &spec.parameters {
            let at = format!("spec.parameters[{path:?}]");
            if let Err(e) = check_path(path) {
                p.push(at.clone(), e);
            }
            if values.is_empty() {
                p.push(
                    at.clone(),
                    "has no values; give at least one, or remove the path",
                );
            }
            for (i, v) in values.iter().enumerate() {
                if values[..i].contains(v) {
                    p.push(
                        at.clone(),
                        format!(
                            "lists {} twice; remove the repeat (each value makes a job)",
                            show_value(v)
                        ),
                    );
                }
            }
        }
        let count = self.combinations();
        if count > MAX_SWEEP_JOBS {
            let sizes: Vec<String> = spec
                .parameters
                .iter()
                .map(|(k, v)| format!("{} {k}", v.len()))
                .collect();
            p.push(
                "spec.parameters",
                format!(
                    "expands to {} jobs ({}), over the limit of {MAX_SWEEP_JOBS}; drop values or split it into several sweeps",
                    if count == usize::MAX { "too many".to_owned() } else { count.to_string() },
                    sizes.join(" × ")
                ),
            );
        }
        let name = &self.metadata.name;
        if count > 0 && count <= MAX_SWEEP_JOBS && crate::meta::validate_name(name).is_ok() {
            let longest = sweep_job_name(name, count - 1);
            if longest.len() > 63 {
                p.push(
                    "metadata.name",
                    format!(
                        "is too long for its jobs' names: `{longest}` has {} characters, over the 63 allowed; shorten the name to at most {} characters",
                        longest.len(),
                        63 - (longest.len() - name.len())
                    ),
                );
            }
        }
        if p.0.len() > before {
            return Vec::new();
        }
        let mut template = serde_json::to_value(&spec.template.spec).unwrap_or_default();
        if let Value::Object(m) = &mut template {
            // The template as parsed (defaults filled in) is what the parameters are set on;
            // `suspend` is the sweep's, set per job below.
            m.remove("suspend");
        }
        let mut jobs = Vec::with_capacity(count);
        let mut found = Vec::new();
        for index in 0..count {
            let parameters = self.combination_at(index);
            let held = self.holds(index);
            let doc = self.job_doc(&template, index, &parameters, held);
            match parse_value(doc, "") {
                Ok(Resource::TrainJob(job)) => jobs.push(SweepJob {
                    index,
                    parameters,
                    job,
                    held,
                }),
                Ok(_) => unreachable!("a TrainJob document parses as a TrainJob"),
                Err(e) => found.extend(e.problems().into_iter().map(|p| (index, p.clone()))),
            }
        }
        p.0.extend(self.job_problems(found));
        // Two jobs exporting under one name: the second's export would be refused at its end.
        let mut first: BTreeMap<&str, usize> = BTreeMap::new();
        for job in &jobs {
            let Some(name) = job
                .job
                .spec
                .export
                .as_ref()
                .and_then(|e| e.register.as_deref())
            else {
                continue;
            };
            if let Some(&other) = first.get(name) {
                p.push(
                    "spec.parameters[\"export.register\"]",
                    format!(
                        "jobs {other} and {} would both register model {name:?}; a name must be unique: sweep export.register alone, or leave it to the template (each job then registers NAME-<index>)",
                        job.index
                    ),
                );
                break;
            }
            first.insert(name, job.index);
        }
        jobs
    }

    /// Whether the job at `index` starts suspended because of `spec.maxParallel`, the sweep's
    /// to release (a template with `suspend: true` holds every job itself, and none is the
    /// sweep's).
    pub fn holds(&self, index: usize) -> bool {
        let spec = &self.spec;
        !spec.template.spec.suspend
            && spec
                .max_parallel
                .is_some_and(|n| index >= usize::try_from(n).unwrap_or(0))
    }

    /// The values of combination `index`: mixed radix over the paths in order, the last
    /// path's values varying fastest (empty past the last combination).
    pub fn combination_at(&self, mut index: usize) -> Combination {
        if index >= self.combinations() {
            return Combination::new();
        }
        let mut picked = Vec::with_capacity(self.spec.parameters.len());
        for (path, values) in self.spec.parameters.iter().rev() {
            picked.push((path.clone(), values[index % values.len()].clone()));
            index /= values.len();
        }
        picked.into_iter().rev().collect()
    }

    fn job_doc(
        &self,
        template: &Value,
        index: usize,
        parameters: &Combination,
        held: bool,
    ) -> Value {
        let mut spec = template.clone();
        for (path, value) in parameters {
            set_path(&mut spec, path, value.clone());
        }
        // Model names are unique: a name the template gives its export becomes each job's own
        // (`NAME-<index>`) unless a parameter sets it; without one, a job exports under its
        // own name already.
        if !parameters.contains_key("export.register")
            && let Some(name) = spec.pointer("/export/register").and_then(Value::as_str)
        {
            spec["export"]["register"] = Value::String(format!("{name}-{index}"));
        }
        if held || self.spec.template.spec.suspend {
            spec["suspend"] = Value::Bool(true);
        }
        let meta = &self.spec.template.metadata;
        let mut labels = meta.labels.clone();
        labels.insert(SWEEP_LABEL.to_owned(), self.metadata.name.clone());
        labels.insert(SWEEP_INDEX_LABEL.to_owned(), index.to_string());
        let mut annotations = meta.annotations.clone();
        annotations.insert(
            SWEEP_PARAMETERS_ANNOTATION.to_owned(),
            serde_json::to_string(parameters).unwrap_or_default(),
        );
        serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": "TrainJob",
            "metadata": {
                "name": sweep_job_name(&self.metadata.name, index),
                "namespace": self.metadata.namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": spec,
        })
    }
}

/// A problem of the expanded jobs, found first in job `index` and in `more` jobs after it.
struct Found {
    problem: FieldError,
    index: usize,
    more: usize,
}

impl Sweep {
    /// Problems of its expanded jobs (each with the job's index, its path that of the job's
    /// field, `spec.train.lr`) as the sweep's: at the parameter that caused it when the field is
    /// one (`spec.parameters["train.lr"]`), else at the template's field
    /// (`spec.template.spec.lora`); prefixed with the first job and combination that has it and
    /// how many more do, unless every job has it (then it is the template's). A problem many
    /// jobs share is reported once.
    pub fn job_problems(
        &self,
        problems: impl IntoIterator<Item = (usize, FieldError)>,
    ) -> Vec<FieldError> {
        let mut found: Vec<Found> = Vec::new();
        for (index, problem) in problems {
            match found.iter_mut().find(|f| f.problem == problem) {
                Some(f) => f.more += 1,
                None => found.push(Found {
                    problem,
                    index,
                    more: 0,
                }),
            }
        }
        let count = self.combinations();
        found
            .into_iter()
            .map(|f| self.as_sweeps(f, count))
            .collect()
    }

    fn as_sweeps(&self, f: Found, count: usize) -> FieldError {
        let field = f.problem.path.strip_prefix("spec.");
        let parameter = field.and_then(|field| {
            self.spec
                .parameters
                .keys()
                .find(|k| field == k.as_str() || field.starts_with(&format!("{k}.")))
        });
        let path = match (parameter, field) {
            (Some(k), _) => format!("spec.parameters[{k:?}]"),
            (None, Some(field)) => format!("spec.template.spec.{field}"),
            (None, None) => "spec.template".to_owned(),
        };
        if f.more + 1 == count && parameter.is_none() {
            return FieldError::new(path, f.problem.message);
        }
        let others = match f.more {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        FieldError::new(
            path,
            format!(
                "in job {} ({}){others}: {}",
                sweep_job_name(&self.metadata.name, f.index),
                combination(&self.combination_at(f.index)),
                f.problem
            ),
        )
    }
}

/// Sets the dotted `path` of `doc` to `value`, creating the mappings on the way.
fn set_path(doc: &mut Value, path: &str, value: Value) {
    let mut node = doc;
    let mut segments = path.split('.').peekable();
    while let Some(seg) = segments.next() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            unreachable!("made a mapping above")
        };
        if segments.peek().is_none() {
            map.insert(seg.to_owned(), value);
            return;
        }
        node = map.entry(seg).or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Whether `path` names a field of a `TrainJob` spec a sweep may set; the message otherwise.
fn check_path(path: &str) -> Result<(), String> {
    if RESERVED_PATHS.contains(&path) {
        return Err(format!(
            "{path} is the sweep's to set (spec.maxParallel holds jobs back); set it in spec.template.spec to hold every job"
        ));
    }
    crate::schema::spec_path(path).map_err(|suggestion| {
        let mut msg = format!("TrainJob spec has no field {path}");
        match suggestion {
            Some(best) => msg.push_str(&format!("; did you mean {best}?")),
            None => msg.push_str(
                "; give a dotted path to a field of spec.template.spec, e.g. train.lr or resources.gpusPerNode",
            ),
        }
        msg
    })
}

#[cfg(test)]
mod tests;

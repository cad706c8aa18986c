//! A cluster's priority classes as its platform team already has them, read for `ferry up
//! --priority-classes`: Kubernetes' `scheduling.k8s.io/v1` PriorityClasses (as `kubectl get
//! priorityclasses -o yaml` prints them, Kubernetes' own `system-` classes among them), Kueue's
//! WorkloadPriorityClasses, and Ferry's own `PriorityClass` documents, so the classes need not be
//! written again as Ferry's mapping. What Ferry does not take over is said in notes; anything
//! else that is not a class is refused, every problem at once.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{FieldError, SpecError};
use crate::foreign::{Object, finish, kubernetes_objects, unknown_fields};
use crate::kueue::KUEUE_GROUP;
use crate::meta::{API_VERSION, validate_name};
use crate::parse::{Resource, parse_value};
use crate::priority_class::{MAX_PRIORITY_VALUE, out_of_range, reserved};
use crate::schema::closest;

/// The `apiVersion` of Kubernetes' PriorityClass this reader takes.
const KUBERNETES_API_VERSION: &str = "scheduling.k8s.io/v1";

/// The fields of a Kubernetes PriorityClass (`scheduling.k8s.io/v1`): one outside them is a
/// typo or a newer Kubernetes, refused either way.
const PRIORITY_CLASS_FIELDS: [&str; 7] = [
    "apiVersion",
    "description",
    "globalDefault",
    "kind",
    "metadata",
    "preemptionPolicy",
    "value",
];

/// The fields of a Kueue WorkloadPriorityClass (v1beta1 and v1beta2 alike).
const WORKLOAD_PRIORITY_CLASS_FIELDS: [&str; 5] =
    ["apiVersion", "description", "kind", "metadata", "value"];

/// The kinds this reader takes, for the "did you mean" of a kind it does not.
const KINDS: [&str; 2] = ["PriorityClass", "WorkloadPriorityClass"];

/// The classes of a file of priority class objects, and what was not taken over.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterPriorityClasses {
    /// Each class, in file order; Kubernetes' own `system-` classes are left out.
    pub classes: Vec<ClusterPriorityClass>,
    /// The class marked `globalDefault: true`: what Kubernetes gives a pod that names none.
    pub global_default: Option<String>,
    /// What was skipped or is not modelled, one line each, for the user to see.
    pub notes: Vec<String>,
}

/// One class of a file, whichever system's object it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPriorityClass {
    /// Its name, what a job gives in `spec.priority`.
    pub name: String,
    /// Higher runs first; between -[`MAX_PRIORITY_VALUE`] and [`MAX_PRIORITY_VALUE`].
    pub value: i32,
    /// Whether its work may preempt lower-priority work (`preemptionPolicy: Never`: it may not).
    pub preempting: bool,
    /// What the class is for, as the file says.
    pub description: Option<String>,
}

/// Whether a file's `objects` (Ferry's own set aside) are only priority classes, one of them
/// Kubernetes' (`scheduling.k8s.io/v1`) or Kueue's, which `ferry apply` adopts (`crate::adopt`)
/// rather than reads as Ferry's documents.
pub(crate) fn holds_foreign_priority_classes(objects: &[Object]) -> bool {
    let foreign = |o: &Object| {
        (o.kind == "PriorityClass" && o.api_version == KUBERNETES_API_VERSION)
            || o.kind == "WorkloadPriorityClass"
    };
    objects.iter().any(foreign) && objects.iter().all(|o| KINDS.contains(&o.kind.as_str()))
}

/// Reads every priority class in `text` (YAML documents, JSON, or a `kubectl get -o yaml`
/// `List`): Kubernetes' `scheduling.k8s.io/v1` PriorityClasses, Kueue's `WorkloadPriorityClass`es
/// (v1beta1 or v1beta2) and Ferry's own `PriorityClass` documents; `source_name` labels errors.
/// Classes named `system-…` (Kubernetes' own) are skipped with a note; any other object, an
/// unknown field, a value missing or out of range, a name Ferry cannot use or given twice, two
/// global defaults, or a file without a class is refused, every problem in one error.
pub fn read_priority_classes(
    text: &str,
    source_name: &str,
) -> Result<ClusterPriorityClasses, SpecError> {
    priority_classes_of(&kubernetes_objects(text, source_name)?, source_name)
}

/// [`read_priority_classes`] of a file's objects already read.
pub(crate) fn priority_classes_of(
    objects: &[Object],
    source_name: &str,
) -> Result<ClusterPriorityClasses, SpecError> {
    let mut r = Reader::default();
    for object in objects {
        r.object(object);
    }
    r.finish(source_name)
}

/// Whose object a class is.
#[derive(Clone, Copy)]
enum Form {
    /// Kubernetes' `scheduling.k8s.io/v1` PriorityClass: fields at the top level.
    Kubernetes,
    /// Kueue's WorkloadPriorityClass: `value` and `description` at the top level.
    Kueue,
    /// Ferry's own `PriorityClass` document, with a `spec`.
    Ferry,
}

/// What has been read so far, and every problem found.
#[derive(Default)]
struct Reader {
    classes: Vec<ClusterPriorityClass>,
    /// Where each class was defined, by name, to point at the first when one comes again.
    defined_at: BTreeMap<String, String>,
    /// Each class marked `globalDefault: true`, by name, with where it is.
    global_defaults: Vec<(String, String)>,
    /// The `system-` classes skipped.
    system: Vec<String>,
    /// Whether a Kueue class was read (its preemption is noted once).
    kueue: bool,
    problems: Vec<FieldError>,
}

impl Reader {
    /// Records a problem with `field` of the object at `at` (the object itself when empty).
    fn problem(&mut self, at: &str, field: &str, message: impl Into<String>) {
        let path = if field.is_empty() {
            at.to_owned()
        } else {
            format!("{at}: {field}")
        };
        self.problems.push(FieldError::new(path, message));
    }

    fn object(&mut self, object: &Object) {
        let at = object.label();
        let Value::Object(body) = &object.body else {
            self.problem(
                &object.at,
                "",
                "must be a mapping with apiVersion, kind, metadata and value",
            );
            return;
        };
        let Some(form) = self.form(&at, &object.kind, &object.api_version) else {
            return;
        };
        let name = object.name();
        if name.is_empty() {
            self.problem(&at, "metadata.name", "is required: the class's name");
            return;
        }
        if name.starts_with("system-") && matches!(form, Form::Kubernetes) {
            self.system.push(name.to_owned());
            return;
        }
        let before = self.problems.len();
        let class = match form {
            Form::Ferry => self.ferry(&at, &object.body),
            Form::Kubernetes | Form::Kueue => self.foreign(&at, name, body, form),
        };
        // Ferry's documents had their name checked with the rest.
        if !matches!(form, Form::Ferry) {
            if let Err(problem) = validate_name(name) {
                self.problem(&at, "metadata.name", renamed(name, problem));
            } else if let Some(problem) = reserved(name) {
                self.problem(&at, "metadata.name", problem);
            }
        }
        if let Some(first) = self.defined_at.get(name) {
            let message = format!("`{name}` is defined again (first by {first}); keep one");
            self.problem(&at, "metadata.name", message);
        } else {
            self.defined_at.insert(name.to_owned(), at);
        }
        if let Some(class) = class.filter(|_| self.problems.len() == before) {
            self.classes.push(class);
        }
    }

    /// Whose class the object is, from its `apiVersion` and `kind`; `None` (with the problem
    /// recorded) when it is no class this reader takes.
    fn form(&mut self, at: &str, kind: &str, api: &str) -> Option<Form> {
        let kueue_version = api
            .strip_prefix(KUEUE_GROUP)
            .and_then(|v| v.strip_prefix('/'));
        match kind {
            "PriorityClass" if api == KUBERNETES_API_VERSION => return Some(Form::Kubernetes),
            "PriorityClass" if api == API_VERSION => return Some(Form::Ferry),
            "WorkloadPriorityClass" if matches!(kueue_version, Some("v1beta1" | "v1beta2")) => {
                return Some(Form::Kueue);
            }
            "PriorityClass" => self.problem(
                at,
                "apiVersion",
                format!(
                    "{} is not read; write {KUBERNETES_API_VERSION} (Kubernetes' PriorityClass) \
                     or {API_VERSION} (Ferry's)",
                    shown(api)
                ),
            ),
            "WorkloadPriorityClass" => self.problem(
                at,
                "apiVersion",
                format!(
                    "{} is not read; write {KUEUE_GROUP}/v1beta2 or v1beta1",
                    shown(api)
                ),
            ),
            "" => self.problem(
                at,
                "kind",
                "is required: PriorityClass or WorkloadPriorityClass",
            ),
            _ => {
                let hint = closest(kind, KINDS)
                    .map(|best| format!("; did you mean `{best}`?"))
                    .unwrap_or_default();
                self.problem(
                    at,
                    "kind",
                    format!(
                        "{kind} ({}) is not a priority class; keep only PriorityClass \
                         ({KUBERNETES_API_VERSION} or {API_VERSION}) and WorkloadPriorityClass \
                         ({KUEUE_GROUP}/v1beta2) objects in this file{hint}",
                        shown(api)
                    ),
                );
            }
        }
        None
    }

    /// A Ferry `PriorityClass` document, checked as `ferry apply` checks it.
    fn ferry(&mut self, at: &str, body: &Value) -> Option<ClusterPriorityClass> {
        match parse_value(body.clone(), at) {
            Ok(Resource::PriorityClass(class)) => Some(ClusterPriorityClass {
                preempting: class.preempting(),
                name: class.metadata.name,
                value: class.spec.value,
                description: class.spec.description,
            }),
            Ok(other) => unreachable!("a PriorityClass document read as {:?}", other.kind()),
            Err(e) => {
                for p in e.problems() {
                    self.problem(at, &p.path, p.message.clone());
                }
                None
            }
        }
    }

    /// A Kubernetes PriorityClass or a Kueue WorkloadPriorityClass: fields at the top level.
    fn foreign(
        &mut self,
        at: &str,
        name: &str,
        body: &Map<String, Value>,
        form: Form,
    ) -> Option<ClusterPriorityClass> {
        let (known, what): (&[&str], _) = match form {
            Form::Kueue => (
                &WORKLOAD_PRIORITY_CLASS_FIELDS,
                "a field of Kueue's WorkloadPriorityClass",
            ),
            Form::Kubernetes | Form::Ferry => (
                &PRIORITY_CLASS_FIELDS,
                "a field of Kubernetes' PriorityClass",
            ),
        };
        // Ferry's own documents have a `spec`; the others keep their fields at the top level.
        self.problems.extend(unknown_fields(
            &format!("{at}: "),
            body.keys().filter(|k| *k != "spec"),
            known,
            what,
        ));
        if body.contains_key("spec") {
            self.problem(
                at,
                "spec",
                format!(
                    "this kind has no spec: write value{} and description at the top level \
                     (a spec is for apiVersion {API_VERSION})",
                    if matches!(form, Form::Kubernetes) {
                        ", preemptionPolicy, globalDefault"
                    } else {
                        ""
                    }
                ),
            );
        }
        let value = self.value(at, body.get("value"));
        let description = match body.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(d)) => Some(d.clone()),
            Some(v) => {
                self.problem(
                    at,
                    "description",
                    format!("must be text (got {v}); quote it"),
                );
                None
            }
        };
        let preempting = match form {
            Form::Kueue => {
                self.kueue = true;
                true
            }
            Form::Kubernetes | Form::Ferry => self.kubernetes_policy(at, name, body),
        };
        Some(ClusterPriorityClass {
            name: name.to_owned(),
            value: value?,
            preempting,
            description,
        })
    }

    /// A Kubernetes PriorityClass's `preemptionPolicy` (whether it preempts) and
    /// `globalDefault` (recorded).
    fn kubernetes_policy(&mut self, at: &str, name: &str, body: &Map<String, Value>) -> bool {
        match body.get("globalDefault") {
            None | Some(Value::Null | Value::Bool(false)) => {}
            Some(Value::Bool(true)) => self.global_defaults.push((name.to_owned(), at.to_owned())),
            Some(v) => self.problem(
                at,
                "globalDefault",
                format!("must be true or false (got {v})"),
            ),
        }
        match body.get("preemptionPolicy") {
            None | Some(Value::Null) => true,
            Some(v) if v == "PreemptLowerPriority" => true,
            Some(v) if v == "Never" => false,
            Some(v) => {
                self.problem(
                    at,
                    "preemptionPolicy",
                    format!("must be PreemptLowerPriority (the default) or Never (got {v})"),
                );
                true
            }
        }
    }

    /// The top-level `value`: required, a whole number within the range of user classes.
    fn value(&mut self, at: &str, value: Option<&Value>) -> Option<i32> {
        let whole = || format!("a whole number from -{MAX_PRIORITY_VALUE} to {MAX_PRIORITY_VALUE}");
        let problem = match value {
            None | Some(Value::Null) => format!("is required: {}; higher runs first", whole()),
            Some(Value::String(s)) => format!(
                "must be {}, not text (got {s:?}); write it without quotes",
                whole()
            ),
            Some(Value::Number(n)) => {
                let whole_number = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
                match whole_number {
                    Some(v) => match out_of_range(v) {
                        Some(problem) => problem,
                        None => return i32::try_from(v).ok(),
                    },
                    None => format!("must be {} (got {n})", whole()),
                }
            }
            Some(v) => format!("must be {} (got {v})", whole()),
        };
        self.problem(at, "value", problem);
        None
    }

    fn finish(mut self, source_name: &str) -> Result<ClusterPriorityClasses, SpecError> {
        if let [(_, first), .., (_, last)] = self.global_defaults.as_slice() {
            let names: Vec<String> = self
                .global_defaults
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect();
            let message = format!(
                "{} each have globalDefault: true (the first at {first}); a cluster has one \
                 default class, so keep globalDefault: true on one only",
                names.join(", ")
            );
            let at = last.clone();
            self.problem(&at, "globalDefault", message);
        }
        let mut notes = Vec::new();
        if self.kueue {
            notes.push(
                "WorkloadPriorityClasses are read as preempting (PreemptLowerPriority): Kueue \
                 gives a class no policy and leaves preemption to each ClusterQueue's \
                 spec.preemption"
                    .to_owned(),
            );
        }
        if !self.system.is_empty() {
            notes.push(format!(
                "skipped Kubernetes' own {} (for the cluster's critical pods, not for jobs)",
                self.system.join(", ")
            ));
        }
        let none_found = format!(
            "no priority class found{}; the file needs a PriorityClass ({KUBERNETES_API_VERSION} \
             or {API_VERSION}) or a WorkloadPriorityClass ({KUEUE_GROUP}/v1beta2)",
            if self.system.is_empty() {
                ""
            } else {
                " besides Kubernetes' own system- classes"
            }
        );
        finish(
            source_name,
            self.problems,
            !self.classes.is_empty(),
            &none_found,
            BTreeMap::new(),
            &mut notes,
        )?;
        let global_default = self.global_defaults.into_iter().next().map(|(n, _)| n);
        Ok(ClusterPriorityClasses {
            classes: self.classes,
            global_default,
            notes,
        })
    }
}

/// An `apiVersion` as messages show it: quoted, or said to be missing.
fn shown(api: &str) -> String {
    if api.is_empty() {
        "no apiVersion".to_owned()
    } else {
        format!("`{api}`")
    }
}

/// `problem` with `name`, a Kubernetes name Ferry cannot use, and the Ferry name to use instead
/// where one is close (`High.Priority`: `high-priority`).
fn renamed(name: &str, problem: String) -> String {
    let close: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let close = close.trim_matches('-');
    match validate_name(close) {
        Ok(()) => format!("{problem}; rename the class, e.g. `{close}`, in the file and in jobs"),
        Err(_) => format!("{problem}; rename the class in the file and in jobs"),
    }
}

#[cfg(test)]
mod tests;

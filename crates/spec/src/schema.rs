//! JSON Schema of every resource, and the translation of schema violations into
//! messages that name the field and the fix.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::cohort::Cohort;
use crate::deployment::ModelDeployment;
use crate::error::FieldError;
use crate::parse::ResourceKind;
use crate::priority_class::PriorityClass;
use crate::queue::Queue;
use crate::sweep::Sweep;
use crate::train_job::TrainJob;

/// The JSON Schema (draft 2020-12) of one resource kind, as `ferry schema` prints it.
pub fn json_schema(kind: ResourceKind) -> Value {
    let schema = match kind {
        ResourceKind::TrainJob => schemars::schema_for!(TrainJob),
        ResourceKind::ModelDeployment => schemars::schema_for!(ModelDeployment),
        ResourceKind::Queue => schemars::schema_for!(Queue),
        ResourceKind::PriorityClass => schemars::schema_for!(PriorityClass),
        ResourceKind::Sweep => schemars::schema_for!(Sweep),
        ResourceKind::Cohort => schemars::schema_for!(Cohort),
    };
    let mut value = schema.to_value();
    drop_null_branches(&mut value);
    value
}

/// Every kind's schema, keyed by kind name.
pub fn json_schema_all() -> Value {
    let mut all = Map::new();
    for kind in ResourceKind::ALL {
        all.insert(kind.as_str().to_owned(), json_schema(kind));
    }
    Value::Object(all)
}

/// `Option<T>` fields may be omitted but are never `null` in Ferry's documents, so
/// the `null` alternatives schemars adds are removed: this keeps one schema branch per
/// field and so one clear message per mistake.
fn drop_null_branches(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".into(), only);
                }
            }
            let single = match map.get_mut("anyOf") {
                Some(Value::Array(branches)) => {
                    branches.retain(|b| b.get("type") != Some(&Value::String("null".into())));
                    (branches.len() == 1).then(|| branches.remove(0))
                }
                _ => None,
            };
            if let Some(Value::Object(inner)) = single {
                map.remove("anyOf");
                for (k, v) in inner {
                    map.entry(k).or_insert(v);
                }
            }
            if let Some(Value::Array(options)) = map.get_mut("enum") {
                options.retain(|o| !o.is_null());
            }
            for v in map.values_mut() {
                drop_null_branches(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_branches),
        _ => {}
    }
}

struct Compiled {
    schema: Value,
    validator: jsonschema::Validator,
}

fn compiled(kind: ResourceKind) -> &'static Compiled {
    static CACHE: [OnceLock<Compiled>; ResourceKind::ALL.len()] =
        [const { OnceLock::new() }; ResourceKind::ALL.len()];
    CACHE[kind as usize].get_or_init(|| {
        let schema = json_schema(kind);
        let validator = jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("generated schema for {} is invalid: {e}", kind.as_str()));
        Compiled { schema, validator }
    })
}

/// What a document's schema check found.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Every violation, in document order.
    pub problems: Vec<FieldError>,
    /// Where each unknown field is (its parent's keys, then its own), so it can be pruned
    /// before the typed checks whatever characters its name has.
    pub unknown: Vec<Vec<String>>,
}

/// Checks `doc` against `kind`'s schema; every violation becomes a [`FieldError`].
pub(crate) fn check(kind: ResourceKind, doc: &Value) -> Checked {
    let c = compiled(kind);
    let mut checked = Checked::default();
    let out = &mut checked.problems;
    for err in c.validator.iter_errors(doc) {
        let pointer = err.instance_path().to_string();
        let segments = pointer_segments(&pointer);
        let path = dotted(doc, &segments);
        let instance = err.instance();
        match err.kind() {
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                let known = known_fields(&c.schema, &segments);
                for field in unexpected {
                    let at = join(&path, field);
                    let mut place = segments.clone();
                    place.push(field.clone());
                    checked.unknown.push(place);
                    let hint = match closest(field, known.iter().map(String::as_str)) {
                        Some(best) => format!("unknown field; did you mean `{best}`?"),
                        None if known.is_empty() => "unknown field; remove it".to_owned(),
                        None => format!("unknown field; known fields are {}", known.join(", ")),
                    };
                    out.push(FieldError::new(at, hint));
                }
            }
            jsonschema::error::ValidationErrorKind::Enum { options } => {
                let opts: Vec<String> = options
                    .as_array()
                    .map(|a| a.iter().map(plain).collect())
                    .unwrap_or_default();
                out.push(FieldError::new(path, one_of(&opts, instance)));
            }
            // Documented enums become `oneOf` of `const`s: report them as a choice.
            jsonschema::error::ValidationErrorKind::OneOfNotValid { .. }
                if !choices(&c.schema, &segments).is_empty() =>
            {
                let opts = choices(&c.schema, &segments);
                out.push(FieldError::new(path, one_of(&opts, instance)));
            }
            jsonschema::error::ValidationErrorKind::Minimum { limit } => {
                out.push(FieldError::new(
                    path,
                    format!("must be {limit} or more (got {instance})"),
                ));
            }
            jsonschema::error::ValidationErrorKind::Maximum { limit } => {
                out.push(FieldError::new(
                    path,
                    format!("must be {limit} or less (got {instance})"),
                ));
            }
            jsonschema::error::ValidationErrorKind::Required { property } => {
                let field = plain(property);
                out.push(FieldError::new(
                    join(&path, &field),
                    "is required; add it".to_owned(),
                ));
            }
            jsonschema::error::ValidationErrorKind::Type { kind: expected } => {
                out.push(FieldError::new(
                    path,
                    format!(
                        "must be {} (got {} {})",
                        describe_type(&format!("{expected:?}")),
                        json_type(instance),
                        short(instance)
                    ),
                ));
            }
            _ => out.push(FieldError::new(path, err.to_string())),
        }
    }
    checked
}

fn pointer_segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// The path of the node at `segments` in `doc` as users write it: `spec.quotas[0].nominal`
/// (list elements by index); a key that is not a plain name is quoted, as label keys are,
/// `metadata.labels["ferry.dev/team"]`, so a key with dots or brackets in it cannot be read as
/// several fields.
pub(crate) fn dotted(doc: &Value, segments: &[String]) -> String {
    let mut out = String::new();
    let mut node = Some(doc);
    for seg in segments {
        node = match node {
            Some(Value::Array(items)) => {
                out.push_str(&format!("[{seg}]"));
                seg.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            other => {
                out = join(&out, seg);
                other.and_then(|v| v.get(seg))
            }
        };
    }
    out
}

/// `path` and then the key `field` (quoted unless it is a plain name).
fn join(path: &str, field: &str) -> String {
    let plain = field.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && field
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => field.to_owned(),
        (false, true) => format!("{path}.{field}"),
        (_, false) => format!("{path}[{field:?}]"),
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}…", &s[..s.floor_char_boundary(40)])
    } else {
        s
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

fn describe_type(debug: &str) -> String {
    let lower = debug.to_lowercase();
    let name = |t: &str| match t {
        "integer" => "a whole number",
        "number" => "a number",
        "string" => "a string",
        "boolean" => "true or false",
        "array" => "a list",
        "object" => "a mapping",
        "null" => "null",
        _ => "another type",
    };
    for t in ["integer", "number", "string", "boolean", "array", "object"] {
        if lower.contains(t) {
            return name(t).to_owned();
        }
    }
    lower
}

/// The closest known name within a small edit distance, for "did you mean" hints.
pub(crate) fn closest<'a>(
    given: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let given_lower = given.to_lowercase();
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(&given_lower, &k.to_lowercase()), k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

fn one_of(options: &[String], instance: &Value) -> String {
    let got = plain(instance);
    let mut msg = format!("must be one of {} (got {got:?})", options.join(", "));
    if let Some(best) = closest(&got, options.iter().map(String::as_str)) {
        msg.push_str(&format!("; did you mean `{best}`?"));
    }
    msg
}

/// The schema node that describes the value at `segments`.
fn node_at<'a>(root: &'a Value, segments: &[String]) -> Option<&'a Value> {
    let mut node = resolve(root, root);
    for seg in segments {
        let next = node
            .get("properties")
            .and_then(|p| p.get(seg))
            .or_else(|| node.get("items"))
            .or_else(|| node.get("additionalProperties").filter(|v| v.is_object()))?;
        node = resolve(root, next);
    }
    Some(node)
}

/// Property names the schema allows at `segments`.
fn known_fields(root: &Value, segments: &[String]) -> Vec<String> {
    node_at(root, segments)
        .and_then(|n| n.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Checks that the dotted `path` (`train.lr`, `env.SEED`) names a field of a `TrainJob`'s
/// spec, by its schema: mappings' fields, and any key of a free-form map such as `env`. On
/// failure, the closest known path, if one is close.
pub(crate) fn spec_path(path: &str) -> Result<(), Option<String>> {
    let root = &compiled(ResourceKind::TrainJob).schema;
    let spec = ["spec".to_owned()];
    let mut node = node_at(root, &spec).ok_or(None)?;
    for seg in path.split('.') {
        let field = node
            .get("properties")
            .and_then(|p| p.get(seg))
            .or_else(|| node.get("additionalProperties").filter(|v| v.is_object()));
        match field {
            Some(next) if !seg.is_empty() => node = resolve(root, next),
            _ => return Err(closest_path(root, node_at(root, &spec), path)),
        }
    }
    Ok(())
}

/// The known spec path closest to `given`, for "did you mean": compared whole and by the last
/// segment alone, whichever is closer (`lr` → `train.lr`, not `lora`).
fn closest_path(root: &Value, spec: Option<&Value>, given: &str) -> Option<String> {
    let mut known = Vec::new();
    if let Some(spec) = spec {
        field_paths(root, spec, "", 0, &mut known);
    }
    let leaf = |p: &str| p.rsplit('.').next().unwrap_or(p).to_lowercase();
    let (given_lower, given_leaf) = (given.to_lowercase(), leaf(given));
    known
        .into_iter()
        .map(|k| {
            let whole = strsim::jaro_winkler(&given_lower, &k.to_lowercase());
            let by_leaf = strsim::jaro_winkler(&given_leaf, &leaf(&k));
            (whole.max(by_leaf), k)
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// Every field path under `node`, a few levels deep (free-form maps are not entered).
fn field_paths(root: &Value, node: &Value, prefix: &str, depth: usize, out: &mut Vec<String>) {
    let Some(props) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, child) in props {
        let path = join(prefix, name);
        out.push(path.clone());
        if depth < 3 {
            field_paths(root, resolve(root, child), &path, depth + 1, out);
        }
    }
}

/// The allowed values when the schema at `segments` is a choice of constants.
fn choices(root: &Value, segments: &[String]) -> Vec<String> {
    let Some(branches) = node_at(root, segments)
        .and_then(|n| n.get("oneOf"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for b in branches {
        let b = resolve(root, b);
        if let Some(c) = b.get("const") {
            out.push(plain(c));
        } else if let Some(Value::Array(e)) = b.get("enum") {
            out.extend(e.iter().map(plain));
        } else {
            return Vec::new();
        }
    }
    out
}

fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    for _ in 0..16 {
        let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let Some(target) = reference.strip_prefix('#').and_then(|p| root.pointer(p)) else {
            break;
        };
        node = target;
    }
    node
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_compilable_schema() {
        for kind in ResourceKind::ALL {
            let c = compiled(kind);
            assert_eq!(c.schema["type"], "object", "{}", kind.as_str());
        }
    }

    #[test]
    fn schemas_have_no_null_alternatives() {
        let text = json_schema_all().to_string();
        assert!(!text.contains("\"null\""), "{text}");
    }

    #[test]
    fn closest_suggests_near_names_only() {
        let known = ["gpusPerNode", "nodes", "procsPerNode"];
        assert_eq!(closest("gpusPerNod", known), Some("gpusPerNode"));
        assert_eq!(closest("gpus_per_node", known), Some("gpusPerNode"));
        assert_eq!(closest("zzz", known), None);
    }

    #[test]
    fn spec_paths_are_checked_against_the_train_job_schema() {
        for ok in [
            "train.lr",
            "method",
            "resources.gpusPerNode",
            "data.path",
            "env.SEED",
            "lora.rank",
        ] {
            assert_eq!(spec_path(ok), Ok(()), "{ok}");
        }
        assert_eq!(spec_path("train.lrr"), Err(Some("train.lr".to_owned())));
        assert_eq!(spec_path("lr"), Err(Some("train.lr".to_owned())));
        assert_eq!(
            spec_path("gpusPerNode"),
            Err(Some("resources.gpusPerNode".to_owned()))
        );
        assert_eq!(spec_path("zzzz.qqq"), Err(None));
        assert!(spec_path("train.lr.x").is_err());
        assert!(spec_path("command.0").is_err());
        assert!(spec_path("").is_err());
    }

    #[test]
    fn dotted_paths_index_lists() {
        let doc = serde_json::json!({"spec": {"quotas": [{"nominal": 1}], "7": {"a.b": 1}}});
        let segs = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            dotted(&doc, &segs(&["spec", "quotas", "0", "nominal"])),
            "spec.quotas[0].nominal"
        );
        // A key of digits is a key, not an index; a key with a dot is one field.
        assert_eq!(
            dotted(&doc, &segs(&["spec", "7", "a.b"])),
            r#"spec["7"]["a.b"]"#
        );
        assert_eq!(join("", ".apiVersion"), r#"[".apiVersion"]"#);
    }
}

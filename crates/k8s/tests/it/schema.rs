//! Strict validation of rendered manifests against the official schemas in
//! `../shared/fixtures/k8s/` (Kubernetes 1.35 OpenAPI v3, JobSet and Kueue CRDs) and
//! against Ferry's own generated CRDs. Strict like kubeconform's strict mode: every object
//! schema that lists `properties` gets `additionalProperties: false` injected on load.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

/// `<workspace root>/../shared/fixtures/k8s`.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/k8s")
}

fn read_json(path: &PathBuf) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Adds `additionalProperties: false` wherever `properties` is listed without it.
pub fn make_strict(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let preserve =
                m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if m.contains_key("properties") && !m.contains_key("additionalProperties") && !preserve
            {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            for child in m.values_mut() {
                make_strict(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(make_strict),
        _ => {}
    }
}

fn openapi_file(api_version: &str) -> PathBuf {
    let dir = fixtures().join("kubernetes/v1.35/openapi-v3");
    let name = match api_version.split_once('/') {
        None => format!("api__{api_version}_openapi.json"),
        Some((group, version)) => format!("apis__{group}__{version}_openapi.json"),
    };
    dir.join(name)
}

static DOCS: OnceLock<Mutex<HashMap<PathBuf, Arc<Value>>>> = OnceLock::new();

fn openapi(api_version: &str) -> Arc<Value> {
    let path = openapi_file(api_version);
    let mut docs = DOCS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    docs.entry(path.clone())
        .or_insert_with(|| {
            let mut doc = read_json(&path);
            make_strict(&mut doc);
            Arc::new(doc)
        })
        .clone()
}

fn crd_file(group: &str, kind: &str) -> Option<PathBuf> {
    let plural = format!("{}s", kind.to_ascii_lowercase()).replace("classs", "classes");
    let base = fixtures().join("crds");
    match group {
        "jobset.x-k8s.io" => Some(base.join("jobset/v0.12.0/jobset.x-k8s.io_jobsets.yaml")),
        "kueue.x-k8s.io" => Some(base.join(format!("kueue/v0.19.2/kueue.x-k8s.io_{plural}.yaml"))),
        // Checked in beside the tests (see tests/schemas/README.md): KEDA v2.20.2's CRD.
        "keda.sh" => Some(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!("tests/schemas/keda.sh_{plural}.yaml")),
        ),
        _ => None,
    }
}

/// The strict schema of a CRD version; `metadata` becomes Kubernetes' ObjectMeta (strict too).
pub fn crd_version_schema(crd: &Value, version: &str) -> Value {
    let versions = crd["spec"]["versions"].as_array().expect("CRD versions");
    let v = versions
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("CRD {} has no version {version}", crd["metadata"]["name"]));
    let mut schema = v["schema"]["openAPIV3Schema"].clone();
    schema["properties"]["metadata"] =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"});
    make_strict(&mut schema);
    schema["components"] = openapi("v1")["components"].clone();
    schema
}

fn load_crd(path: &PathBuf) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = OnceLock::new();

fn validator(api_version: &str, kind: &str) -> Option<Arc<jsonschema::Validator>> {
    let key = format!("{api_version}/{kind}");
    if let Some(v) = VALIDATORS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Some(v.clone());
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let schema = if group == "ferry.dev" {
        let crds = ferry_k8s::crds().expect("ferry CRDs");
        let crd = crds
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)?;
        crd_version_schema(&crd, version)
    } else if let Some(path) = crd_file(group, kind) {
        crd_version_schema(&load_crd(&path), version)
    } else {
        if !openapi_file(api_version).exists() {
            return None;
        }
        let doc = openapi(api_version);
        let schemas = doc["components"]["schemas"].as_object()?;
        let name = schemas.iter().find_map(|(name, s)| {
            s["x-kubernetes-group-version-kind"]
                .as_array()?
                .iter()
                .any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
                .then(|| name.clone())
        })?;
        json!({"$ref": format!("#/components/schemas/{name}"), "components": doc["components"].clone()})
    };
    let v = Arc::new(jsonschema::validator_for(&schema).expect("schema compiles"));
    VALIDATORS
        .get()
        .unwrap()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, v.clone());
    Some(v)
}

/// Validates one object strictly; `Err` lists every violation with its JSON pointer.
pub fn validate(obj: &Value) -> Result<(), Vec<String>> {
    let api_version = obj["apiVersion"]
        .as_str()
        .ok_or_else(|| vec!["no apiVersion".to_string()])?;
    let kind = obj["kind"]
        .as_str()
        .ok_or_else(|| vec!["no kind".to_string()])?;
    let Some(v) = validator(api_version, kind) else {
        return Err(vec![format!(
            "no schema for {api_version} {kind} in the fixtures"
        )]);
    };
    let errors: Vec<String> = v
        .iter_errors(obj)
        .map(|e| {
            format!(
                "{kind} {}: at {}: {e}",
                obj["metadata"]["name"],
                e.instance_path()
            )
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Validates every object, panicking with all violations at once.
pub fn assert_valid(objects: &[Value]) {
    let mut all = Vec::new();
    for o in objects {
        if let Err(e) = validate(o) {
            all.extend(e);
        }
    }
    assert!(all.is_empty(), "schema violations:\n{}", all.join("\n"));
}

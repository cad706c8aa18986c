//! `GET /openapi.json`: the API described as OpenAPI 3.1, with the resource schemas
//! taken from the same Rust types that parse the requests.

use axum::Json;
use ferry_spec::{ResourceKind, json_schema};
use serde_json::{Map, Value, json};

pub(crate) async fn document() -> Json<Value> {
    Json(build())
}

/// Builds the document; the resource schemas' `$defs` become shared components.
pub(crate) fn build() -> Value {
    let mut schemas = Map::new();
    for kind in ResourceKind::ALL {
        let mut schema = json_schema(kind);
        if let Some(Value::Object(defs)) = schema.as_object_mut().and_then(|s| s.remove("$defs")) {
            for (name, mut def) in defs {
                rewrite_refs(&mut def);
                schemas.insert(name, def);
            }
        }
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("$schema");
        }
        rewrite_refs(&mut schema);
        schemas.insert(kind.as_str().to_owned(), schema);
    }
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "properties": {"error": {"type": "object", "properties": {
                "status": {"type": "integer"}, "code": {"type": "string"},
                "message": {"type": "string"},
                "problems": {"type": "array", "items": {"type": "object", "properties": {
                    "field": {"type": "string"}, "message": {"type": "string"}}}}
            }, "required": ["status", "code", "message"]}},
            "required": ["error"]
        }),
    );
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let job_ref = json!({"$ref": "#/components/schemas/TrainJob"});
    let ns = json!({"name": "ns", "in": "path", "required": true, "schema": {"type": "string"}});
    let name =
        json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}});
    let kind_param = |kinds: Vec<&str>| json!({"name": "kind", "in": "path", "required": true, "schema": {"enum": kinds}});
    let object_kind = kind_param(
        ResourceKind::ALL
            .into_iter()
            .filter(|k| *k != ResourceKind::TrainJob)
            .map(ResourceKind::plural)
            .collect(),
    );
    let cluster_kind = kind_param(
        ResourceKind::ALL
            .into_iter()
            .filter(|k| k.is_cluster_scoped())
            .map(ResourceKind::plural)
            .collect(),
    );
    let namespace_query = json!({"name": "namespace", "in": "query", "schema": {"type": "string"}});
    let along = json!({"name": "along", "in": "query", "schema": {"type": "string"},
        "description": "The other queues and cohorts the same command deletes, `queue/a,cohort/b`: the check of what is left counts them gone (ferry delete -f sends it)"});
    let selector = json!({"name": "labelSelector", "in": "query", "schema": {"type": "string"},
        "description": "Only objects whose metadata.labels match, in Kubernetes' selector syntax: \
            comma-separated requirements, all of which must hold: key=value, key==value, key!=value, \
            key in (v1,v2), key notin (v1,v2), key (exists), !key (absent). != and notin also \
            match objects without the key. A selector that does not parse is a 400 naming the \
            requirement and the fix.",
        "example": "team=nlp,tier in (gold,silver),!draft"});
    let ok = |description: &str, schema: Value| json!({"description": description, "content": {"application/json": {"schema": schema}}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Ferry control plane", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Plan, queue, train, checkpoint, convert and serve LLMs."},
        "paths": {
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": ok("alive", json!({"type": "object"}))}}},
            "/version": {"get": {"summary": "Version, schema version, GPU count", "responses": {"200": ok("version", json!({"type": "object"}))}}},
            "/api/v1/apply": {"post": {
                "summary": "Create or update resources (all-or-nothing validation)",
                "parameters": [{"name": "dryRun", "in": "query", "schema": {"type": "boolean"}}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"oneOf": [
                    {"$ref": "#/components/schemas/TrainJob"}, {"$ref": "#/components/schemas/ModelDeployment"},
                    {"$ref": "#/components/schemas/Queue"}, {"$ref": "#/components/schemas/PriorityClass"},
                    {"$ref": "#/components/schemas/Sweep"}, {"$ref": "#/components/schemas/Cohort"},
                    {"type": "array"}]}}}},
                "responses": {"200": ok("what was applied", json!({"type": "array"})), "400": err, "409": err, "422": err}}},
            "/api/v1/jobs": {"get": {"summary": "List jobs",
                "parameters": [namespace_query, selector],
                "responses": {"200": ok("jobs with status", json!({"type": "array", "items": job_ref})), "400": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}": {
                "get": {"summary": "One job with status and progress", "parameters": [ns, name],
                        "responses": {"200": ok("the job", job_ref.clone()), "404": err}},
                "delete": {"summary": "Delete a finished job", "parameters": [ns, name],
                           "responses": {"200": ok("deleted", json!({"type": "object"})), "404": err, "409": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}/events": {"get": {"summary": "The job's lifecycle events",
                "parameters": [ns, name], "responses": {"200": ok("events, oldest first", json!({"type": "array"})), "404": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}/logs": {"get": {"summary": "A rank's combined stdout/stderr",
                "parameters": [ns, name, {"name": "rank", "in": "query", "schema": {"type": "integer"}},
                               {"name": "follow", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {"200": {"description": "log text", "content": {"text/plain": {}}}, "404": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}/metrics": {"get": {"summary": "Metrics lines the engine printed",
                "parameters": [ns, name, {"name": "after", "in": "query", "schema": {"type": "integer"}},
                               {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                "responses": {"200": ok("metric rows", json!({"type": "array"})), "404": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}/cancel": {"post": {"summary": "Cancel: SIGTERM, grace, SIGKILL",
                "parameters": [ns, name], "responses": {"200": ok("the cancelled job", job_ref.clone()), "404": err, "409": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}/suspend": {"post": {"summary": "Suspend (spec.suspend: true): out of its queue; running ranks get SIGTERM and the grace period to checkpoint, as for a preemption",
                "parameters": [ns, name], "responses": {"200": ok("the suspended job (a suspended one as it is)", job_ref.clone()), "404": err, "409": err}}},
            "/api/v1/namespaces/{ns}/jobs/{name}/resume": {"post": {"summary": "Resume a suspended job (spec.suspend: false): queued again, it resumes from its latest checkpoint",
                "parameters": [ns, name], "responses": {"200": ok("the queued job", job_ref.clone()), "404": err, "409": err}}},
            "/api/v1/{kind}": {"get": {"summary": "List deployments, queues, priority classes (these with ferry up's own) or cohorts",
                "description": "Queues, priority classes and cohorts are named across namespaces: all are listed, whatever `namespace` says.",
                "parameters": [{"name": "kind", "in": "path", "required": true, "schema": {"enum": ["deployments", "queues", "priorityclasses", "cohorts"]}},
                               namespace_query, selector],
                "responses": {"200": ok("objects", json!({"type": "array"})), "400": err, "404": err}}},
            "/api/v1/namespaces/{ns}/{kind}/{name}": {
                "get": {"summary": "One deployment, queue, priority class or cohort (queues, priority classes and cohorts: any ns)",
                        "parameters": [ns, object_kind, name], "responses": {"200": ok("the object", json!({"type": "object"})), "404": err}},
                "delete": {"summary": "Delete a deployment, queue, priority class or cohort (queues, priority classes and cohorts: any ns)",
                           "parameters": [ns, object_kind, name, along], "responses": {"200": ok("deleted", json!({"type": "object"})), "404": err, "409": err}}},
            "/api/v1/{kind}/{name}": {
                "get": {"summary": "One queue, priority class or cohort (named across namespaces; ferry up's own classes too)",
                        "parameters": [cluster_kind, name], "responses": {"200": ok("the object", json!({"type": "object"})), "404": err}},
                "delete": {"summary": "Delete a queue, priority class or cohort (409: ferry up's own classes, a queue or class an unfinished job names, a queue or cohort the queues and trees left would not build a scheduler without)",
                           "parameters": [cluster_kind, name, along], "responses": {"200": ok("deleted", json!({"type": "object"})), "404": err, "409": err}}},
            "/api/v1/models": {"get": {"summary": "Registered models",
                "description": "A model carries the labels of the job that exported it (a sweep's jobs' `ferry.dev/sweep` among them); a labelSelector is matched against those.",
                "parameters": [selector], "responses": {"200": ok("models", json!({"type": "array"})), "400": err}}},
            "/api/v1/models/{name}": {
                "get": {"summary": "One registered model", "parameters": [name],
                        "responses": {"200": ok("the model", json!({"type": "object"})), "404": err}},
                "delete": {"summary": "Unregister a model; its files go too when they lie under $FERRY_HOME/models/",
                           "description": "Refused (409, naming each) while a ModelDeployment serves it (spec.model or spec.adapters) or an unfinished TrainJob starts from it (spec.model). Files registered from elsewhere are kept. The name may be registered again afterwards.",
                           "parameters": [name],
                           "responses": {"200": ok("what was deleted", json!({"type": "object", "properties": {
                               "deleted": {"type": "string"}, "path": {"type": "string"},
                               "filesRemoved": {"type": "boolean"},
                               "note": {"type": "string", "description": "why the files were not removed, when they were not"}},
                               "required": ["deleted", "path", "filesRemoved"]})),
                                         "404": err, "409": err}}},
            "/api/v1/gpus": {"get": {"summary": "GPU inventory", "responses": {"200": ok("inventory", json!({"type": "object"}))}}}
        },
        "components": {"schemas": schemas}
    })
}

fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
            {
                *r = format!("#/components/schemas/{name}");
            }
            map.values_mut().for_each(rewrite_refs);
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_resolves_inside_the_document() {
        let doc = build();
        let text = doc.to_string();
        assert!(!text.contains("#/$defs/"), "unrewritten refs");
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        assert!(refs.len() > 10);
        for action in ["cancel", "suspend", "resume"] {
            let path = format!("/api/v1/namespaces/{{ns}}/jobs/{{name}}/{action}");
            assert!(
                doc["paths"][&path]["post"]["responses"]["409"].is_object(),
                "{path}"
            );
        }
        for r in refs {
            let pointer = r.strip_prefix('#').unwrap();
            assert!(doc.pointer(pointer).is_some(), "dangling {r}");
        }
    }

    #[test]
    fn the_cluster_wide_route_names_the_cluster_scoped_kinds() {
        let doc = build();
        let kinds =
            &doc["paths"]["/api/v1/{kind}/{name}"]["get"]["parameters"][0]["schema"]["enum"];
        assert_eq!(kinds, &json!(["queues", "priorityclasses", "cohorts"]));
        assert!(doc["paths"]["/api/v1/namespaces/{ns}/{kind}/{name}"]["delete"].is_object());
        assert!(doc["paths"]["/api/v1/models/{name}"]["delete"]["responses"]["409"].is_object());
    }

    #[test]
    fn every_list_route_takes_a_label_selector() {
        let doc = build();
        for path in ["/api/v1/jobs", "/api/v1/{kind}", "/api/v1/models"] {
            let list = &doc["paths"][path]["get"];
            let names: Vec<&Value> = list["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| &p["name"])
                .collect();
            assert!(
                names.contains(&&json!("labelSelector")),
                "{path}: {names:?}"
            );
            assert!(list["responses"]["400"].is_object(), "{path}");
        }
    }

    fn collect_refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|v| collect_refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
            _ => {}
        }
    }
}

//! The Helm chart without `helm`: templates use only `{{ .Values.path }}`,
//! `{{ .Release.Name }}` and `{{ .Release.Namespace }}`, so this renderer substitutes them
//! from `values.yaml` itself — and fails on any other template expression, which keeps the
//! chart within what it can check. Every rendered object validates strictly.

use std::path::PathBuf;

use serde_json::Value;

use crate::schema::assert_valid;

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/ferry")
}

fn lookup<'a>(values: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(values, |v, key| v.get(key))
}

/// Renders one template text.
fn render_template(text: &str, values: &Value, file: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .ok_or(format!("{file}: unclosed {{{{"))?
            + start;
        let expr = rest[start + 2..end].trim();
        let value = match expr {
            ".Release.Namespace" => "ferry-system".to_owned(),
            ".Release.Name" => "ferry".to_owned(),
            e if e.starts_with(".Values.") => match lookup(values, &e[".Values.".len()..]) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                other => {
                    return Err(format!(
                        "{file}: {e} is {other:?}, not a scalar in values.yaml"
                    ));
                }
            },
            e => {
                return Err(format!(
                    "{file}: unsupported template expression {{{{ {e} }}}}"
                ));
            }
        };
        out.push_str(&value);
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn documents(text: &str, file: &str) -> Vec<Value> {
    text.split("\n---\n")
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap_or_else(|e| panic!("{file}: {e}\n{d}")))
        .collect()
}

fn render_chart() -> Vec<Value> {
    let values_text = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let values: Value = serde_saphyr::from_str(&values_text).unwrap();
    let mut entries: Vec<_> = std::fs::read_dir(chart().join("templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let mut objs = Vec::new();
    for path in entries {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let rendered = render_template(&text, &values, &file).unwrap_or_else(|e| panic!("{e}"));
        objs.extend(documents(&rendered, &file));
    }
    objs
}

#[test]
fn chart_templates_render_and_validate() {
    let objs = render_chart();
    assert_valid(&objs);
    let kinds: Vec<String> = objs
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    for want in [
        "Deployment/ferry-operator",
        "Deployment/ferry-gateway",
        "ClusterRole/ferry-operator",
        "Role/ferry-operator-leader",
        "Service/ferry-gateway",
        "PersistentVolumeClaim/ferry-checkpoints",
    ] {
        assert!(
            kinds.contains(&want.to_string()),
            "{want} missing from {kinds:?}"
        );
    }
    let op = objs
        .iter()
        .find(|o| o["metadata"]["name"] == "ferry-operator" && o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(
        op["spec"]["replicas"], 2,
        "numbers stay numbers after substitution"
    );
    // The gateway discovers replicas from EndpointSlices, and may watch them.
    let find = |kind: &str, name: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind}/{name}"))
    };
    let gw = find("Deployment", "ferry-gateway");
    let pod = &gw["spec"]["template"]["spec"];
    assert!(
        pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&Value::from("--kubernetes")),
        "{pod}"
    );
    let sa = pod["serviceAccountName"].as_str().unwrap();
    let binding = find("ClusterRoleBinding", "ferry-gateway");
    assert_eq!(binding["subjects"][0]["name"], sa);
    let role = find("ClusterRole", binding["roleRef"]["name"].as_str().unwrap());
    assert!(
        role["rules"].as_array().unwrap().iter().any(|r| {
            let has = |k: &str, v: &str| r[k].as_array().unwrap().contains(&Value::from(v));
            has("apiGroups", "discovery.k8s.io")
                && has("resources", "endpointslices")
                && has("verbs", "list")
                && has("verbs", "watch")
        }),
        "{role}"
    );
    // The operator reads its scheduler switches from the ConfigMap it mounts; the chart's
    // default is an empty mapping (every switch at its default).
    let op_pod = &find("Deployment", "ferry-operator")["spec"]["template"]["spec"];
    let container = &op_pod["containers"][0];
    assert!(
        container["args"].as_array().unwrap().contains(&Value::from(
            "--scheduler-options=/etc/ferry/scheduler/options.yaml"
        )),
        "{container}"
    );
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        "/etc/ferry/scheduler"
    );
    let volume = &op_pod["volumes"][0];
    assert_eq!(volume["name"], container["volumeMounts"][0]["name"]);
    let options = find("ConfigMap", volume["configMap"]["name"].as_str().unwrap());
    let switches: Value =
        serde_saphyr::from_str(options["data"]["options.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(switches, serde_json::json!({}));
    insta::assert_snapshot!("chart", ferry_k8s::to_yaml(&objs).unwrap());
}

#[test]
fn operator_rbac_is_least_privilege() {
    let objs = render_chart();
    let role = objs
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "ferry-operator")
        .unwrap();
    for rule in role["rules"].as_array().unwrap() {
        let verbs: Vec<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let resources: Vec<&str> = rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            !verbs.contains(&"*") && !resources.contains(&"*"),
            "no wildcards: {rule}"
        );
        assert!(
            !resources.contains(&"secrets"),
            "the operator never reads secrets: {rule}"
        );
        if verbs.contains(&"update") {
            assert!(
                resources.iter().all(|r| r.ends_with("/finalizers")),
                "update only for finalizers: {rule}"
            );
        }
    }
    // The Lease is writable only in the release namespace.
    assert!(!role.to_string().contains("leases"));
}

#[test]
fn unsupported_template_syntax_is_refused() {
    let values: Value = serde_json::json!({"a": {"b": 1}});
    assert_eq!(
        render_template("x: {{ .Values.a.b }}", &values, "t").unwrap(),
        "x: 1"
    );
    assert!(
        render_template("{{ if .Values.a }}x{{ end }}", &values, "t")
            .unwrap_err()
            .contains("unsupported")
    );
    assert!(
        render_template("{{ .Values.a }}", &values, "t")
            .unwrap_err()
            .contains("not a scalar")
    );
}

#[test]
fn chart_crds_match_the_generated_ones() {
    for (name, body) in ferry_k8s::crd_files().unwrap() {
        let on_disk = std::fs::read_to_string(chart().join("crds").join(&name)).unwrap_or_default();
        assert_eq!(
            on_disk, body,
            "charts/ferry/crds/{name} is stale; run `ferry crds`"
        );
    }
}

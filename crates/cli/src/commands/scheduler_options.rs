//! The scheduler's policy switches from a YAML/JSON file, shared by `ferry sim --options`,
//! `ferry up --scheduler-options` and `ferry operator --scheduler-options`, so the policy a
//! platform team simulated is the one its control plane runs.

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Map, Value};

/// The defaults with the file's switches over them (`{drainOvershootPct: 25, holdForOwed:
/// true}`; the `Options` fields of docs/scheduler.md, camelCase); a switch the options do not
/// have is refused by name, with the known ones (a typo would otherwise be ignored).
pub(crate) fn read(path: &Path) -> anyhow::Result<ferry_sched::Options> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read options file {}", path.display()))?;
    let given: Value = serde_saphyr::from_str(&text).with_context(|| {
        format!(
            "options file {} is not valid YAML or JSON: see docs/scheduler.md for its switches",
            path.display()
        )
    })?;
    let Some(given) = given.as_object() else {
        anyhow::bail!(
            "options file {}: expected a mapping of switches, e.g. {{drainOvershootPct: 25}}",
            path.display()
        );
    };
    let mut options = defaults();
    for (key, value) in given {
        if !options.contains_key(key) {
            let mut names: Vec<&str> = options.keys().map(String::as_str).collect();
            names.sort_unstable();
            anyhow::bail!(
                "options file {}: unknown switch `{key}`; fix: use one of {}",
                path.display(),
                names.join(", ")
            );
        }
        options.insert(key.clone(), value.clone());
    }
    serde_json::from_value(Value::Object(options)).with_context(|| {
        format!(
            "options file {}: a switch has a value of the wrong type (see docs/scheduler.md)",
            path.display()
        )
    })
}

/// The switches of `options` that differ from the defaults, as `name=value` (empty when none),
/// for the line a control plane logs when it starts.
pub(crate) fn changed(options: &ferry_sched::Options) -> String {
    let defaults = defaults();
    let Ok(Value::Object(given)) = serde_json::to_value(options) else {
        return String::new();
    };
    given
        .iter()
        .filter(|(k, v)| defaults.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn defaults() -> Map<String, Value> {
    match serde_json::to_value(ferry_sched::Options::default()) {
        Ok(Value::Object(m)) => m,
        _ => unreachable!("Options serialize as a map"),
    }
}

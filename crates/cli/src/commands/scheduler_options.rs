//! The scheduler's settings from files: policy switches, shared by `ferry sim --options`,
//! `ferry up --scheduler-options` and `ferry operator --scheduler-options` (so the policy a
//! platform team simulated is the one its control plane runs), and the named priorities of
//! `ferry up --priority-classes`.

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
    let options: ferry_sched::Options = serde_json::from_value(Value::Object(options))
        .with_context(|| {
            format!(
                "options file {}: a switch has a value of the wrong type (see docs/scheduler.md)",
                path.display()
            )
        })?;
    let max = ferry_sched::MAX_SPLIT_SLOWDOWN_PCT;
    if options.split_slowdown_pct > max {
        anyhow::bail!(
            "options file {}: splitSlowdownPct {} is more than {max}; fix: give how much longer \
             (percent) a gang runs split across racks, 0 to {max}",
            path.display(),
            options.split_slowdown_pct
        );
    }
    Ok(options)
}

/// A control plane's switches: the defaults without a file, else the file's (`read`), logged
/// with the ones that differ from the defaults.
pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<ferry_sched::Options> {
    let Some(path) = path else {
        return Ok(ferry_sched::Options::default());
    };
    let options = read(path)?;
    tracing::info!(
        file = %path.display(),
        switches = %changed(&options),
        "scheduler policy switches (others at their defaults)"
    );
    Ok(options)
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

/// One class of a `--priority-classes` file: a value, or `{value, preempting}`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum ClassEntry {
    Value(i32),
    Full {
        value: i32,
        #[serde(default = "yes")]
        preempting: bool,
    },
}

fn yes() -> bool {
    true
}

/// Ferry's `low`, `normal` and `high` with the classes of a YAML/JSON mapping `{production:
/// 1000, overnight: {value: 2000, preempting: false}}` (name → value; higher runs first and
/// may preempt lower work in its queue unless `preempting: false`, Kubernetes'
/// `preemptionPolicy: Never`; a standard name given there is replaced), as Kubernetes'
/// `PriorityClass`es are to a cluster.
pub(crate) fn priority_classes(path: &Path) -> anyhow::Result<Vec<ferry_sched::PriorityClass>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read priority classes file {}", path.display()))?;
    let given: std::collections::BTreeMap<String, ClassEntry> = serde_saphyr::from_str(&text)
        .with_context(|| {
            format!(
                "priority classes file {}: expected a mapping of names to whole numbers or \
                 {{value, preempting}}, e.g. {{production: 1000, overnight: {{value: 2000, \
                 preempting: false}}}}",
                path.display()
            )
        })?;
    for name in given.keys() {
        if let Err(problem) = ferry_spec::validate_name(name) {
            anyhow::bail!(
                "priority classes file {}: class `{name}`: {problem}; fix: use a lowercase name \
                 such as `production`",
                path.display()
            );
        }
    }
    Ok(ferry_sched::PriorityClass::with_extra(
        ferry_sched::PriorityClass::standard(),
        given.into_iter().map(|(name, entry)| {
            let (value, preempting) = match entry {
                ClassEntry::Value(value) => (value, true),
                ClassEntry::Full { value, preempting } => (value, preempting),
            };
            ferry_sched::PriorityClass {
                preempting,
                ..ferry_sched::PriorityClass::new(&name, value)
            }
        }),
    ))
}

/// `name=value` of each class, highest first, for the line a control plane logs when it starts.
pub(crate) fn describe_classes(classes: &[ferry_sched::PriorityClass]) -> String {
    let mut sorted: Vec<&ferry_sched::PriorityClass> = classes.iter().collect();
    sorted.sort_by_key(|c| std::cmp::Reverse(c.value));
    sorted
        .iter()
        .map(|c| {
            let never = if c.preempting {
                ""
            } else {
                " (never preempts)"
            };
            format!("{}={}{never}", c.name, c.value)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

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

/// Ferry's `low`, `normal` and `high` with the classes of a file added (a standard name given
/// there is replaced), as Kubernetes' `PriorityClass`es are to a cluster, and the notes to show
/// the user (what the file had that Ferry does not take over). The file holds either the
/// cluster's class objects (`kubectl get priorityclasses -o yaml`, Kueue's
/// WorkloadPriorityClasses, Ferry's `PriorityClass` documents: [`class_objects`]) or a YAML/JSON
/// mapping `{production: 1000, overnight: {value: 2000, preempting: false}}` (name → value;
/// higher runs first and may preempt lower work in its queue unless `preempting: false`,
/// Kubernetes' `preemptionPolicy: Never`), told apart by whether it has `apiVersion`/`kind`.
pub(crate) fn priority_classes(
    path: &Path,
) -> anyhow::Result<(Vec<ferry_sched::PriorityClass>, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read priority classes file {}", path.display()))?;
    let (given, notes) = if ferry_spec::holds_kubernetes_objects(&text) {
        class_objects(&text, path)?
    } else {
        (class_mapping(&text, path)?, Vec::new())
    };
    Ok((
        ferry_sched::PriorityClass::with_extra(ferry_sched::PriorityClass::standard(), given),
        notes,
    ))
}

/// The classes of a mapping of names to values or `{value, preempting}`.
fn class_mapping(text: &str, path: &Path) -> anyhow::Result<Vec<ferry_sched::PriorityClass>> {
    let given: std::collections::BTreeMap<String, ClassEntry> = serde_saphyr::from_str(text)
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
    Ok(given
        .into_iter()
        .map(|(name, entry)| {
            let (value, preempting) = match entry {
                ClassEntry::Value(value) => (value, true),
                ClassEntry::Full { value, preempting } => (value, preempting),
            };
            ferry_sched::PriorityClass {
                preempting,
                ..ferry_sched::PriorityClass::new(&name, value)
            }
        })
        .collect())
}

/// The classes of a file of class objects (`ferry_spec::read_priority_classes`), with its
/// notes. A job without a priority gets `normal`, as a pod without one gets the cluster's
/// `globalDefault` class: so the file's global default also defines `normal`, at its value and
/// preemption (refused when the file defines a different `normal` as well).
fn class_objects(
    text: &str,
    path: &Path,
) -> anyhow::Result<(Vec<ferry_sched::PriorityClass>, Vec<String>)> {
    let read = ferry_spec::read_priority_classes(text, &path.display().to_string())?;
    let mut notes = read.notes;
    let mut classes: Vec<ferry_sched::PriorityClass> = read
        .classes
        .iter()
        .map(|c| ferry_sched::PriorityClass {
            preempting: c.preempting,
            ..ferry_sched::PriorityClass::new(&c.name, c.value)
        })
        .collect();
    let normal = ferry_sched::DEFAULT_PRIORITY;
    let default = read
        .global_default
        .and_then(|name| classes.iter().find(|c| c.name == name).cloned())
        .filter(|d| d.name != normal);
    if let Some(default) = default {
        let policy = |c: &ferry_sched::PriorityClass| {
            let never = if c.preempting { "" } else { ", never preempts" };
            format!("value {}{never}", c.value)
        };
        match classes.iter().find(|c| c.name == normal) {
            Some(given)
                if (given.value, given.preempting) != (default.value, default.preempting) =>
            {
                anyhow::bail!(
                    "priority classes file {}: `{}` is the globalDefault ({}), the class of a job \
                     without a priority, which Ferry calls `{normal}`; but the file also defines \
                     `{normal}` ({}); fix: remove `{normal}` from the file, give it `{}`'s value \
                     and preemptionPolicy, or set globalDefault: false on `{}`",
                    path.display(),
                    default.name,
                    policy(&default),
                    policy(given),
                    default.name,
                    default.name
                );
            }
            Some(_) => {}
            None => classes.push(ferry_sched::PriorityClass {
                name: normal.to_owned(),
                ..default.clone()
            }),
        }
        notes.push(format!(
            "`{}` is the globalDefault: a job without a priority gets `{normal}`, {}",
            default.name,
            policy(&default)
        ));
    }
    Ok((classes, notes))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `priority_classes` of a file holding `text`: the classes as `name=value`, highest first,
    /// and the notes.
    fn read_classes(text: &str) -> anyhow::Result<(String, Vec<String>)> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("classes.yaml");
        std::fs::write(&path, text)?;
        let (classes, notes) = priority_classes(&path)?;
        Ok((describe_classes(&classes), notes))
    }

    /// A Kubernetes PriorityClass as `kubectl get -o yaml` lists it.
    fn item(name: &str, fields: &str) -> String {
        format!(
            "- apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n  metadata: {{name: \
             {name}, uid: 0f1e}}\n{fields}"
        )
    }

    fn list(items: &[String]) -> String {
        format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat())
    }

    #[test]
    fn a_mapping_is_read_as_before() {
        let (classes, notes) =
            read_classes("production: 1000\novernight: {value: 2000, preempting: false}\n")
                .unwrap();
        assert_eq!(
            classes,
            "overnight=2000 (never preempts) production=1000 high=100 normal=0 low=-100"
        );
        assert!(notes.is_empty());
        let err = read_classes("production: lots\n").unwrap_err().to_string();
        assert!(
            err.contains("expected a mapping of names to whole numbers"),
            "{err}"
        );
    }

    #[test]
    fn the_global_default_class_is_also_normal() {
        let text = list(&[
            item(
                "system-node-critical",
                "  value: 2000001000\n  preemptionPolicy: PreemptLowerPriority\n",
            ),
            item("production", "  value: 1000\n"),
            item(
                "standard",
                "  value: 500\n  globalDefault: true\n  preemptionPolicy: Never\n",
            ),
        ]);
        let (classes, notes) = read_classes(&text).unwrap();
        assert_eq!(
            classes,
            "production=1000 normal=500 (never preempts) standard=500 (never preempts) high=100 \
             low=-100"
        );
        assert_eq!(
            notes,
            [
                "skipped Kubernetes' own system-node-critical (for the cluster's critical pods, \
                 not for jobs)",
                "`standard` is the globalDefault: a job without a priority gets `normal`, value \
                 500, never preempts",
            ]
        );
        // The same `normal` given again, or the default being `normal` itself, is no conflict.
        let same = format!(
            "{text}{}",
            item("normal", "  value: 500\n  preemptionPolicy: Never\n")
        );
        assert!(read_classes(&same).is_ok());
        let (classes, notes) = read_classes(&list(&[item(
            "normal",
            "  value: 7\n  globalDefault: true\n",
        )]))
        .unwrap();
        assert_eq!(classes, "high=100 normal=7 low=-100");
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_different_normal_beside_a_global_default_is_refused() {
        let text = list(&[
            item("standard", "  value: 500\n  globalDefault: true\n"),
            item("normal", "  value: 0\n"),
        ]);
        let err = read_classes(&text).unwrap_err().to_string();
        assert!(
            err.contains(
                "`standard` is the globalDefault (value 500), the class of a job without a \
                 priority, which Ferry calls `normal`; but the file also defines `normal` (value \
                 0); fix: remove `normal` from the file, give it `standard`'s value and \
                 preemptionPolicy, or set globalDefault: false on `standard`"
            ),
            "{err}"
        );
    }

    #[test]
    fn class_objects_are_refused_by_field() {
        let text = list(&[item("production", "  value: \"1000\"\n")]);
        let err = read_classes(&text).unwrap_err().to_string();
        assert!(
            err.contains("classes.yaml: PriorityClass/production: value:"),
            "{err}"
        );
        assert!(err.contains("write it without quotes"), "{err}");
    }
}

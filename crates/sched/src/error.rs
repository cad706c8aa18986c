//! The crate's one error type.

use thiserror::Error;

/// Everything the scheduler can refuse; each message names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SchedError {
    /// The cluster, queue set or priority set is malformed.
    #[error("invalid config at `{field}`: {problem}; fix: {fix}")]
    InvalidConfig {
        /// Path of the offending field, e.g. `queues[2].cohort`.
        field: String,
        /// What is wrong with it.
        problem: String,
        /// What would make it valid.
        fix: String,
    },
    /// A workload cannot be accepted (it would otherwise wait forever).
    #[error("workload `{id}` rejected at `{field}`: {problem}; fix: {fix}")]
    InvalidWorkload {
        /// The workload's id.
        id: String,
        /// Path of the offending field, e.g. `workload.queue`.
        field: String,
        /// What is wrong with it.
        problem: String,
        /// What would make it acceptable.
        fix: String,
    },
    /// An event names a workload the scheduler does not know (or in the wrong state).
    #[error("unknown workload `{id}` for `{event}`: {problem}")]
    UnknownWorkload {
        /// The id given.
        id: String,
        /// The event that named it (`finished`, `evicted`, `checkpointed`).
        event: &'static str,
        /// Why it does not apply.
        problem: String,
    },
    /// A trace file could not be read or parsed.
    #[error("trace `{file}`{}: {problem}; fix: {fix}", at_line(*.line))]
    Trace {
        /// The trace file (or `<memory>`).
        file: String,
        /// 1-based line number (0 for file-level problems).
        line: usize,
        /// What is wrong.
        problem: String,
        /// What would fix it.
        fix: String,
    },
}

/// ` line N` for a row's problem, nothing for one of the whole file (line 0).
fn at_line(line: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" line {line}")
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = SchedError> = std::result::Result<T, E>;

/// The problem and the fix for a workload that names `queue` when only `known` exist, in one
/// wording for the scheduler's `submit` and for checks made without a scheduler (an apply whose
/// queues cannot build one).
pub fn unknown_queue<'a>(
    queue: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> (String, String) {
    let mut known: Vec<&str> = known.into_iter().collect();
    known.sort_unstable();
    let (near, known) = near_miss(queue, known);
    (
        format!("queue `{queue}` does not exist{near}"),
        format!("create the queue or use one of: {known}"),
    )
}

/// The problem and the fix for a workload that names priority class `class` when only the
/// `known` classes (name, value) exist, listed lowest first, in one wording for the scheduler's
/// `submit` and for `ferry apply`'s check.
pub fn unknown_priority<'a>(
    class: &str,
    known: impl IntoIterator<Item = (&'a str, i32)>,
) -> (String, String) {
    let mut known: Vec<(&str, i32)> = known.into_iter().collect();
    known.sort_by_key(|&(name, value)| (value, name));
    let (near, known) = near_miss(class, known.into_iter().map(|(name, _)| name).collect());
    (
        format!("priority class `{class}` does not exist{near}"),
        format!("use one of: {known}"),
    )
}

/// ` (did you mean `nlp`?)` for the known name closest to `given` (`nlpp`), when one is close
/// enough to be the likely fix, and every known name listed.
fn near_miss(given: &str, known: Vec<&str>) -> (String, String) {
    let near = (known.iter())
        .map(|k| (strsim::jaro_winkler(given, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    (near, known.join(", "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_near_miss_of_a_queue_is_named_and_every_queue_listed() {
        let (problem, fix) = super::unknown_queue("nlpp", ["vision", "nlp", "default"]);
        assert_eq!(problem, "queue `nlpp` does not exist (did you mean `nlp`?)");
        assert_eq!(fix, "create the queue or use one of: default, nlp, vision");
        let (problem, fix) =
            super::unknown_priority("hihg", [("high", 100), ("low", -100), ("normal", 0)]);
        assert_eq!(
            (problem.as_str(), fix.as_str()),
            (
                "priority class `hihg` does not exist (did you mean `high`?)",
                "use one of: low, normal, high"
            )
        );
        let (problem, _) = super::unknown_queue("zzz", ["vision", "nlp"]);
        assert_eq!(problem, "queue `zzz` does not exist");
    }
}

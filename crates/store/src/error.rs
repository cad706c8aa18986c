//! The one error type of the store: every variant names the object and the fix.

use ferry_spec::{JobPhase, TransitionError};

/// Everything that can go wrong while reading or writing Ferry's metadata.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist (or no longer does).
    #[error("{kind} {id} not found; list what exists with `ferry get {noun}`", noun = cli_noun(kind))]
    NotFound {
        /// Resource kind, e.g. `TrainJob`.
        kind: String,
        /// `namespace/name`, or `uid <uid>`.
        id: String,
    },

    /// Another object of this kind already has the name.
    #[error(
        "{kind} {qualified} already exists; pick another metadata.name or remove the old one with `ferry delete {noun} {name}` first",
        qualified = qualified(namespace, name),
        noun = cli_singular(kind)
    )]
    AlreadyExists {
        /// Resource kind, e.g. `TrainJob`.
        kind: String,
        /// Namespace of the existing object (empty for cluster-wide kinds such as models).
        namespace: String,
        /// The name that is taken.
        name: String,
    },

    /// A compare-and-set on the job phase lost: someone else moved the job first.
    #[error(
        "job {namespace}/{name} is {actual}, not {expected} as this change assumed (another writer moved it first); re-read the job and decide again"
    )]
    Conflict {
        /// Namespace of the job.
        namespace: String,
        /// Name of the job.
        name: String,
        /// The phase the caller expected the job to be in.
        expected: JobPhase,
        /// The phase the job is really in.
        actual: JobPhase,
    },

    /// The state machine in `ferry-spec` forbids the transition.
    #[error(
        "job {job}: {source}; only the transitions listed in ferry-spec's lifecycle are allowed"
    )]
    IllegalTransition {
        /// `namespace/name` of the job.
        job: String,
        /// The forbidden step.
        #[source]
        source: TransitionError,
    },

    /// Only finished jobs may be deleted, so that no running process loses its record.
    #[error(
        "job {job} is {phase}; cancel it first (`ferry cancel job {name}`) and delete it once it has stopped"
    )]
    NotDeletable {
        /// `namespace/name` of the job.
        job: String,
        /// Its bare name, for the suggested command.
        name: String,
        /// The phase that prevents deletion.
        phase: JobPhase,
    },

    /// A value given to the store cannot be stored (e.g. a JSON document that does not serialise).
    #[error("cannot store {what}: {detail}")]
    InvalidInput {
        /// What was being stored.
        what: String,
        /// Why it was refused and what to change.
        detail: String,
    },

    /// A stored row could not be read back; the database was changed outside Ferry or by a newer release.
    #[error(
        "stored {what} in {location} is unreadable: {detail}; was the database written by a newer Ferry? upgrade, or restore a backup"
    )]
    Corrupt {
        /// Which row or column.
        what: String,
        /// The database path or URL (passwords removed).
        location: String,
        /// What was wrong.
        detail: String,
    },

    /// The database refused or failed a statement.
    #[error(
        "database error at {location}: {source}; check that the database is reachable and writable"
    )]
    Database {
        /// The database path or URL (passwords removed).
        location: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// The schema migrations failed to apply.
    #[error(
        "could not migrate the database schema at {location}: {source}; if another Ferry version wrote this database, use that version or a newer one"
    )]
    Migration {
        /// The database path or URL (passwords removed).
        location: String,
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },

    /// The database file or its directory could not be created.
    #[error(
        "cannot create the database directory {path}: {source}; set FERRY_HOME to a writable directory"
    )]
    Io {
        /// The directory.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// `namespace/name`, or just `name` for cluster-wide kinds.
fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// The plural noun `ferry get` takes for a kind.
fn cli_noun(kind: &str) -> String {
    match kind {
        "TrainJob" => "jobs".into(),
        "ModelDeployment" => "deployments".into(),
        "Queue" => "queues".into(),
        "PriorityClass" => "priorityclasses".into(),
        "Model" => "models".into(),
        other => format!("{}s", other.to_ascii_lowercase()),
    }
}

/// The singular noun `ferry delete` takes for a kind.
fn cli_singular(kind: &str) -> String {
    match kind {
        "TrainJob" => "job".into(),
        "ModelDeployment" => "deployment".into(),
        other => other.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_object_and_the_fix() {
        let e = StoreError::AlreadyExists {
            kind: "TrainJob".into(),
            namespace: "team-a".into(),
            name: "hello".into(),
        };
        let msg = e.to_string();
        assert!(msg.contains("team-a/hello"), "{msg}");
        assert!(msg.contains("ferry delete job hello"), "{msg}");

        let e = StoreError::NotFound {
            kind: "ModelDeployment".into(),
            id: "default/chat".into(),
        };
        assert!(e.to_string().contains("ferry get deployments"), "{e}");

        let e = StoreError::Conflict {
            namespace: "default".into(),
            name: "x".into(),
            expected: JobPhase::Running,
            actual: JobPhase::Cancelled,
        };
        let msg = e.to_string();
        assert!(msg.contains("is Cancelled, not Running"), "{msg}");
    }
}

//! The crate's one error type: every variant names the field or object and the fix.

/// Everything that can go wrong while rendering, checking or reconciling.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// A spec value cannot be turned into cluster objects.
    #[error("{object}: {field}: {message}")]
    Invalid {
        /// `Kind/namespace/name` of the offending resource.
        object: String,
        /// Dotted field path, e.g. `spec.resources.gpusPerNode`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Several problems found before anything was created.
    #[error("{} problem(s) found, nothing was created:\n{}", .0.len(), .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Many(Vec<K8sError>),
    /// The planner refused the job.
    #[error("{object}: the planner cannot plan it: {source}")]
    Plan {
        /// `Kind/namespace/name` of the job.
        object: String,
        /// The planner's reason.
        #[source]
        source: ferry_plan::PlanError,
    },
    /// A schema could not be turned into a CRD schema.
    #[error("CRD schema for {kind}: {message}")]
    Schema {
        /// The resource kind.
        kind: String,
        /// What could not be converted.
        message: String,
    },
    /// The Kubernetes API answered with an error.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A JSON value did not have the expected shape.
    #[error("{what}: {source}")]
    Json {
        /// What was being (de)serialised.
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand used across the crate.
pub type Result<T, E = K8sError> = std::result::Result<T, E>;

impl K8sError {
    /// A field error on one object.
    pub fn invalid(
        object: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        K8sError::Invalid {
            object: object.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// One error when `errors` holds one, a [`K8sError::Many`] otherwise; `Ok` when empty.
    pub fn collect(mut errors: Vec<K8sError>) -> Result<()> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(K8sError::Many(errors)),
        }
    }
}

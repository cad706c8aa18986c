//! The errors this crate reports.

use std::fmt;

/// One problem with one field: where it is and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `spec.resources.gpusPerNode`.
    pub path: String,
    /// What is wrong and how to fix it, e.g. `must be 0 or more (got -1)`.
    pub message: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Why a document could not become a resource.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The text is not well-formed YAML or JSON.
    #[error("{source_name}: not valid {format}: {message}")]
    Syntax {
        /// File name or other label of the input.
        source_name: String,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message, with its line and column.
        message: String,
    },
    /// The document parsed but has problems; all of them are listed.
    #[error("{source_name}: {}", join_problems(.problems))]
    Invalid {
        /// File name or other label of the input.
        source_name: String,
        /// Every problem found, in document order.
        problems: Vec<FieldError>,
    },
    /// More than one document of an input is refused: each one's error, in order, so a
    /// multi-document file is fixed in one pass rather than one document per try.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Documents(Vec<SpecError>),
}

impl SpecError {
    /// One error for the refused documents of an input: none, the one as it is, or
    /// [`SpecError::Documents`] with each.
    pub fn gathered(mut errors: Vec<SpecError>) -> Option<SpecError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(SpecError::Documents(errors)),
        }
    }

    /// The field problems of every refused document, empty for syntax errors.
    pub fn problems(&self) -> Vec<&FieldError> {
        match self {
            SpecError::Syntax { .. } => Vec::new(),
            SpecError::Invalid { problems, .. } => problems.iter().collect(),
            SpecError::Documents(errors) => errors.iter().flat_map(SpecError::problems).collect(),
        }
    }
}

fn join_problems(problems: &[FieldError]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a label selector string is not a selector: which requirement, what is wrong and the
/// fix, e.g. `label selector "team in (a,b": requirement 1 has no closing ")"; write key in
/// (v1,v2)`. Selectors arrive in query strings, so the text is quoted with escapes and cut short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector {selector}: requirement {requirement} {problem}")]
pub struct SelectorError {
    /// The selector as given, quoted, its first 100 characters at most.
    pub selector: String,
    /// Which comma-separated requirement is wrong, counted from 1.
    pub requirement: usize,
    /// What is wrong with it and how to write it instead.
    pub problem: String,
}

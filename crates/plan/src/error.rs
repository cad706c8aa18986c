//! The planner's one error type: every variant names the field or file at fault and what fixes it.

use thiserror::Error;

/// Result alias used across the planner.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;

/// Everything that can go wrong while reading a model config or planning a job.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PlanError {
    /// The config is not valid JSON (or not a JSON object).
    #[error(
        "{file}: not a valid config.json ({reason}); pass the Hugging Face config.json of the model"
    )]
    ConfigSyntax {
        /// Which config (path or catalogue id).
        file: String,
        /// Parser message.
        reason: String,
    },
    /// `model_type` / `architectures` names an architecture the planner has no shape rules for.
    #[error(
        "{file}: field `model_type` = {model_type:?} is not supported; supported: {supported}; \
         set `model.path` to a config of a supported architecture or plan with --mode and explicit numbers"
    )]
    UnknownArchitecture {
        /// Which config.
        file: String,
        /// The value found.
        model_type: String,
        /// Comma-separated supported types.
        supported: String,
    },
    /// A field needed to compute shapes is absent or has the wrong type.
    #[error("{file}: field `{field}` is missing or not a positive integer ({hint})")]
    MissingField {
        /// Which config.
        file: String,
        /// The config.json key.
        field: String,
        /// What the field means / how to fix it.
        hint: String,
    },
    /// Shapes are inconsistent (e.g. heads not divisible by kv heads).
    #[error("{file}: field `{field}` is inconsistent: {reason}")]
    InconsistentConfig {
        /// Which config.
        file: String,
        /// The config.json key.
        field: String,
        /// Why.
        reason: String,
    },
    /// A model id that is not in the built-in catalogue.
    #[error(
        "field `model.id`: {id:?} is not in the built-in catalogue (known: {known}); \
         set `model.path` to a directory or config.json of the model instead"
    )]
    UnknownModelId {
        /// The id asked for.
        id: String,
        /// Known ids.
        known: String,
    },
    /// A request field is out of range.
    #[error("field `{field}`: {reason}")]
    InvalidRequest {
        /// Request field path, e.g. `resources.gpusPerNode`.
        field: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// No layout reaches the requested global batch with the given GPUs.
    #[error("field `train.globalBatch`: {global_batch} cannot be reached: {reason}")]
    UnreachableBatch {
        /// Requested global batch (sequences per optimizer step).
        global_batch: u64,
        /// Why, with values that would work.
        reason: String,
    },
    /// Nothing fits, even QLoRA with full recompute on every GPU.
    #[error("nothing fits: {reason}")]
    NothingFits {
        /// The closest candidate and the term that overflowed, and what would fix it.
        reason: String,
    },
    /// A launch target cannot express this plan (e.g. LoRA in Megatron-LM).
    #[error("launcher `{target}` cannot run this plan: {reason}")]
    Unrenderable {
        /// Launcher name.
        target: String,
        /// Why, and which launcher to use instead.
        reason: String,
    },
}

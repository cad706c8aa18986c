//! Deleting a registered model: refused while a deployment serves it or an unfinished job
//! starts from it; otherwise its row goes, then its files, but only those Ferry wrote itself
//! (under `$FERRY_HOME/models/`). A model registered from anywhere else keeps its files.

use std::path::{Path, PathBuf};

use ferry_store::{JobFilter, StoreError};
use serde::Serialize;

use crate::error::ApiError;
use crate::export::export_name;
use crate::serving;
use crate::state::ControlPlane;

/// What deleting a model did, as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Deleted {
    /// The model's name, free to be registered again.
    pub(crate) deleted: String,
    /// Where its files were (or still are).
    pub(crate) path: String,
    /// Whether the files were removed.
    pub(crate) files_removed: bool,
    /// Why the files were not removed, when they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// Who still uses model `name`: deployments (any namespace) serving it as `spec.model` or
/// an adapter, and unfinished jobs starting from it; one phrase each, e.g.
/// `ModelDeployment team-a/chat (spec.adapters)`.
pub(crate) async fn users(plane: &ControlPlane, name: &str) -> Result<Users, StoreError> {
    let mut users = Users::default();
    for d in plane.store().list_objects(serving::KIND, None).await? {
        // Read from the stored JSON: a document the serving controller cannot parse still counts.
        let spec = &d.doc["spec"];
        let model = &spec["model"];
        if model["source"].as_str() == Some("artifact") && model["artifact"].as_str() == Some(name)
        {
            users
                .deployments
                .push(format!("{}/{} (spec.model)", d.namespace, d.name));
        }
        let mut adapters = spec["adapters"].as_array().into_iter().flatten();
        if adapters.any(|a| a.as_str() == Some(name)) {
            users
                .deployments
                .push(format!("{}/{} (spec.adapters)", d.namespace, d.name));
        }
    }
    for job in plane.store().list_jobs(&JobFilter::unfinished()).await? {
        if crate::inputs::starts_from(&job) == Some(name) {
            users.jobs.push(format!(
                "{}/{} ({})",
                job.namespace,
                job.name,
                job.phase.as_str()
            ));
        }
        if export_name(&job).as_deref() == Some(name) {
            users.exporting = true;
        }
    }
    Ok(users)
}

/// The users of a model found by [`users`].
#[derive(Debug, Default)]
pub(crate) struct Users {
    /// Deployments serving it, `namespace/name (field)`.
    deployments: Vec<String>,
    /// Unfinished jobs whose `spec.model` is it, `namespace/name (phase)`.
    jobs: Vec<String>,
    /// Whether an unfinished job will export a model of the same name (so its directory
    /// under `models/` is about to be used again).
    exporting: bool,
}

impl Users {
    /// The 409 refusing the delete, naming every user and the fix; `None` when nothing uses it.
    fn refusal(&self, name: &str) -> Option<ApiError> {
        let mut users = Vec::new();
        let mut fixes = Vec::new();
        if !self.deployments.is_empty() {
            users.push(format!(
                "ModelDeployment {}",
                self.deployments.join(", ModelDeployment ")
            ));
            fixes.push(
                "delete those deployments (`ferry delete deployment NAME -n NAMESPACE`) or apply them with another model",
            );
        }
        if !self.jobs.is_empty() {
            users.push(format!(
                "unfinished TrainJob {}",
                self.jobs.join(", unfinished TrainJob ")
            ));
            fixes.push(
                "let those jobs finish or cancel them (`ferry cancel job NAME -n NAMESPACE`)",
            );
        }
        if users.is_empty() {
            return None;
        }
        Some(ApiError::conflict(format!(
            "model {name} is still in use by {}; {}, then delete the model again",
            users.join(", "),
            fixes.join(", and ")
        )))
    }
}

/// Deletes model `name`: 404 when it is not registered, 409 while anything uses it (see
/// [`users`]). The row goes first, so the name is free even if removing the files fails.
pub(crate) async fn delete(plane: &ControlPlane, name: &str) -> Result<Deleted, ApiError> {
    let not_found = || {
        ApiError::from(StoreError::NotFound {
            kind: "Model".into(),
            id: name.to_owned(),
        })
    };
    let Some(model) = plane.store().get_model(name).await? else {
        return Err(not_found());
    };
    // No apply stores a job or deployment between the check and the delete.
    let applies_wait = plane.deleting_model().await;
    let users = users(plane, name).await?;
    if let Some(refusal) = users.refusal(name) {
        return Err(refusal);
    }
    if !plane.store().delete_model(name).await? {
        // Deleted by another request in between.
        return Err(not_found());
    }
    drop(applies_wait);
    let root = plane.config().home.join("models");
    let others: Vec<String> = plane
        .store()
        .list_models()
        .await?
        .into_iter()
        .map(|m| m.path)
        .collect();
    let path = PathBuf::from(&model.path);
    let keep_parent = users.exporting;
    let outcome =
        tokio::task::spawn_blocking(move || remove_files(&root, &path, &others, keep_parent))
            .await
            .unwrap_or_else(|e| {
                Err(format!(
                    "files left at {}: removing them failed: {e}; remove them by hand",
                    model.path
                ))
            });
    let answer = Deleted {
        deleted: name.to_owned(),
        path: model.path.clone(),
        files_removed: outcome.is_ok(),
        note: outcome.err(),
    };
    match &answer.note {
        None => tracing::info!(model = name, path = %model.path, "model deleted with its files"),
        Some(why) => tracing::info!(model = name, path = %model.path, "model deleted; {why}"),
    }
    Ok(answer)
}

/// Removes a deleted model's directory (or file) at `path` when it lies strictly inside
/// `root` (`$FERRY_HOME/models`), both canonicalized, so neither `..` nor a symlink leads
/// outside; and no other registered model (`others`' paths) lies inside it or it inside one.
/// Then the `<name>` directory above it goes too when left empty, unless `keep_parent`.
/// The error says why the files were not removed, for the answer.
fn remove_files(
    root: &Path,
    path: &Path,
    others: &[String],
    keep_parent: bool,
) -> Result<(), String> {
    let shown = path.display();
    let Ok(target) = path.canonicalize() else {
        return Err(format!("no files to remove: {shown} does not exist"));
    };
    let inside = root
        .canonicalize()
        .is_ok_and(|root| target != root && target.starts_with(&root));
    if !inside {
        return Err(format!(
            "files kept at {shown}: outside {}, where Ferry's exports go, so not Ferry's to remove",
            root.display()
        ));
    }
    for other in others {
        if let Ok(other) = Path::new(other).canonicalize()
            && (other.starts_with(&target) || target.starts_with(&other))
        {
            return Err(format!(
                "files kept at {shown}: another registered model's files are at {}",
                other.display()
            ));
        }
    }
    let removed = if target.is_dir() {
        std::fs::remove_dir_all(&target)
    } else {
        std::fs::remove_file(&target)
    };
    removed.map_err(|e| {
        format!("files left at {shown}: removing them failed: {e}; remove them by hand")
    })?;
    if !keep_parent
        && let Some(parent) = target.parent()
        && root
            .canonicalize()
            .is_ok_and(|root| parent != root && parent.starts_with(&root))
    {
        // Only an empty directory goes: `remove_dir` refuses any other.
        let _ = std::fs::remove_dir(parent);
    }
    Ok(())
}

#[cfg(test)]
mod tests;

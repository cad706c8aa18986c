//! `ferry apply -f FILE`: validate locally (every problem at once, naming the file),
//! then send everything to the control plane, which validates again against the
//! cluster and stores all or nothing. A file of another system's queues or priority classes
//! (`ferry_spec::adopt`) is sent as Ferry's own.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, anyhow};
use ferry_spec::Resource;
use serde_json::Value;

use crate::args::ApplyArgs;
use crate::client::Client;
use crate::output;

/// The text of `path` (`-`: standard input) and how errors name it.
pub(crate) fn read(path: &Path) -> anyhow::Result<(String, String)> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return Ok((text, "<stdin>".into()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow!(
            "cannot read {}: {e}; check the path given to -f",
            path.display()
        )
    })?;
    Ok((text, path.display().to_string()))
}

/// A file that is not Ferry's documents but another system's (Kueue's or Volcano's queues,
/// ResourceQuotas, a cluster's priority classes): Ferry's resources for it, with what does not
/// carry over said on standard error when `tell`, or why the file is refused. `None` when it
/// holds none of those.
async fn adopted(
    client: &Client,
    text: &str,
    source: &str,
    tell: bool,
) -> Option<anyhow::Result<Vec<Resource>>> {
    // Volcano's queues are owed shares of the cluster: asked of the control plane.
    let gpus = if ferry_spec::QueueObjects::of(text) == Some(ferry_spec::QueueObjects::Volcano) {
        match client.get::<Value>("/api/v1/gpus").await {
            Ok(inv) => inv["gpus"]
                .as_array()
                .map(|g| u32::try_from(g.len()).unwrap_or(u32::MAX)),
            Err(e) => return Some(Err(e)),
        }
    } else {
        None
    };
    let adopted = match ferry_spec::adopt(text, source, gpus)? {
        Ok(adopted) => adopted,
        Err(e) => return Some(Err(e.into())),
    };
    if !tell {
        return Some(Ok(adopted.resources));
    }
    for note in &adopted.notes {
        eprintln!("note: {note}");
    }
    if let Some(default) = adopted
        .global_default
        .filter(|d| d != ferry_sched::DEFAULT_PRIORITY)
    {
        eprintln!(
            "note: `{default}` is the cluster's globalDefault; a Ferry job without \
             spec.priority gets `{}` (apply a PriorityClass of that name with `{default}`'s \
             value to make them the same)",
            ferry_sched::DEFAULT_PRIORITY
        );
    }
    Some(Ok(adopted.resources))
}

/// The resources a file defines: Ferry's documents, else what another system's objects in it
/// become (`adopted`, its notes on standard error when `tell`), else the documents' own error.
pub(crate) async fn resources(
    client: &Client,
    text: &str,
    source: &str,
    tell: bool,
) -> anyhow::Result<Vec<Resource>> {
    match ferry_spec::parse_documents(text, source) {
        Ok(resources) => Ok(resources),
        Err(e) => adopted(client, text, source, tell).await.ok_or(e)?,
    }
}

pub async fn run(client: &Client, args: ApplyArgs) -> anyhow::Result<()> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    for path in &args.files {
        let (text, source) = read(path)?;
        let mut resources = resources(client, &text, &source, true).await?;
        // Relative commands and paths resolve where `ferry apply` ran, as with a shell (a
        // sweep's jobs too, through its template).
        for r in &mut resources {
            let spec = match r {
                Resource::TrainJob(job) => &mut job.spec,
                Resource::Sweep(sweep) => &mut sweep.spec.template.spec,
                _ => continue,
            };
            let wd = spec
                .working_dir
                .get_or_insert_with(|| cwd.to_string_lossy().into_owned());
            if Path::new(wd.as_str()).is_relative() {
                *wd = cwd.join(&*wd).to_string_lossy().into_owned();
            }
        }
        let body = Value::Array(resources.iter().map(Resource::to_value).collect());
        let path = if args.dry_run {
            "/api/v1/apply?dryRun=true"
        } else {
            "/api/v1/apply"
        };
        let applied: Vec<Value> = client.post(path, &body, &source).await?;
        if output::structured(&applied, args.output)? {
            continue;
        }
        for a in applied {
            println!(
                "{}/{} {}",
                output::cell(&a["kind"]).to_lowercase(),
                output::cell(&a["name"]),
                output::cell(&a["action"])
            );
        }
    }
    Ok(())
}

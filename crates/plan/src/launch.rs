//! A `TrainJob`'s launch for a launcher engine (Megatron-LM, torchrun, DeepSpeed, ms-swift):
//! the plan rendered for the job's engine and wrapped in a shell script that resumes from
//! the newest checkpoint on every start. The local runtime and the Kubernetes backend share
//! it; each says where the job's data, checkpoints and config files are as its ranks see them.

use std::collections::BTreeMap;

use ferry_spec::{EngineKind, ResumePolicy, TrainJob};

use crate::error::Result;
use crate::render::{
    Launcher, RenderOptions, deepspeed_config, default_launcher, render_swift_torchrun,
    render_train,
};
use crate::search::PlanReport;

/// Where a job's files are, as its rank processes see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPaths {
    /// Training data (file or dataset name).
    pub data: String,
    /// The job's checkpoint directory (`--save`/`--output_dir`), also where resumes look.
    pub checkpoint_dir: String,
    /// Directory the launch's extra files (`ds_config.json`) are written to.
    pub config_dir: String,
}

/// What runs on every node: one shell script, plus files it reads from `config_dir`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobLaunch {
    /// `/bin/sh -c` script: resume prelude, then `exec` of the rendered command.
    pub script: String,
    /// File name (inside `config_dir`) → contents.
    pub files: BTreeMap<String, String>,
    /// The launcher that was rendered.
    pub launcher: Launcher,
}

impl JobLaunch {
    /// The argv that runs the script.
    pub fn argv(&self) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), self.script.clone()]
    }
}

/// The launcher of `job`'s engine; `engine: auto` takes the one the plan chose.
pub fn launcher_for(job: &TrainJob, report: &PlanReport) -> Launcher {
    match job.spec.engine {
        EngineKind::Megatron => Launcher::Megatron,
        EngineKind::Torchrun => Launcher::Torchrun,
        EngineKind::Deepspeed => Launcher::Deepspeed,
        EngineKind::Swift => Launcher::Swift,
        _ => default_launcher(report),
    }
}

/// Renders `report` for `job`'s launcher with the job's own training values.
pub fn job_launch(job: &TrainJob, report: &PlanReport, paths: &JobPaths) -> Result<JobLaunch> {
    let spec = &job.spec;
    let launcher = launcher_for(job, report);
    let mut opts = render_options(job, paths);
    let checkpoint_dir = opts.output_dir.clone();
    let trl = matches!(launcher, Launcher::Torchrun | Launcher::Deepspeed);
    if trl {
        // TRL gets the data through `$FERRY_DATASET`, which the prelude below sets.
        opts.data = "\"$FERRY_DATASET\"".to_owned();
    }
    let mut files = BTreeMap::new();
    let mut text = match launcher {
        // DeepSpeed's own launcher needs ssh between nodes; under torchrun the HF Trainer
        // runs the same ZeRO config, so nodes need nothing but the config file.
        Launcher::Deepspeed => {
            files.insert("ds_config.json".to_owned(), deepspeed_config(report)?);
            let text = render_train(report, Launcher::Torchrun, &opts)?;
            format!(
                "{} \\\n  --deepspeed {}\n",
                text.trim_end(),
                opts.deepspeed_config_path
            )
        }
        // ms-swift's CLI would start torchrun itself; started directly, its entry point can
        // run under the same Trainer hooks as TRL's.
        Launcher::Swift => render_swift_torchrun(report, &opts)?,
        other => render_train(report, other, &opts)?,
    };
    if !spec.extra_args.is_empty() {
        // After Ferry's own flags, each one shell word as written.
        let extra: Vec<String> = spec.extra_args.iter().map(|a| shell_quote(a)).collect();
        text = format!("{} \\\n  {}\n", text.trim_end(), extra.join(" "));
    }
    let mut prelude = String::new();
    if let Some(entry) = match launcher {
        Launcher::Torchrun | Launcher::Deepspeed => Some("trl.scripts.sft"),
        Launcher::Swift => Some("swift.cli.sft"),
        Launcher::Megatron => None,
    } {
        // The HF Trainer script (TRL's or ms-swift's) runs under Ferry's hooks: a checkpoint
        // on SIGTERM, metrics lines.
        files.insert(TRAINER_MODULE_FILE.to_owned(), TRAINER_MODULE.to_owned());
        let config_dir = paths.config_dir.trim_end_matches('/');
        prelude.push_str(&format!(
            "export PYTHONPATH={}${{PYTHONPATH:+:$PYTHONPATH}}\n",
            shell_quote(config_dir)
        ));
        text = text.replace(
            &format!("-m {entry}"),
            &format!("-m {TRAINER_MODULE_NAME} {entry}"),
        );
    }
    if trl {
        // `datasets` loads directories and hub names only: a data file is given to TRL as a
        // one-file directory.
        prelude.push_str(&format!(
            "FERRY_DATASET={}\n\
             if [ -f \"$FERRY_DATASET\" ]; then \
             d=$(mktemp -d); ln -s \"$FERRY_DATASET\" \"$d/train.${{FERRY_DATASET##*.}}\"; \
             FERRY_DATASET=$d; fi\n",
            shell_quote(&paths.data)
        ));
    }
    Ok(JobLaunch {
        script: with_resume(
            &prelude,
            &text,
            launcher,
            &checkpoint_dir,
            spec.on_failure.resume,
        ),
        files,
        launcher,
    })
}

/// The Python module that makes the Hugging Face Trainer save a checkpoint and exit on
/// SIGTERM and print its logs as metrics lines (see the file's docstring); it wraps TRL's
/// script, which stays unchanged.
const TRAINER_MODULE: &str = include_str!("ferry_trainer.py");
const TRAINER_MODULE_NAME: &str = "ferry_trainer";
const TRAINER_MODULE_FILE: &str = "ferry_trainer.py";

/// `s` as one POSIX shell word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The job's own training values (learning rate, steps, epochs, checkpoint cadence) and
/// file locations as the renderer takes them.
pub fn render_options(job: &TrainJob, paths: &JobPaths) -> RenderOptions {
    let spec = &job.spec;
    let positive = |n: Option<i64>| n.filter(|n| *n > 0).map(|n| n as u64);
    RenderOptions {
        data: paths.data.clone(),
        output_dir: paths.checkpoint_dir.trim_end_matches('/').to_owned(),
        lr: spec.train.lr.unwrap_or(1e-5),
        train_iters: positive(spec.train.steps).unwrap_or(1000),
        epochs: spec.train.epochs.unwrap_or(1.0).ceil().max(1.0) as u64,
        deepspeed_config_path: format!("{}/ds_config.json", paths.config_dir.trim_end_matches('/')),
        save_every: positive(spec.checkpoint.every),
        keep: positive(spec.checkpoint.keep.map(i64::from)),
        max_steps: positive(spec.train.steps),
    }
}

/// Wraps a launch command, after `prelude` (shell lines), so that every start (first run,
/// restart, or resumption after a preemption) resumes from the newest complete checkpoint in
/// `dir` when the policy says so.
fn with_resume(
    prelude: &str,
    text: &str,
    launcher: Launcher,
    dir: &str,
    policy: ResumePolicy,
) -> String {
    // The planner writes the default rendezvous port; ranks use the one they are given.
    let body = text
        .trim_end()
        .replace("--master-port 29500", "--master-port $MASTER_PORT")
        .replace("MASTER_PORT=29500", "MASTER_PORT=$MASTER_PORT");
    let mut script = format!("set -eu\n{prelude}");
    if policy == ResumePolicy::None {
        return script + "exec " + &body + "\n";
    }
    if launcher == Launcher::Megatron {
        script.push_str(&format!(
            "if [ -f {dir}/latest_checkpointed_iteration.txt ]; then FERRY_LOAD=\"--load {dir}\"; \
             else FERRY_LOAD=\"--load {dir}/base --finetune\"; fi\n"
        ));
        let lines: Vec<String> = body
            .split(" \\\n")
            .filter(|l| l.trim() != "--finetune")
            .map(|l| {
                if l.trim_start().starts_with("--load ") {
                    "  $FERRY_LOAD".to_owned()
                } else {
                    l.to_owned()
                }
            })
            .collect();
        script.push_str("exec ");
        script.push_str(&lines.join(" \\\n"));
        script.push('\n');
    } else {
        script.push_str(&format!(
            "FERRY_RESUME_FROM=$(ls -1d {dir}/checkpoint-*/trainer_state.json 2>/dev/null | sort -V | tail -n 1 || true)\n\
             FERRY_RESUME_FROM=${{FERRY_RESUME_FROM%/trainer_state.json}}\n\
             export FERRY_RESUME_FROM\n"
        ));
        script.push_str("exec ");
        script.push_str(&body);
        script.push_str(
            " \\\n  ${FERRY_RESUME_FROM:+--resume_from_checkpoint \"$FERRY_RESUME_FROM\"}\n",
        );
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(extra: &str) -> TrainJob {
        let yaml = format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\nspec:\n  engine: megatron\n  method: full\n  model: {{source: hf, id: Qwen/Qwen2.5-0.5B}}\n  resources: {{nodes: 2, gpusPerNode: 8, gpu: H100-80GB}}\n{extra}"
        );
        match ferry_spec::parse_documents(&yaml, "j.yaml")
            .unwrap()
            .remove(0)
        {
            ferry_spec::Resource::TrainJob(j) => j,
            other => panic!("{other:?}"),
        }
    }

    fn launch(job: &TrainJob) -> JobLaunch {
        let shape = crate::shape_of("Qwen/Qwen2.5-0.5B").unwrap();
        let request = crate::request_for_job(job, shape, "Qwen/Qwen2.5-0.5B").unwrap();
        let report = crate::plan(&request).unwrap();
        let paths = JobPaths {
            data: "/d/train".into(),
            checkpoint_dir: "/c/j/".into(),
            config_dir: "/etc/ferry".into(),
        };
        job_launch(job, &report, &paths).unwrap()
    }

    #[test]
    fn megatron_resumes_from_its_tracker_file_and_saves_at_the_jobs_cadence() {
        let l = launch(&job(
            "  checkpoint: {every: 100}\n  onFailure: {resume: latest}\n",
        ));
        assert_eq!(l.launcher, Launcher::Megatron);
        assert!(
            l.script
                .starts_with("set -eu\nif [ -f /c/j/latest_checkpointed_iteration.txt ]"),
            "{}",
            l.script
        );
        assert!(l.script.contains("--save-interval 100"), "{}", l.script);
        assert!(l.script.contains("--save /c/j"), "{}", l.script);
        let body = l.script.split("exec ").nth(1).unwrap();
        assert!(
            body.contains("$FERRY_LOAD") && !body.contains("--load "),
            "{body}"
        );
        assert!(
            l.script.contains("--master-port $MASTER_PORT"),
            "two nodes rendezvous on the given port"
        );
        assert_eq!(l.argv()[..2], ["/bin/sh", "-c"]);
    }

    #[test]
    fn without_resume_the_command_runs_as_rendered() {
        let l = launch(&job("  onFailure: {resume: none}\n"));
        assert!(
            l.script.starts_with("set -eu\nexec torchrun"),
            "{}",
            l.script
        );
        assert!(l.script.contains("--load /c/j/base") && l.script.contains("--save-interval 500"));
    }
}

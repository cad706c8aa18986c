//! The command line, as clap types: one args struct per subcommand.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Ferry carries a large language model through plan → queue → train → checkpoint →
/// convert → serve, on one machine or on Kubernetes.
#[derive(Debug, Parser)]
#[command(
    name = "ferry",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Control-plane URL the client commands talk to.
    #[arg(
        long,
        global = true,
        env = "FERRY_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    pub url: String,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Every `ferry` subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane (REST API, scheduler, local runtime) in the foreground.
    Up(UpArgs),
    /// The quickstart, end to end on this machine, in a private control plane.
    Demo(crate::commands::DemoArgs),
    /// Predict per-GPU memory and pick the method and parallel layout for a TrainJob.
    Plan(crate::commands::PlanArgs),
    /// Convert checkpoints: Megatron (legacy, torch_dist) ⇄ Hugging Face safetensors.
    Convert(crate::commands::ConvertArgs),
    /// Replay a cluster trace under Ferry's scheduler and its peers.
    Sim(crate::commands::SimArgs),
    /// OpenAI-compatible gateway in front of engine replicas (`--backend MODEL=URL`).
    Gateway(crate::commands::GatewayArgs),
    /// OpenAI-compatible engine simulator for tests and benchmarks (no model, no GPU).
    MockEngine(crate::commands::MockEngineArgs),
    /// Print the Kubernetes objects a file becomes; --check validates against the cluster.
    Render(crate::commands::RenderArgs),
    /// Run the Kubernetes operator (in-cluster config or KUBECONFIG).
    Operator(crate::commands::OperatorArgs),
    /// Write Ferry's CRDs to deploy/crds and charts/ferry/crds.
    Crds(crate::commands::CrdsArgs),
    /// Serve a model directory with the built-in engine behind the OpenAI API.
    Serve(crate::commands::ServeArgs),
    /// Built-in engine entry points the control plane launches as rank processes.
    #[command(subcommand, hide = true)]
    Engine(crate::commands::EngineCommand),
    /// Create or update resources from a YAML or JSON file.
    Apply(ApplyArgs),
    /// List resources: jobs, deployments, queues, models, gpus.
    Get(GetArgs),
    /// Show one resource in detail, with its events.
    Describe(DescribeArgs),
    /// Print a job's rank logs.
    Logs(LogsArgs),
    /// Cancel a job, or every job `-l` selects: SIGTERM to every rank, then SIGKILL after its
    /// grace period.
    Cancel(JobActionArgs),
    /// Suspend a job (or every job `-l` selects): out of its queue; a running one checkpoints and
    /// stops as if preempted.
    Suspend(JobActionArgs),
    /// Resume a suspended job (or every one `-l` selects): queued again, it continues from its
    /// latest checkpoint.
    Resume(JobActionArgs),
    /// Delete a resource or a registered model, or every job `-l` selects (a running job is
    /// cancelled first).
    Delete(DeleteArgs),
    /// Print the JSON Schema of the resource types.
    Schema(SchemaArgs),
    /// Print client and control-plane versions.
    Version,
    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

/// `ferry up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Address for the REST API.
    #[arg(long, env = "FERRY_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Declare N virtual GPU slots instead of discovering real GPUs (for CPU machines).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Ferry's home: database, logs, checkpoints.
    #[arg(long, env = "FERRY_HOME")]
    pub home: Option<PathBuf>,
    /// Database URL (postgres://…) or SQLite path; `$FERRY_HOME/ferry.db` by default.
    #[arg(long, env = "FERRY_STORE")]
    pub store: Option<String>,
    /// Address of the OpenAI-compatible gateway in front of the deployments (`off`: none).
    #[arg(long, env = "FERRY_GATEWAY", default_value = "127.0.0.1:8080")]
    pub gateway: String,
    /// The scheduler's policy switches, YAML or JSON (`{holdForOwed: true}`; the file `ferry
    /// sim --options` takes; docs/scheduler.md); the defaults when omitted.
    #[arg(long, env = "FERRY_SCHEDULER_OPTIONS", value_name = "FILE")]
    pub scheduler_options: Option<PathBuf>,
    /// Named priorities jobs may give besides `low` (-100), `normal` (0) and `high` (100):
    /// higher runs first and may preempt lower work of its queue. YAML or JSON, either a mapping
    /// `{production: 1000, overnight: {value: 2000, preempting: false}}` or the cluster's class
    /// objects: Kubernetes PriorityClasses (`kubectl get priorityclasses -o yaml`; `system-`
    /// ones skipped, the `globalDefault` one also defines `normal`), Kueue
    /// WorkloadPriorityClasses, or Ferry `PriorityClass` documents.
    #[arg(long, env = "FERRY_PRIORITY_CLASSES", value_name = "FILE")]
    pub priority_classes: Option<PathBuf>,
}

/// `ferry apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// File to apply (`-` for standard input).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Validate on the control plane without storing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table with more columns.
    Wide,
    /// JSON, for scripts.
    Json,
    /// YAML.
    Yaml,
}

/// `ferry get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// What to list: jobs, deployments, queues, priorityclasses, sweeps, cohorts, models, gpus.
    pub kind: String,
    /// One resource by name.
    pub name: Option<String>,
    /// Namespace (default: `default`).
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format (table when omitted).
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
    /// Only what these labels select, as kubectl's `-l`: `team=nlp`, `tier in (gold,silver)`,
    /// `team!=nlp`, `!draft`, comma-separated (lists only, not with a NAME).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// A LABELS column (`k=v,k2=v2`) in tables.
    #[arg(long)]
    pub show_labels: bool,
}

/// `-l` and `-A` of the commands that act on jobs: every job the labels select, instead of
/// one by name.
#[derive(Debug, Args)]
pub struct JobSelection {
    /// Every job these labels select, as kubectl's `-l` (`team=nlp,tier in (gold,silver)`);
    /// then the target is at most the kind, `jobs`.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// With -l: the selected jobs of every namespace.
    #[arg(short = 'A', long, requires = "selector")]
    pub all_namespaces: bool,
}

/// `ferry describe`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// Kind: job, deployment, queue, priorityclass, sweep or cohort.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

/// `ferry logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Job name.
    pub job: String,
    /// Rank whose log to print.
    #[arg(long, default_value_t = 0)]
    pub rank: u32,
    /// Keep printing as the rank writes, until it ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

/// `ferry cancel`, `ferry suspend` and `ferry resume`: one job by name, or those `-l` selects.
#[derive(Debug, Args)]
pub struct JobActionArgs {
    /// `job NAME` or just `NAME`; with -l nothing, or `jobs`.
    #[arg(num_args = 1..=2, required_unless_present = "selector")]
    pub target: Vec<String>,
    /// Namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Jobs by label instead of by name.
    #[command(flatten)]
    pub select: JobSelection,
}

/// `ferry delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Kind: job, deployment, queue, priorityclass, sweep (its jobs are cancelled and deleted
    /// with it), cohort (refused while the cohort trees left would not build the scheduler) or
    /// model (a registered model, with the files Ferry exported for it; refused while a
    /// deployment or an unfinished job uses it); `jobs` with -l.
    #[arg(required_unless_present = "files")]
    pub kind: Option<String>,
    /// Name (none with -l).
    #[arg(required_unless_present_any = ["selector", "files"])]
    pub name: Option<String>,
    /// Namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Jobs by label instead of by name.
    #[command(flatten)]
    pub select: JobSelection,
    /// Every resource a file defines, as `ferry apply -f` read it (`-` for standard input),
    /// last document first; instead of KIND and NAME.
    #[arg(short = 'f', long = "filename", conflicts_with_all = ["kind", "selector"])]
    pub files: Vec<PathBuf>,
}

/// `ferry schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// One kind (TrainJob, ModelDeployment, Queue, PriorityClass, Sweep, Cohort); all when
    /// omitted.
    pub kind: Option<String>,
}

/// `ferry completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to generate for.
    pub shell: clap_complete::Shell,
}

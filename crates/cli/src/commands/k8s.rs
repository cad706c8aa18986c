//! `ferry render --target k8s`, `ferry operator` and `ferry crds`: thin wrappers over
//! `ferry-k8s`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ferry_k8s::{Claims, Cluster, Images, RenderOptions};

/// What the target cluster offers and what pods get (shared by `render` and `operator`).
#[derive(Debug, clap::Args)]
pub struct ClusterFlags {
    /// Image of the training pods (torchrun, Megatron-LM, TRL/PEFT, DeepSpeed, ms-swift).
    #[arg(long, default_value = "ghcr.io/ferry-dev/trainer:0.1.0")]
    pub trainer_image: String,
    /// vLLM image of the serving pods.
    #[arg(long, default_value = "vllm/vllm-openai:v0.11.0")]
    pub vllm_image: String,
    /// Node label holding the GPU flavor.
    #[arg(long, default_value = "ferry.dev/gpu-flavor")]
    pub flavor_label: String,
    /// Node label holding the rack; multi-node gangs stay within one rack.
    #[arg(long)]
    pub rack_label: Option<String>,
    /// GPUs per node: multi-node jobs must use whole nodes.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Claim with the training data (mounted at /data).
    #[arg(long, default_value = "ferry-data")]
    pub data_claim: String,
    /// Claim with base and exported models (mounted at /models).
    #[arg(long, default_value = "ferry-models")]
    pub models_claim: String,
    /// Claim for checkpoints (mounted at /checkpoints).
    #[arg(long, default_value = "ferry-checkpoints")]
    pub checkpoints_claim: String,
}

impl ClusterFlags {
    fn options(&self) -> RenderOptions {
        RenderOptions {
            cluster: Cluster {
                flavor_label: self.flavor_label.clone(),
                rack_label: self.rack_label.clone(),
                gpus_per_node: self.gpus_per_node,
                ..Cluster::default()
            },
            images: Images {
                trainer: self.trainer_image.clone(),
                vllm: self.vllm_image.clone(),
            },
            claims: Claims {
                data: self.data_claim.clone(),
                models: self.models_claim.clone(),
                checkpoints: self.checkpoints_claim.clone(),
            },
            ..RenderOptions::default()
        }
    }
}

/// Options of `ferry render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Where the objects go; only `k8s` exists.
    #[arg(long, default_value = "k8s")]
    pub target: String,
    /// File with TrainJobs, ModelDeployments and Queues.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Check against the cluster of KUBECONFIG: its optional APIs, claims and queues.
    #[arg(long)]
    pub check: bool,
    /// Render JobSets (without --check: the JobSet CRD is assumed installed).
    #[arg(long)]
    pub jobset: bool,
    /// Render Kueue queues and labels (without --check).
    #[arg(long)]
    pub kueue: bool,
    /// Render KEDA ScaledObjects instead of HPAs (without --check).
    #[arg(long)]
    pub keda: bool,
    /// Output format: yaml (a `---` stream) or json (an array).
    #[arg(short, long, default_value = "yaml")]
    pub output: String,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

/// Options of `ferry operator`.
#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "ferry-system")]
    pub lease_namespace: String,
    /// The scheduler's policy switches, YAML or JSON (the file `ferry sim --options` takes;
    /// docs/scheduler.md); the defaults when omitted. Unused when Kueue admits.
    #[arg(long, env = "FERRY_SCHEDULER_OPTIONS", value_name = "FILE")]
    pub scheduler_options: Option<PathBuf>,
    /// Bandwidth of the links between racks, as a percent of that between nodes within one
    /// (25 for a 4:1 oversubscribed spine): the operator then plans how much longer each
    /// launcher job runs split across racks, and its scheduler weighs that against waiting
    /// for one rack (a job's own `spec.resources.splitSlowdownPct` stands).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub inter_rack_bandwidth_pct: Option<u32>,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

/// Options of `ferry crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Directories the CRD files are written to (repeatable).
    #[arg(long, default_values = ["deploy/crds", "charts/ferry/crds"])]
    pub dir: Vec<PathBuf>,
    /// Print them instead of writing files.
    #[arg(long)]
    pub stdout: bool,
}

/// `ferry render --target k8s -f FILE [--check]`.
pub async fn render(args: RenderArgs) -> anyhow::Result<()> {
    if args.target != "k8s" {
        bail!("--target: unknown target {:?}; use k8s", args.target);
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let resources = ferry_spec::parse_documents(&text, &args.file.display().to_string())?;
    let mut opts = args.cluster.options();
    opts.cluster.jobset = args.jobset;
    opts.cluster.kueue = args.kueue;
    opts.cluster.keda = args.keda;
    let state = if args.check {
        let client = ferry_k8s::cluster::connect()
            .await
            .context("--check needs a cluster: set KUBECONFIG or run in a pod")?;
        ferry_k8s::cluster::discover(&client, &mut opts.cluster).await?;
        let namespaces: BTreeSet<String> = resources
            .iter()
            .filter(|r| !r.kind().is_cluster_scoped())
            .map(|r| r.metadata().namespace.clone())
            .collect();
        let namespaces: Vec<String> = namespaces.into_iter().collect();
        Some(ferry_k8s::cluster::state(&client, &namespaces).await?)
    } else {
        None
    };
    let objects = ferry_k8s::render(&resources, &opts, state.as_ref())?;
    for warning in ferry_k8s::warnings(&resources) {
        eprintln!("warning: {warning}");
    }
    match args.output.as_str() {
        "yaml" => print!("{}", ferry_k8s::to_yaml(&objects)?),
        "json" => println!("{}", serde_json::to_string_pretty(&objects)?),
        other => bail!("--output: unknown format {other:?}; use yaml or json"),
    }
    Ok(())
}

/// `ferry operator`: reconciles until signalled or the lease is lost.
pub async fn operator(args: OperatorArgs) -> anyhow::Result<()> {
    super::init_logging();
    // A bad switch is refused before anything else, as `ferry up` refuses it.
    let policy = super::scheduler_options::load(args.scheduler_options.as_deref())?;
    let client = ferry_k8s::cluster::connect()
        .await
        .context("the operator needs a cluster: run it in a pod or set KUBECONFIG")?;
    let identity = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("ferry-operator-{}", std::process::id()));
    let mut opts = args.cluster.options();
    opts.cluster.inter_rack_bandwidth_pct = args.inter_rack_bandwidth_pct;
    ferry_k8s::operator::run(client, opts, policy, &args.lease_namespace, identity).await?;
    Ok(())
}

/// `ferry crds`: writes (or prints) the generated CRDs.
pub fn crds(args: CrdsArgs) -> anyhow::Result<()> {
    let files = ferry_k8s::crd_files()?;
    if args.stdout {
        for (_, body) in files {
            print!("{body}");
        }
        return Ok(());
    }
    for dir in &args.dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (name, body) in &files {
            let path = dir.join(name);
            std::fs::write(&path, body)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

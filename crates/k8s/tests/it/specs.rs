//! The resources the tests render: teams, jobs of every size and method, deployments.

use ferry_spec::Resource;

/// A YAML document of a Ferry resource: the header (`kind`, `name`, `namespace`), then the
/// lines of its `spec`, each indented by two.
macro_rules! document {
    ($kind:ident, $name:literal, $namespace:literal, $spec:literal) => {
        concat!(
            "\napiVersion: ferry.dev/v1alpha1\nkind: ",
            stringify!($kind),
            "\nmetadata: {name: ",
            $name,
            ", namespace: ",
            $namespace,
            "}\nspec:",
            $spec,
        )
    };
}

/// Two teams sharing a cohort, with H100 quotas.
pub const QUEUES: &str = concat!(
    document! {Queue, "team-a", "team-a", r#"
  cohort: research
  quotas: [{flavor: H100-80GB, nominal: 128, borrowingLimit: 64}]
"#},
    "---",
    document! {Queue, "team-b", "team-b", r#"
  cohort: research
  weight: 2
  quotas: [{flavor: H100-80GB, nominal: 16}, {flavor: any, nominal: 4, lendingLimit: 2}]
"#}
);

/// One node, one GPU, LoRA through torchrun + PEFT.
pub const SINGLE_NODE_LORA: &str = document! {TrainJob, "qwen-lora", "team-a", r#"
  model: {source: hf, id: Qwen/Qwen2.5-7B}
  engine: torchrun
  method: lora
  lora: {rank: 16}
  data: {path: sft/chat.jsonl, format: chat}
  resources: {nodes: 1, gpusPerNode: 1, gpu: H100-80GB}
  train: {seqLen: 2048, globalBatch: 32, lr: 2.0e-4, epochs: 1}
  queue: team-a
  priority: low
  onFailure: {maxRestarts: 2}
"#};

/// Two nodes of 8 GPUs, full fine-tune; the planner picks the launcher.
pub const TWO_NODE_FULL: &str = document! {TrainJob, "llama-sft", "team-a", r#"
  model: {source: hf, id: meta-llama/Meta-Llama-3-8B}
  method: full
  data: {path: /data/sft.jsonl, format: chat}
  resources: {nodes: 2, gpusPerNode: 8, gpu: H100-80GB}
  train: {seqLen: 4096, globalBatch: 128, lr: 2.0e-5, epochs: 2}
  queue: team-a
  priority: high
  env: {NCCL_DEBUG: WARN}
  onFailure: {maxRestarts: 3, resume: latest}
"#};

/// Sixteen nodes, Megatron full fine-tune of a 70B model.
pub const SIXTEEN_NODE_MEGATRON: &str = document! {TrainJob, "llama70b-pt", "team-a", r#"
  model: {source: hf, id: meta-llama/Meta-Llama-3-70B}
  engine: megatron
  task: pretrain
  method: full
  data: {path: /data/pile_text_document}
  resources: {nodes: 16, gpusPerNode: 8, gpu: H100-80GB}
  train: {seqLen: 4096, globalBatch: 512, lr: 1.5e-4, steps: 20000}
  queue: team-a
  priority: high
  onFailure: {maxRestarts: 5}
"#};

/// A single-GPU QLoRA through ms-swift, in team-b.
pub const QLORA_SWIFT: &str = document! {TrainJob, "qwen-qlora", "team-b", r#"
  model: {source: hf, id: Qwen/Qwen2.5-14B}
  engine: swift
  method: qlora
  data: {path: chat.jsonl, format: chat}
  resources: {nodes: 1, gpusPerNode: 1, gpu: H100-80GB}
  queue: team-b
"#};

/// A vLLM deployment without autoscaling.
pub const DEPLOY_FIXED: &str = document! {ModelDeployment, "qwen-chat", "team-a", r#"
  model: {source: hf, id: Qwen/Qwen2.5-7B}
  engine: vllm
  replicas: 2
  gpusPerReplica: 1
  gpu: H100-80GB
  maxModelLen: 8192
"#};

/// A vLLM deployment with LoRA adapters and autoscaling on waiting requests.
pub const DEPLOY_AUTOSCALED: &str = document! {ModelDeployment, "llama70b-chat", "team-a", r#"
  model: {source: hf, id: meta-llama/Meta-Llama-3-70B}
  servedName: llama-70b
  engine: vllm
  replicas: 1
  gpusPerReplica: 4
  gpu: H100-80GB
  maxModelLen: 8192
  adapters: [llama-sft-v1]
  queue: team-a
  autoscaling: {minReplicas: 1, maxReplicas: 6, metric: "vllm:num_requests_waiting", target: 4}
"#};

/// Scale-to-zero through KEDA, whatever the cluster's default, with a fractional target.
pub const DEPLOY_KEDA: &str = document! {ModelDeployment, "qwen-chat", "team-a", r#"
  model: {source: hf, id: Qwen/Qwen2.5-7B}
  engine: vllm
  gpusPerReplica: 1
  gpu: H100-80GB
  autoscaling: {minReplicas: 0, maxReplicas: 3, target: 2.5, provider: keda}
"#};

/// Parses documents, panicking with the spec crate's message on error.
pub fn parse(text: &str) -> Vec<Resource> {
    ferry_spec::parse_documents(text, "test.yaml").unwrap_or_else(|e| panic!("{e}"))
}

/// Parses and concatenates several texts.
pub fn parse_all(texts: &[&str]) -> Vec<Resource> {
    texts.iter().flat_map(|t| parse(t)).collect()
}

/// The one TrainJob in `text`.
pub fn job(text: &str) -> ferry_spec::TrainJob {
    match parse(text).remove(0) {
        Resource::TrainJob(j) => j,
        other => panic!("expected a TrainJob, got {:?}", other.kind()),
    }
}

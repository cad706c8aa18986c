//! Human-readable rendering of a plan: a memory table, the throughput line and the reasoning.

use std::fmt;

use crate::search::{PlanReport, gib};
use crate::serve::ServePlan;

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.chosen;
        let m = &c.memory;
        writeln!(
            f,
            "plan for {} ({:.2}B parameters) on {} × {} × {} ({}), seq {}",
            self.model_name,
            self.params.total as f64 / 1e9,
            self.nodes,
            self.gpus_per_node,
            self.gpu,
            gib(self.memory_per_gpu),
            self.seq_len
        )?;
        writeln!(f, "chosen: {}", c.label())?;
        writeln!(f)?;
        writeln!(f, "  {:<34} {:>12}", "per-GPU memory", "GiB")?;
        let rows: [(&str, u64); 15] = [
            ("weights", m.weights),
            ("gradients", m.grads),
            ("DDP gradient buckets", m.ddp_buckets),
            ("DDP bucket rebuild (iteration 2)", m.ddp_rebuild),
            ("FSDP root gather + reduce", m.fsdp_root),
            ("optimizer states", m.optimizer),
            ("fp32 master weights", m.master),
            ("weight copies (autocast/gathered)", m.weight_copies),
            ("activations (saved)", m.activations),
            ("activations (recompute)", m.recompute),
            ("logits + loss", m.logits),
            ("tied-embedding gradient buffer", m.tied_embedding_grad),
            ("reference model (DPO)", m.reference_model),
            ("cuBLAS workspaces", m.workspace),
            ("(of which LoRA adapters+states)", m.adapters),
        ];
        for (name, bytes) in rows {
            if bytes > 0 {
                writeln!(
                    f,
                    "  {:<34} {:>12.2}",
                    name,
                    bytes as f64 / (1u64 << 30) as f64
                )?;
            }
        }
        writeln!(
            f,
            "  {:<34} {:>12.2}   ({:?}, stage {})",
            "peak allocated",
            m.peak_bytes as f64 / (1u64 << 30) as f64,
            m.peak_phase,
            m.peak_stage
        )?;
        writeln!(
            f,
            "  {:<34} {:>12.2}",
            "+ fragmentation reserve",
            m.fragmentation_reserve as f64 / (1u64 << 30) as f64
        )?;
        writeln!(
            f,
            "  {:<34} {:>12.2}",
            "+ CUDA context / NCCL",
            m.context as f64 / (1u64 << 30) as f64
        )?;
        writeln!(
            f,
            "  {:<34} {:>12.2}   of {:.2} available",
            "= required",
            m.required_bytes as f64 / (1u64 << 30) as f64,
            self.memory_per_gpu as f64 / (1u64 << 30) as f64
        )?;
        writeln!(f)?;
        writeln!(f, "why:")?;
        for line in &self.reasoning {
            writeln!(f, "  - {line}")?;
        }
        if !self.alternatives.is_empty() {
            writeln!(f, "also fits (slower):")?;
            for a in &self.alternatives {
                writeln!(
                    f,
                    "  - {}: {:.0} tokens/s, {} required",
                    a.label(),
                    a.throughput.tokens_per_s,
                    gib(a.memory.required_bytes)
                )?;
            }
        }
        if !self.rejected.is_empty() {
            writeln!(f, "rejected:")?;
            for r in &self.rejected {
                writeln!(
                    f,
                    "  - {}: needs {} > {} (largest term {} {})",
                    r.label,
                    gib(r.required_bytes),
                    gib(r.available_bytes),
                    r.largest_term,
                    gib(r.largest_term_bytes)
                )?;
            }
        }
        writeln!(f, "({} layouts evaluated)", self.evaluated)
    }
}

impl fmt::Display for ServePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.memory;
        writeln!(
            f,
            "serve {} on {} × {}: tensor-parallel {}",
            self.model_name, m.tp, self.gpu, m.tp
        )?;
        writeln!(f, "  weights per GPU        {}", gib(m.weights))?;
        writeln!(f, "  runtime reserve        {}", gib(m.runtime_reserve))?;
        writeln!(f, "  KV cache per GPU       {}", gib(m.kv_cache))?;
        writeln!(
            f,
            "  KV bytes/token/GPU     {} → {} tokens fit, {} needed ({} × {})",
            m.kv_bytes_per_token,
            m.tokens_fit,
            m.tokens_needed,
            self.max_model_len,
            self.concurrency
        )?;
        for line in &self.reasoning {
            writeln!(f, "  - {line}")?;
        }
        Ok(())
    }
}

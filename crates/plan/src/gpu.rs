//! GPU kinds: memory, dense BF16 peak, achievable MFU and interconnect, each with its source.

use serde::{Deserialize, Serialize};

/// GPU models the planner has figures for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum GpuKind {
    /// NVIDIA A100 SXM 80 GB.
    #[serde(rename = "A100-80GB", alias = "A100")]
    A100,
    /// NVIDIA H100 SXM 80 GB.
    #[serde(rename = "H100-80GB", alias = "H100")]
    H100,
    /// NVIDIA H200 SXM 141 GB.
    #[serde(rename = "H200-141GB", alias = "H200")]
    H200,
    /// NVIDIA H800 SXM 80 GB (H100 compute, 400 GB/s NVLink).
    #[serde(rename = "H800-80GB", alias = "H800")]
    H800,
    /// NVIDIA L40S 48 GB (PCIe).
    #[serde(rename = "L40S-48GB", alias = "L40S")]
    L40s,
    /// NVIDIA GeForce RTX 4090 24 GB.
    #[serde(rename = "RTX4090-24GB", alias = "RTX4090")]
    Rtx4090,
}

/// Figures for one GPU kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuSpec {
    /// Display name.
    pub name: &'static str,
    /// Device memory as `torch.cuda.get_device_properties().total_memory` reports it, bytes.
    pub memory_bytes: u64,
    /// Dense BF16 tensor-core peak, FLOP/s.
    pub peak_bf16_flops: f64,
    /// Achievable model-FLOPs utilisation of a well-tuned training run.
    pub mfu: f64,
    /// Where `peak_bf16_flops` and `mfu` come from.
    pub source: &'static str,
    /// Per-GPU intra-node bandwidth (NVLink or PCIe), bytes/s, one direction.
    pub intra_node_bw: f64,
    /// Per-GPU inter-node bandwidth assumed (InfiniBand/RoCE NIC per GPU), bytes/s.
    pub inter_node_bw: f64,
    /// Driver-side memory outside PyTorch's allocator (CUDA context, cuBLAS/NCCL handles), bytes.
    pub context_bytes: u64,
}

const GIB: u64 = 1 << 30;

impl GpuKind {
    /// All kinds, for tables and lookups.
    pub const ALL: [GpuKind; 6] = [
        GpuKind::A100,
        GpuKind::H100,
        GpuKind::H200,
        GpuKind::H800,
        GpuKind::L40s,
        GpuKind::Rtx4090,
    ];

    /// Parses names like `H100`, `H100-80GB`, `h200`, `RTX4090`, `4090`, `l40s`.
    pub fn parse(s: &str) -> Option<GpuKind> {
        let s = s.to_ascii_uppercase().replace([' ', '_'], "-");
        let s = s.trim_start_matches("NVIDIA-");
        Some(match s {
            x if x.starts_with("A100") => GpuKind::A100,
            x if x.starts_with("H100") => GpuKind::H100,
            x if x.starts_with("H200") => GpuKind::H200,
            x if x.starts_with("H800") => GpuKind::H800,
            x if x.starts_with("L40S") => GpuKind::L40s,
            x if x.contains("4090") => GpuKind::Rtx4090,
            _ => return None,
        })
    }

    /// The figures of this kind.
    pub fn spec(self) -> GpuSpec {
        match self {
            GpuKind::A100 => GpuSpec {
                name: "A100-80GB",
                memory_bytes: 85_097_971_712,
                peak_bf16_flops: 312e12,
                mfu: 0.45,
                source: "peak: NVIDIA A100 datasheet (312 TFLOPS dense BF16); MFU: Narayanan et al., \
                         SC'21 (Megatron-LM, 52% of peak at 1T params, 44-48% at 18-175B)",
                intra_node_bw: 300e9,
                inter_node_bw: 25e9,
                context_bytes: 600 * (1 << 20),
            },
            GpuKind::H100 => GpuSpec {
                name: "H100-80GB",
                memory_bytes: 85_520_809_984,
                peak_bf16_flops: 989e12,
                mfu: 0.40,
                source: "peak: NVIDIA H100 SXM datasheet (989 TFLOPS dense BF16); MFU: Llama 3 paper \
                         (Dubey et al. 2024, Table 4: 38-43% BF16 MFU)",
                intra_node_bw: 450e9,
                inter_node_bw: 50e9,
                context_bytes: 600 * (1 << 20),
            },
            GpuKind::H200 => GpuSpec {
                name: "H200-141GB",
                memory_bytes: 150_109_880_320,
                peak_bf16_flops: 989e12,
                mfu: 0.40,
                source: "peak: NVIDIA H200 datasheet (same 989 TFLOPS dense BF16 as H100); MFU: \
                         fixtures/planner step_time_s (Qwen2.5-7B full-bf16 b1 s2048: 0.226 s ≈ 43% \
                         MFU in eager PyTorch) and the H100 figure",
                intra_node_bw: 450e9,
                inter_node_bw: 50e9,
                context_bytes: 600 * (1 << 20),
            },
            GpuKind::H800 => GpuSpec {
                name: "H800-80GB",
                memory_bytes: 85_520_809_984,
                peak_bf16_flops: 989e12,
                mfu: 0.38,
                source: "peak: H800 = H100 SXM compute (989 TFLOPS dense BF16), NVLink 400 GB/s; \
                         MFU: H100 figure (Llama 3 paper) lowered for the slower NVLink (Ferry's assumption)",
                intra_node_bw: 200e9,
                inter_node_bw: 50e9,
                context_bytes: 600 * (1 << 20),
            },
            GpuKind::L40s => GpuSpec {
                name: "L40S-48GB",
                memory_bytes: 48_305_799_168,
                peak_bf16_flops: 362e12,
                mfu: 0.35,
                source: "peak: NVIDIA L40S datasheet (362 TFLOPS dense BF16, 733 with sparsity); MFU: \
                         no published training figure, Ferry's assumption for PCIe-only nodes",
                intra_node_bw: 32e9,
                inter_node_bw: 12.5e9,
                context_bytes: 500 * (1 << 20),
            },
            GpuKind::Rtx4090 => GpuSpec {
                name: "RTX4090-24GB",
                memory_bytes: 25_386_352_640,
                peak_bf16_flops: 165e12,
                mfu: 0.35,
                source: "peak: NVIDIA Ada whitepaper (165 TFLOPS BF16 with FP32 accumulate); MFU: no \
                         published figure, Ferry's assumption",
                intra_node_bw: 16e9,
                inter_node_bw: 12.5e9,
                context_bytes: 500 * (1 << 20),
            },
        }
    }

    /// Nominal memory in GiB, rounded, for messages.
    pub fn memory_gib(self) -> u64 {
        self.spec().memory_bytes.div_ceil(GIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_spellings() {
        assert_eq!(GpuKind::parse("H100-80GB"), Some(GpuKind::H100));
        assert_eq!(GpuKind::parse("nvidia h200"), Some(GpuKind::H200));
        assert_eq!(GpuKind::parse("rtx4090"), Some(GpuKind::Rtx4090));
        assert_eq!(GpuKind::parse("TPUv5"), None);
    }

    #[test]
    fn every_kind_cites_a_source() {
        for k in GpuKind::ALL {
            let s = k.spec();
            assert!(
                s.source.contains("peak:") && s.source.contains("MFU:"),
                "{}",
                s.name
            );
            assert!(s.mfu > 0.2 && s.mfu < 0.6);
        }
    }
}

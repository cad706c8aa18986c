"""Shared pieces of the Megatron-Core scripts: process-group set-up from the torchrun/Ferry
environment, a Llama-style GPTModel (RMSNorm, SwiGLU, rotary, GQA) with the local
(non-TransformerEngine) layer spec, and an attention core that calls PyTorch's fused
scaled_dot_product_attention.

Why the attention core: the local spec's DotProductAttention materialises the [b, heads, s, s]
score and probability tensors, which no production Megatron run keeps (TransformerEngine's fused
attention, which this environment lacks, keeps q, k, v, the output and a log-sum-exp, like flash
attention). `SdpaCoreAttention` keeps exactly those, through torch's flash kernel.
"""
import math
import os

import torch
import torch.nn.functional as F


class SdpaCoreAttention(torch.nn.Module):
    """Drop-in `core_attention` for Megatron-Core's SelfAttention: causal flash attention with
    grouped-query heads, no dropout. Inputs [s, b, heads, d] (keys/values: [s, b, groups, d]),
    output [s, b, heads·d]."""

    def __init__(self, config, layer_number=None, attn_mask_type=None, attention_type=None,
                 attention_dropout=None, softmax_scale=None, cp_comm_type=None, pg_collection=None,
                 **_):
        super().__init__()
        self.config = config
        self.softmax_scale = softmax_scale

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None, **_):
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.softmax_scale, enable_gqa=k.shape[1] != q.shape[1])
        s, b = out.shape[2], out.shape[0]
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)


class RMSNormSP(torch.nn.RMSNorm):
    """torch's RMSNorm for Megatron-Core's local spec, also under sequence parallelism: the
    weight carries Megatron's `sequence_parallel` attribute, so finalize_model_grads all-reduces
    its gradient over the TP group (the local spec's WrappedTorchNorm refuses SP)."""

    def __init__(self, config, hidden_size, eps=1e-5, **_):
        super().__init__(hidden_size, eps=eps)
        setattr(self.weight, "sequence_parallel", config.sequence_parallel)


def init_distributed():
    """Joins the NCCL group from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT. Each rank uses the GPU
    its CUDA_VISIBLE_DEVICES leaves it (Ferry: exactly one), or LOCAL_RANK under plain torchrun."""
    import torch.distributed as dist

    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        raise SystemExit("NCCL_NVLS_ENABLE must be 0 on this host (NVLink multicast stays off)")
    n = torch.cuda.device_count()
    device = 0 if n == 1 else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    return dist.get_rank(), dist.get_world_size()


def padded_vocab(vocab, tp, multiple=128):
    """Megatron's rule: pad to a multiple of make_vocab_size_divisible_by × TP."""
    m = multiple * tp
    return int(math.ceil(vocab / m) * m)


def hf_shape(fields):
    """Megatron sizes from a Hugging Face Llama/Qwen2 config dict."""
    heads = fields["num_attention_heads"]
    return {
        "num_layers": fields["num_hidden_layers"],
        "hidden_size": fields["hidden_size"],
        "ffn_hidden_size": fields["intermediate_size"],
        "num_attention_heads": heads,
        "num_query_groups": fields.get("num_key_value_heads", heads),
        "kv_channels": fields.get("head_dim") or fields["hidden_size"] // heads,
        "vocab_size": fields["vocab_size"],
        "rotary_base": fields.get("rope_theta", 10000.0),
        "norm_epsilon": fields.get("rms_norm_eps", 1e-5),
        "tied": bool(fields.get("tie_word_embeddings", False)),
        "qkv_bias": fields.get("model_type") == "qwen2" or bool(fields.get("attention_bias", False)),
    }


def build_gpt(shape, tp, pp, dtype, seq_len, sequence_parallel, init_std=0.02):
    """One pipeline stage of a Llama-style GPTModel on the current GPU (no VPP)."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    config = TransformerConfig(
        num_layers=shape["num_layers"],
        hidden_size=shape["hidden_size"],
        ffn_hidden_size=shape["ffn_hidden_size"],
        num_attention_heads=shape["num_attention_heads"],
        num_query_groups=shape["num_query_groups"],
        kv_channels=shape["kv_channels"],
        gated_linear_unit=True,
        activation_func=F.silu,
        normalization="RMSNorm",
        layernorm_epsilon=shape["norm_epsilon"],
        add_bias_linear=False,
        add_qkv_bias=shape["qkv_bias"],
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=dtype == torch.bfloat16,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        sequence_parallel=sequence_parallel,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        init_method_std=init_std,
        use_cpu_initialization=False,
    )
    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    spec.submodules.self_attention.submodules.core_attention = SdpaCoreAttention
    spec.submodules.input_layernorm = RMSNormSP
    spec.submodules.pre_mlp_layernorm = RMSNormSP
    block = TransformerBlockSubmodules(layer_specs=[spec] * (shape["num_layers"] // pp),
                                       layer_norm=RMSNormSP)
    model = GPTModel(
        config=config,
        transformer_layer_spec=block,
        vocab_size=padded_vocab(shape["vocab_size"], tp),
        max_sequence_length=seq_len,
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
        parallel_output=True,
        share_embeddings_and_output_weights=shape["tied"],
        position_embedding_type="rope",
        rotary_base=int(shape["rotary_base"]),
        rotary_percent=1.0,
    )
    model = model.cuda()
    if dtype == torch.bfloat16:
        # As Megatron-LM does: bf16 parameters throughout (norms included), inputs cast on the
        # first stage, the last stage's output returned in fp32.
        model = Float16Module(config, model)
    return config, model


class FusedAdamW(torch.optim.AdamW):
    """torch's fused AdamW kernel (one pass, no foreach temporaries), standing in for the
    TransformerEngine/Apex FusedAdam that Megatron-Core uses when installed."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("fused", True)
        kwargs.pop("foreach", None)
        super().__init__(*args, **kwargs)


def use_fused_adam():
    """Megatron-Core falls back to `torch.optim.AdamW` (foreach) without TE/Apex; make that the
    fused kernel, as FusedAdam would be."""
    import megatron.core.optimizer as mo

    if getattr(mo, "USING_PYTORCH_OPTIMIZER", False):
        torch.optim.AdamW = FusedAdamW
        return "torch.optim.AdamW(fused=True)"
    return "FusedAdam (TE/Apex)"

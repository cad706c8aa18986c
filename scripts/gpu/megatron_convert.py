#!/usr/bin/env python3
"""Trains a small Llama-style Megatron-Core GPT (RMSNorm, SwiGLU, rotary, GQA) for a few steps at
--tp / --pp (default TP=2 / PP=2) over NCCL (TP×PP processes, one GPU each), then writes what
`ferry convert` reads:

  WORK/legacy/iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.pt  (torch.save of args, checkpoint_version
      3.0, iteration and model = GPTModel.state_dict_for_save_checkpoint(), as Megatron-LM saves)
  WORK/torch_dist/iter_NNNNNNN/                                 (megatron.core.dist_checkpointing.save
      of {args, checkpoint_version, iteration, model: GPTModel.sharded_state_dict()})
  WORK/reference.safetensors  input_ids [2, 16] and the float32 logits Megatron computes for them
      after training (eval mode, pipeline stages chained with send/recv, TP-gathered, padded
      vocabulary columns removed)

    torchrun --nproc-per-node 4 scripts/gpu/megatron_convert.py --work /tmp/mconv --tp 2 --pp 2
"""
import argparse
import json
import os
import sys
from argparse import Namespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPE = {  # Llama-style, GQA 8 heads / 4 groups; vocabulary not a multiple of 128·TP
    "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 704, "num_attention_heads": 8,
    "num_query_groups": 4, "kv_channels": 32, "vocab_size": 1000, "rotary_base": 500000.0,
    "norm_epsilon": 1e-5, "tied": False, "qkv_bias": False,
}
SEQ, ITERATION = 64, 20
TP, PP = 2, 2  # set from --tp / --pp


def megatron_args(padded, params_dtype):
    s = SHAPE
    return Namespace(
        num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
        num_attention_heads=s["num_attention_heads"], num_query_groups=s["num_query_groups"],
        group_query_attention=True, kv_channels=s["kv_channels"], max_position_embeddings=SEQ,
        seq_length=SEQ, position_embedding_type="rope", use_rotary_position_embeddings=True,
        rotary_base=int(s["rotary_base"]), rotary_percent=1.0, rotary_interleaved=False,
        normalization="RMSNorm", norm_epsilon=s["norm_epsilon"], swiglu=True, add_bias_linear=False,
        add_qkv_bias=False, untie_embeddings_and_output_weights=not s["tied"],
        vocab_size=s["vocab_size"], padded_vocab_size=padded, make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP,
        virtual_pipeline_model_parallel_size=None, params_dtype=params_dtype, fp16=False,
        bf16=False, transformer_impl="local", iteration=ITERATION, init_method_std=0.02,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=ITERATION)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    args = ap.parse_args()
    global TP, PP
    TP, PP = args.tp, args.pp

    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file

    import mcore_common as mc

    rank, world = mc.init_distributed()
    if world != TP * PP:
        raise SystemExit(f"run with {TP * PP} processes (TP={TP} x PP={PP}), got {world}")
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP)
    model_parallel_cuda_manual_seed(20251129)
    mc.use_fused_adam()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    config, gpt = mc.build_gpt(SHAPE, TP, PP, torch.float32, SEQ, sequence_parallel=False)
    padded = mc.padded_vocab(SHAPE["vocab_size"], TP)
    ddp = DistributedDataParallel(config=config, module=gpt, ddp_config=DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, use_distributed_optimizer=False))
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=3e-3, clip_grad=1.0), [ddp])
    config.finalize_model_grads_func = finalize_model_grads
    forward_backward = get_forward_backward_func()

    # A learnable stream: token t+1 = (3·t + 1) mod 997, random starts; same on every rank.
    g = torch.Generator().manual_seed(5)
    starts = torch.randint(0, 997, (8, 1), generator=g)
    seqs = [starts]
    for _ in range(SEQ):
        seqs.append((3 * seqs[-1] + 1) % 997)
    data = torch.cat(seqs, dim=1).cuda()  # [8, SEQ+1]
    pos = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(2, -1)

    def forward_step(it, model):
        tokens = next(it)
        out = model(tokens[:, :-1], pos, None, labels=tokens[:, 1:])
        return out, lambda o: (o.float().mean(), {"loss": o.float().mean().detach()})

    losses = []
    for _ in range(args.steps):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        out = forward_backward(forward_step_func=forward_step, data_iterator=iter(data.split(2)),
                               model=[ddp], num_microbatches=4, seq_length=SEQ, micro_batch_size=2,
                               decoder_seq_length=SEQ, forward_only=False)
        opt.step()
        if out:
            losses.append(float(sum(o["loss"] for o in out) / len(out)))

    tp_rank, pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    margs = megatron_args(padded, torch.float32)
    it_dir = f"iter_{ITERATION:07d}"
    # Legacy: one torch.save per (TP, PP) rank.
    rank_dir = f"mp_rank_{tp_rank:02d}_{pp_rank:03d}" if PP > 1 else f"mp_rank_{tp_rank:02d}"
    legacy = os.path.join(args.work, "legacy", it_dir, rank_dir)
    os.makedirs(legacy, exist_ok=True)
    torch.save({"args": margs, "checkpoint_version": 3.0, "iteration": ITERATION,
                "model": gpt.state_dict_for_save_checkpoint()},
               os.path.join(legacy, "model_optim_rng.pt"))
    # torch_dist: every rank takes part in one dist_checkpointing.save.
    dist_dir = os.path.join(args.work, "torch_dist", it_dir)
    if rank == 0:
        os.makedirs(dist_dir, exist_ok=True)
    dist.barrier()
    dist_checkpointing.save({"args": margs, "checkpoint_version": 3.0, "iteration": ITERATION,
                             "model": gpt.sharded_state_dict()}, dist_dir)
    if rank == 0:
        for fmt in ("legacy", "torch_dist"):
            with open(os.path.join(args.work, fmt, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(ITERATION))

    # Reference logits of the trained model: stage 0 → send hidden → stage 1 → gather over TP.
    gpt.eval()
    ids = torch.randint(0, SHAPE["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(20240607))
    ids_gpu = ids.cuda()
    p16 = torch.arange(16, device="cuda").unsqueeze(0).expand(2, -1)
    with torch.no_grad():
        if pp_rank > 0:
            hidden = torch.empty(16, 2, SHAPE["hidden_size"], device="cuda", dtype=torch.float32)
            dist.recv(hidden, src=rank - TP)
            gpt.set_input_tensor(hidden)
        if pp_rank < PP - 1:
            hidden = gpt(ids_gpu, p16, None)  # [s, b, h]
            dist.send(hidden.contiguous(), dst=rank + TP)
        else:
            logits = gpt(ids_gpu, p16, None, runtime_gather_output=True)  # [b, s, padded]
            if tp_rank == 0:
                save_file({"input_ids": ids.to(torch.int64).contiguous(),
                           "logits": logits[..., :SHAPE["vocab_size"]].float().cpu().contiguous()},
                          os.path.join(args.work, "reference.safetensors"),
                          metadata={"true_vocab": str(SHAPE["vocab_size"]), "padded_vocab": str(padded),
                                    "source": f"megatron-core GPTModel, TP={TP} PP={PP}, NCCL, after training"})
                with open(os.path.join(args.work, "train.json"), "w") as f:
                    json.dump({"losses": losses, "shape": SHAPE, "tp": TP, "pp": PP,
                               "iteration": ITERATION, "padded_vocab": padded,
                               "max_abs_logit": float(logits[..., :SHAPE["vocab_size"]].abs().max())}, f)
                print("trained: loss", losses[0], "->", losses[-1], flush=True)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

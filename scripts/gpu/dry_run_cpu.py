#!/usr/bin/env python3
"""Runs one of the Megatron-Core scripts of scripts/gpu on a CPU-only machine (gloo, one
process per rank), to catch API and shape mistakes before spending GPU time. Memory figures
are meaningless here (zeros).

CUDA calls that megatron-core and the scripts make are redirected for this process only:
`torch.cuda.current_device()` returns the CPU device, `Tensor.cuda()` / `Module.cuda()` return
their argument, synchronisation, peak-memory and RNG-state calls are no-ops on the CPU generator.
No megatron-core code is changed.

    python3 -m torch.distributed.run --standalone --nproc-per-node 4 \
        scripts/gpu/dry_run_cpu.py scripts/gpu/megatron_convert.py --work /tmp/mconv
"""
import os
import runpy
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CPU = torch.device("cpu")
cuda = torch.cuda
cuda.current_device = lambda: CPU
cuda.set_device = lambda *_: None
cuda.device_count = lambda: 1
cuda.is_available = lambda: False
cuda.synchronize = lambda *_: None
cuda.empty_cache = lambda: None
for name in ("memory_allocated", "max_memory_allocated", "max_memory_reserved", "memory_reserved"):
    setattr(cuda, name, lambda *_: 0)
cuda.reset_peak_memory_stats = lambda *_: None
cuda.manual_seed = lambda seed: None
cuda.get_rng_state = lambda *_: torch.get_rng_state()
cuda.set_rng_state = lambda state, *_: None


class _Stream:
    """Stands in for a CUDA stream: the CPU runs everything in order."""

    def __init__(self, *a, **k):
        pass

    def wait_stream(self, *a):
        pass

    def wait_event(self, *a):
        pass

    def synchronize(self):
        pass

    def record_event(self, *a):
        return None


cuda.Stream = _Stream
cuda.current_stream = lambda *a: _Stream()
cuda.default_stream = lambda *a: _Stream()
cuda.stream = lambda *a: __import__("contextlib").nullcontext()
torch.Tensor.record_stream = lambda self, *a: None
_type = torch.Tensor.type


def _cuda_type(self, *a, **k):
    """`t.type()` names CPU tensors as CUDA ones, which megatron-core's optimizers check."""
    if a or k:
        return _type(self, *a, **k)
    name = _type(self)
    return name if ".cuda." in name else name.replace("torch.", "torch.cuda.", 1)


torch.Tensor.type = _cuda_type
torch.Tensor.cuda = lambda self, *a, **k: self
torch.nn.Module.cuda = lambda self, *a, **k: self


def _on_cuda(d):
    return isinstance(d, int) or (isinstance(d, (str, torch.device)) and str(d).startswith("cuda"))


class CpuDevices(torch.overrides.TorchFunctionMode):
    """Rewrites `device="cuda"` (and `.to("cuda")`) in every torch call to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _on_cuda(kwargs.get("device")):
            kwargs["device"] = CPU
        if func in (torch.Tensor.to,) and len(args) > 1 and _on_cuda(args[1]):
            args = (args[0], CPU) + tuple(args[2:])
        return func(*args, **kwargs)


CpuDevices().__enter__()

import mcore_common  # noqa: E402


def init_distributed():
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


_build = mcore_common.build_gpt


def build_gpt(*args, **kwargs):
    import megatron.core.transformer.transformer_config as tc

    original = tc.TransformerConfig.__post_init__

    def post_init(self):
        self.use_cpu_initialization = True
        original(self)

    tc.TransformerConfig.__post_init__ = post_init
    try:
        return _build(*args, **kwargs)
    finally:
        tc.TransformerConfig.__post_init__ = original


import megatron.core.optimizer.optimizer as _mopt  # noqa: E402
import megatron.core.tensor_parallel.random as _mrandom  # noqa: E402

# The model-parallel RNG tracker forks CUDA generator states; the CPU has one generator.
_mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
_mrandom._set_cuda_rng_state = lambda *a, **k: None

# Gradient clipping asserts CUDA tensor types; on the CPU it is skipped.
_mopt.clip_grad_by_total_norm_fp32 = lambda *a, **k: None
mcore_common.init_distributed = init_distributed
mcore_common.build_gpt = build_gpt

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")

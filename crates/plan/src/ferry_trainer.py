"""Ferry's hooks into the Hugging Face Trainer: a checkpoint when the job is asked to stop,
and the Trainer's logs as Ferry metrics lines.

Usage (what Ferry renders): `torchrun ... -m ferry_trainer trl.scripts.sft ARGS...` (or
`swift.cli.sft` for ms-swift), with this file's directory on PYTHONPATH. It adds one callback
to every `transformers.Trainer` and then runs the named module as `__main__`, so the training
script itself is unchanged.

SIGTERM. Ferry stops a run with SIGTERM (preemption, a time limit, a failed rank elsewhere in
the gang) and waits `onFailure.graceSeconds` before SIGKILL; the Trainer has no handler of its
own, so without this everything since the last `--save_steps` checkpoint would be lost. On
SIGTERM a flag is set; at the end of the current optimizer step the ranks agree (an all-reduce
of the flag over a CPU group, so no rank saves alone), the Trainer saves its usual
`checkpoint-<step>` (model, optimizer, scheduler, RNG, trainer state) and every rank exits with
143 (128 + SIGTERM), so the run counts as stopped, not finished. A SIGTERM before training
starts exits at once: there is nothing to save yet. Ferry signals the whole process group, so
`torch.utils.data.DataLoader` worker processes (ms-swift starts one by default) would get
SIGTERM too and die, and the next batch would fail before the checkpoint is written: they
leave the group as they start. Their parent still stops them as usual (they keep SIGTERM's
default action for that), and they exit by themselves if it dies (PyTorch's watchdog).

Metrics. Each time the Trainer logs, rank 0 prints one JSON line with `step`, `max_steps` (the
Trainer's own total, also for jobs given in epochs) and the logged numbers, which is the format
Ferry's control plane reads: loss curves in the store, and the pace that tells the scheduler
when the job will end.
"""

import functools
import json
import math
import os
import runpy
import signal
import sys

EXIT_CODE = 128 + signal.SIGTERM

_requested = False
_training = False


def _log(message):
    print(f"ferry: {message}", file=sys.stderr, flush=True)


def _on_sigterm(signum, frame):
    global _requested
    if not _training:
        _log("SIGTERM before training started; exiting")
        os._exit(EXIT_CODE)
    if not _requested:
        _log("SIGTERM: saving a checkpoint at the end of this step")
    _requested = True


class _Agreement:
    """Whether any rank was asked to stop; every rank calls it once per optimizer step."""

    def __init__(self):
        self.group = None
        self.dist = None
        try:
            import torch.distributed as dist
        except ImportError:
            return
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self.dist = dist
            # A CPU (gloo) group: the per-step agreement needs no GPU synchronisation.
            try:
                self.group = dist.new_group(backend="gloo")
            except Exception as e:  # noqa: BLE001 - any failure falls back to the default group
                _log(f"no gloo group ({e}); agreeing over the default process group")

    def __call__(self, local):
        if self.dist is None:
            return local
        import torch

        device = "cpu"
        if self.group is None and self.dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        flag = torch.tensor([1 if local else 0], dtype=torch.int32, device=device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def barrier(self):
        if self.dist is not None:
            self.dist.barrier(group=self.group)


class _OwnProcessGroup:
    """A DataLoader `worker_init_fn` that moves the worker out of the rank's process group
    (out of reach of the group SIGTERM) with SIGTERM's default action, then runs the loader's
    own one (a class, not a closure, so spawned workers can unpickle it; it is pickled by
    the module's import name, which `main` registers)."""

    __module__ = "ferry_trainer"

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, worker_id):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)
        if self.inner is not None:
            self.inner(worker_id)


def _quiet_dataloader_workers():
    try:
        import torch.utils.data as data
    except ImportError:
        return
    original = data.DataLoader.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if self.num_workers > 0 and not isinstance(self.worker_init_fn, _OwnProcessGroup):
            self.worker_init_fn = _OwnProcessGroup(self.worker_init_fn)

    data.DataLoader.__init__ = init


def _metrics_line(step, max_steps, logs):
    """One JSON object: the step, the total, and every finite number in `logs`."""
    line = {"step": int(step), "max_steps": int(max_steps)}
    for key, value in logs.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and key not in line:
            line[key] = number
    return json.dumps(line)


def _install():
    import transformers

    class FerryHooks(transformers.TrainerCallback):
        """A SIGTERM becomes a checkpoint at the next step end, then an exit; logs become
        metrics lines."""

        def __init__(self):
            self.agreement = None
            self.stopping = False

        def on_train_begin(self, args, state, control, **kwargs):
            global _training
            self.agreement = _Agreement()
            _training = True

        def on_step_end(self, args, state, control, **kwargs):
            agree = self.agreement or (lambda local: local)
            if agree(_requested):
                self.stopping = True
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args, state, control, **kwargs):
            if self.stopping:
                if self.agreement is not None:
                    self.agreement.barrier()
                _log(f"checkpoint-{state.global_step} saved after SIGTERM; exiting")
                sys.stdout.flush()
                os._exit(EXIT_CODE)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs:
                print(_metrics_line(state.global_step, state.max_steps, logs), flush=True)

        def on_train_end(self, args, state, control, **kwargs):
            global _training
            _training = False

    original = transformers.Trainer.__init__

    # `wraps` keeps the original signature visible: trainers built on this one inspect it
    # (ms-swift 4 passes `processing_class` or `tokenizer` by what it finds there).
    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(FerryHooks())

    transformers.Trainer.__init__ = init


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: python -m ferry_trainer MODULE [ARGS...]")
    module = sys.argv[1]
    sys.argv = [module] + sys.argv[2:]
    # Run as `__main__`, which the training module is about to replace: objects defined
    # here are found (by pickle too) under the import name.
    sys.modules.setdefault("ferry_trainer", sys.modules[__name__])
    signal.signal(signal.SIGTERM, _on_sigterm)
    _quiet_dataloader_workers()
    _install()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

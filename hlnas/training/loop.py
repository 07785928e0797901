"""The step loop every hlnas training runs, and the policies it applies: the learning-rate schedule (linear warmup,
then cosine) and the autocast setting (bf16 on CUDA by default).

What differs between trainings is passed in: the batches (already on the device), the step (:func:`make_step`: the
loss, clipping, eager or CUDA graph), the schedule, and ``after_step``, which reads the loss when it needs to,
records, checkpoints, and says when to stop.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from hlnas.training.step import set_lr

__all__ = ["run_steps", "cosine_lr", "device_name", "peak_gib", "autocast_dtype", "autocast_context", "AUTOCAST_SETTINGS",
           "model_device", "evaluating"]

AUTOCAST_SETTINGS = ("auto", "bf16", "off")


def cosine_lr(step: int, total: int, peak: float, warmup_frac: float, min_ratio: float) -> float:
    """Linear warmup over ``warmup_frac`` of ``total`` steps to ``peak``, then cosine to ``peak * min_ratio``."""
    warm = max(1, int(warmup_frac * total)) if warmup_frac > 0 else 0
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def device_name(device) -> str:
    """The hardware a run used, as results name it: the GPU's model for CUDA (GPU-seconds differ by card, and one
    study's calls may land on different cards), else the device type ('cpu')."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return dev.type


def peak_gib(device) -> float | None:
    """The most GPU memory this process has had allocated on ``device`` so far, in GiB (None off CUDA): what a recall
    run needs, for sizing how many share a GPU. The process's peak, not one run's."""
    dev = torch.device(device)
    return round(torch.cuda.max_memory_allocated(dev) / 2**30, 2) if dev.type == "cuda" else None


def autocast_dtype(setting: str, device: torch.device) -> torch.dtype | None:
    """The dtype a training runs its forward pass in: ``auto`` is bf16 on CUDA and full precision elsewhere,
    ``bf16`` always bf16, ``off`` never (None)."""
    use = setting == "bf16" or (setting == "auto" and device.type == "cuda")
    return torch.bfloat16 if use else None


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """An autocast block to ``dtype`` on ``device``, or one that turns an enclosing autocast off (None)."""
    if dtype is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def run_steps(step: Callable[[Tensor, Tensor], Tensor], opt: torch.optim.Optimizer, batches: Iterator[tuple[Tensor, Tensor]],
              lr_at: Callable[[int], float], *, start: int, stop: int,
              after_step: Callable[[int, Tensor], bool]) -> int:
    """Train from ``start`` steps done up to ``stop``: each step takes the next ``(inputs, targets)`` of ``batches``,
    sets the learning rate ``lr_at(steps done before it)`` and runs ``step``; then ``after_step(steps done, loss)``
    (the loss a device tensor: reading it waits for the device) returns True to stop early. Returns the steps done."""
    done = start
    while done < stop:
        x, y = next(batches)
        set_lr(opt, lr_at(done))
        loss = step(x, y)
        done += 1
        if after_step(done, loss):
            break
    return done


def model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters are (CPU for a model without any)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """``model`` in eval mode for the block, then back in the mode it was in (a measure taken during training)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)

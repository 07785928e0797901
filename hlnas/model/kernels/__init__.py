"""Sequence operations of the token mixers, each behind one function with two paths.

* ``fla``: flash-linear-attention's Triton kernels, used for CUDA tensors when fla imports.
* ``torch``: a pure-PyTorch chunked implementation (CPU, and the reference on GPU).

Every op module (one per name in :data:`OPS`) has its PyTorch path, ``naive_<op>`` (a token-by-token
recurrence in plain PyTorch: the ground truth the other two paths are tested against) and the public
``<op>``, which asks :mod:`hlnas.model.kernels.backends` for the route of each call. That module alone decides
the path and calls fla: the ``backend=`` argument, ``HLNAS_KERNEL_BACKEND`` (``auto`` | ``fla`` |
``torch``), ``HLNAS_TORCH_OPS``, the per-op rules that refuse fla where its kernels fail (each logged
once), the argument adaptation for fla, and ``HLNAS_TRITON_AUTOTUNE=quick``. Attention has no fla path:
it always runs torch SDPA. ``causal_conv1d`` (the short convolutions) is not a recurrence: its reference is a loop over
time windows, and fla's kernel takes only calls without a decode state. ``l2norm`` (the delta rules' q/k norm) is
not one either: its reference is the formula in float64.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from hlnas.model.kernels.backends import (BACKENDS, fla_status, kernel_fallbacks, kernel_paths, quick_autotune,
                                          resolve_backend, use_backend, warn_once)

__all__ = ["BACKENDS", "OPS", "resolve_backend", "fla_status", "kernel_fallbacks", "kernel_paths", "use_backend", "quick_autotune", "warn_once", "without_autocast"]

#: Every sequence op, one module each under hlnas/model/kernels/, with ``<op>`` and ``naive_<op>`` (inputs for checks: tests/kernels/inputs.py).
OPS = ("attention", "hgrn", "simple_gla", "gla", "delta_rule", "gated_delta_rule", "kda", "rwkv7", "causal_conv1d", "l2norm")


def without_autocast(fn):
    """Run a PyTorch path in the precision it chose (float32, or float64 in tests), not an enclosing autocast's.

    The trainer runs models under bf16 autocast on CUDA; there, autocast would recast these paths' matmuls
    to bf16 and ``triangular_solve`` has no bf16 kernel at all (both met on Hopper GPUs, where the PyTorch
    path is the fallback for several fla kernels). Outputs still leave in the input's dtype.
    """

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with contextlib.ExitStack() as stack:
            for device_type in ("cuda", "cpu"):
                if torch.is_autocast_enabled(device_type):
                    stack.enter_context(torch.autocast(device_type, enabled=False))
            return fn(*args, **kwargs)

    return run

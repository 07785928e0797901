"""Sequence operations of the token mixers, each behind one function with two paths.

* ``fla``: flash-linear-attention's Triton kernels, used for CUDA tensors when fla imports.
* ``torch``: a pure-PyTorch chunked implementation (CPU, and the reference on GPU).

Every op module also has ``naive_<op>``, a token-by-token recurrence in plain PyTorch: the
ground truth the other two paths are tested against.

Compile time: fla autotunes every Triton kernel over dozens of configs, and a cold compile of one mixer
took up to 6 minutes on the H200 (reference/device-notes.md). ``HLNAS_TRITON_AUTOTUNE=quick`` keeps one
config per kernel (num_warps nearest 4, num_stages nearest 2) so kernels compile in seconds, at some
cost in kernel speed; for short GPU leases where compiling would eat the budget.

Backend choice: the ``backend=`` argument, else the ``HLNAS_KERNEL_BACKEND`` environment variable
(``auto`` | ``fla`` | ``torch``), else ``auto``; ``HLNAS_TORCH_OPS`` names ops that always take the
PyTorch path. ``auto`` picks ``fla`` for CUDA tensors when fla
can be imported and ``torch`` otherwise; the reason fla was rejected is logged once per process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator

import torch

from hlnas.errors import KernelUnavailable

__all__ = ["BACKENDS", "OPS", "resolve_backend", "fla_status", "use_backend", "quick_autotune", "warn_once", "without_autocast"]

#: Every sequence op, one module each under hlnas/kernels/, with ``<op>`` and ``naive_<op>`` (inputs for checks: tests/kernels/inputs.py).
OPS = ("attention", "hgrn", "simple_gla", "gla", "delta_rule", "gated_delta_rule")

log = logging.getLogger("hlnas.kernels")

BACKENDS = ("auto", "fla", "torch")
_override: str | None = None
_logged: set[str] = set()


@functools.cache
def fla_status() -> tuple[bool, str]:
    """(importable, reason). Importing fla takes seconds (17 s on the H200), so only once."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        import fla.ops  # noqa: F401
    except Exception as e:  # ImportError, or triton failing to find a driver
        return False, f"fla cannot be imported: {type(e).__name__}: {e}"
    return True, "ok"


def resolve_backend(op: str, x: torch.Tensor, backend: str | None = None) -> str:
    """Return 'fla' or 'torch' for running ``op`` on tensors like ``x``."""
    choice = backend or _override or os.environ.get("HLNAS_KERNEL_BACKEND", "auto")
    if choice not in BACKENDS:
        raise KernelUnavailable(op, choice, f"unknown backend; allowed: {', '.join(BACKENDS)}")
    if choice == "torch" or op in _torch_ops():
        return "torch"
    if not x.is_cuda:
        if choice == "fla":
            raise KernelUnavailable(op, "fla", f"tensors are on {x.device}; fla's Triton kernels need CUDA")
        return "torch"
    ok, reason = fla_status()
    if ok:
        return "fla"
    if choice == "fla":
        raise KernelUnavailable(op, "fla", reason)
    warn_once(f"using the PyTorch kernels on CUDA: {reason}")
    return "torch"


def without_autocast(fn):
    """Run a PyTorch path in the precision it chose (float32, or float64 in tests), not an enclosing autocast's.

    The trainer runs models under bf16 autocast on CUDA; there, autocast would recast these paths' matmuls
    to bf16 and ``triangular_solve`` has no bf16 kernel at all (both found on the H200, where the PyTorch
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


def warn_once(message: str) -> None:
    """Log a kernel-path warning once per process (a fallback is chosen on every call of an op)."""
    if message not in _logged:
        _logged.add(message)
        log.warning(message)


def _torch_ops() -> set[str]:
    """``HLNAS_TORCH_OPS=simple_gla,...``: ops kept on the PyTorch path even on CUDA (a kernel under suspicion)."""
    return {o.strip() for o in os.environ.get("HLNAS_TORCH_OPS", "").split(",") if o.strip()}


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend inside a block (tests, benchmarks)."""
    global _override
    if name not in BACKENDS:
        raise KernelUnavailable("*", name, f"unknown backend; allowed: {', '.join(BACKENDS)}")
    old, _override = _override, name
    try:
        yield
    finally:
        _override = old


def quick_autotune() -> bool:
    """Make Triton's autotuner try one config per kernel (see the module docstring). Idempotent."""
    try:
        from triton.runtime import autotuner
    except Exception:  # no triton: nothing to tune
        return False
    if getattr(autotuner.Autotuner.prune_configs, "_hlnas_quick", False):
        return True
    full = autotuner.Autotuner.prune_configs

    def prune_configs(self, kwargs, *args, **kw):
        configs = full(self, kwargs, *args, **kw)
        if len(configs) <= 1:
            return configs
        return [min(configs, key=lambda c: (abs((c.num_warps or 4) - 4), abs((c.num_stages or 2) - 2)))]

    prune_configs._hlnas_quick = True
    autotuner.Autotuner.prune_configs = prune_configs
    log.info("HLNAS_TRITON_AUTOTUNE=quick: one Triton config per kernel")
    return True


if os.environ.get("HLNAS_TRITON_AUTOTUNE") == "quick":
    quick_autotune()

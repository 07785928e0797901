"""Sequence operations of the token mixers, each behind one function with two paths.

* ``fla``: flash-linear-attention's Triton kernels, used for CUDA tensors when fla imports.
* ``torch``: a pure-PyTorch chunked implementation (CPU, and the reference on GPU).

Every op module also has ``naive_<op>``, a token-by-token recurrence in plain PyTorch: the
ground truth the other two paths are tested against.

Backend choice: the ``backend=`` argument, else the ``HLNAS_KERNEL_BACKEND`` environment variable
(``auto`` | ``fla`` | ``torch``), else ``auto``. ``auto`` picks ``fla`` for CUDA tensors when fla
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

__all__ = ["BACKENDS", "OPS", "resolve_backend", "fla_status", "use_backend"]

#: Every sequence op, one module each under hlnas/kernels/, with ``<op>``, ``naive_<op>`` and ``make_inputs``.
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
    if choice == "torch":
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
    if reason not in _logged:
        _logged.add(reason)
        log.warning("using the PyTorch kernels on CUDA: %s", reason)
    return "torch"


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

"""When the PyTorch paths of the chunked recurrences (simple GLA / Mamba-2, the delta rules) recompute their forward in
backward instead of keeping their temporaries: one rule for all of them.

Each keeps, per layer, chunk-start states ``[B, H, T/64, K, V]`` float32 and temporaries several times their size for
backward. Mamba-2 at paper-340m (B=8, T=4096, 32 heads, K=128, V=64) holds 0.5 GiB of states a layer, about 3.5 GiB
of saved temporaries, and ran out of a 141 GB GPU's memory over 24 layers; GatedDeltaNet on its PyTorch backward (fla
#640, no TileLang) ran out of an 80 GB GPU's at the same shape. Above
:data:`RECOMPUTE_ABOVE_BYTES` a call keeps only its inputs and runs its forward again in backward, one layer at a
time; a 24-layer recall model at d=128 holds 4 MiB and keeps its temporaries (no recompute, no slowdown)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = ["RECOMPUTE_ABOVE_BYTES", "chunk_state_bytes", "maybe_recompute"]

RECOMPUTE_ABOVE_BYTES = 64 * 2**20


def chunk_state_bytes(q: Tensor, v: Tensor, chunk_size: int = 64) -> int:
    """Bytes of float32 chunk-start states ``[B, H, ceil(T / chunk_size), K, V]`` for q ``[B, T, H, K]``, v ``[.., V]``."""
    B, T, H, K = q.shape
    return B * H * -(-T // chunk_size) * K * v.shape[-1] * 4


def maybe_recompute(fn: Callable, *args, qv: tuple[Tensor, Tensor], chunk_size: int = 64, **kwargs):
    """``fn(*args, **kwargs)``, through a non-reentrant checkpoint where a gradient is being recorded and the call's
    chunk-start states (``qv``: its q and v) exceed :data:`RECOMPUTE_ABOVE_BYTES` (the same values and gradients
    either way)."""
    if torch.is_grad_enabled() and chunk_state_bytes(*qv, chunk_size) > RECOMPUTE_ABOVE_BYTES:
        return checkpoint(fn, *args, use_reentrant=False, **kwargs)
    return fn(*args, **kwargs)

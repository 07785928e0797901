"""Causal softmax attention: torch SDPA (fused flash kernels on GPU, no flash_attn package needed)
and a naive reference.

Shapes: q ``[B, T, H, D]``, k and v ``[B, S, Hkv, D]`` with ``S >= T``: the T queries are the
last T positions of the S keys (decoding appends to a cache). ``H`` must be a multiple of ``Hkv`` (GQA).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.nn import compute_dtype

__all__ = ["attention", "naive_attention"]


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.ndim != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"attention expects q [B,T,H,D], k/v [B,S,Hkv,D]; got q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}")
    if q.shape[1] > k.shape[1]:
        raise ValueError(f"more queries than keys: q.shape[1]={q.shape[1]} > k.shape[1]={k.shape[1]}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"q heads ({q.shape[2]}) must be a multiple of kv heads ({k.shape[2]})")


def _mask(T: int, S: int, window: int | None, device: torch.device) -> Tensor:
    i = torch.arange(T, device=device)[:, None] + (S - T)
    j = torch.arange(S, device=device)[None, :]
    m = j <= i
    if window is not None:
        m &= j > i - window  # each query sees itself and window-1 earlier tokens
    return m


def attention(q: Tensor, k: Tensor, v: Tensor, *, window: int | None = None, scale: float | None = None) -> Tensor:
    """Causal (optionally sliding-window) attention -> ``[B, T, H, D]``."""
    _check(q, k, v)
    T, S = q.shape[1], k.shape[1]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    gqa = qh.shape[1] != kh.shape[1]
    if window is None and T == S:
        # is_causal keeps SDPA on its fused flash path on GPU; an explicit mask would not.
        o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale, enable_gqa=gqa)
    elif window is None and T == 1:
        o = F.scaled_dot_product_attention(qh, kh, vh, scale=scale, enable_gqa=gqa)
    else:
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=_mask(T, S, window, q.device), scale=scale, enable_gqa=gqa)
    return o.transpose(1, 2)


def naive_attention(q: Tensor, k: Tensor, v: Tensor, *, window: int | None = None, scale: float | None = None) -> Tensor:
    """Reference: explicit scores, mask and softmax in float32 (float64 stays float64)."""
    _check(q, k, v)
    dt = compute_dtype(q)
    H, Hkv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=2).to(dt)
    v = v.repeat_interleave(H // Hkv, dim=2).to(dt)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("bthd,bshd->bhts", q.to(dt), k) * scale
    s = s.masked_fill(~_mask(q.shape[1], k.shape[1], window, q.device), float("-inf"))
    return torch.einsum("bhts,bshd->bthd", s.softmax(-1), v).to(q.dtype)

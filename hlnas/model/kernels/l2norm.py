"""L2 normalisation over the last dimension (fla ``fla.modules.norm.l2norm``): the delta rules' q and k before their
recurrence (:mod:`hlnas.model.mixers.deltanet`, :mod:`hlnas.model.mixers.gated_deltanet`).

    y = x / sqrt(sum_d x_d^2 + eps)        computed in float32 (float64 stays), returned in x's dtype

Paths: :func:`naive_l2norm` (the formula in float64, the reference); :func:`l2norm_torch` (the same in float32 as
PyTorch ops: on CUDA a cast, a square, a sum, an rsqrt, a broadcast multiply and a cast back, and about as many again
in backward, each a pass over ``[B, T, H, D]``); fla's Triton kernels (one pass forward, one backward) for CUDA calls
that are not float64 and outside ``torch.compile`` (which fuses the PyTorch form itself, where fla's would break the
graph). fla's backward reads the normalised output in x's dtype where autograd through the PyTorch path keeps float32,
so in bf16 the two differ by its rounding.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hlnas.model.kernels import backends, fla_calls
from hlnas.model.nn import compute_dtype

__all__ = ["l2norm", "naive_l2norm", "l2norm_torch", "EPS"]

#: fla's default, which its DeltaNet and GatedDeltaNet layers use
EPS = 1e-6


def naive_l2norm(x: Tensor, eps: float = EPS) -> Tensor:
    """The formula in float64 -> x's dtype."""
    x64 = x.double()
    return (x64 / torch.sqrt((x64 * x64).sum(-1, keepdim=True) + eps)).to(x.dtype)


def l2norm_torch(x: Tensor, eps: float = EPS) -> Tensor:
    """The PyTorch path: float32 (float64 stays) -> x's dtype."""
    xf = x.to(compute_dtype(x))
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


def l2norm(x: Tensor, eps: float = EPS, *, backend: str | None = None) -> Tensor:
    """``x [..., D]`` normalised over D, in x's dtype. ``backend``: "fla" | "torch" | "auto"
    (:func:`hlnas.model.kernels.resolve_backend`)."""
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"l2norm expects x [..., D] with D >= 1; got shape {tuple(x.shape)}")
    if backends.route("l2norm", backend, x=x) == "fla":
        return fla_calls.fla_l2norm(x, eps)
    return l2norm_torch(x, eps)

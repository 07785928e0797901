"""Linear attention with a scalar decay per head and step (fla ``fla.ops.simple_gla``).

    S_t = exp(g_t) S_{t-1} + k_t^T v_t,    o_t = scale * q_t S_t

Shapes: q, k ``[B, T, H, K]``, v ``[B, T, H, V]``, state ``[B, H, K, V]`` (float32).
The log-decay is either data-dependent, g ``[B, T, H]``, or constant per head, g_gamma ``[H]``
(RetNet's retention: g_gamma = log(1 - 2^(-5 - h))); with neither there is no decay.

One op serves two mixers: RetNet (g_gamma, scale = K^-0.5) and Mamba-2's SSD
(q = C, k = B, v = x * dt, g = A * dt, scale = 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.nn import compute_dtype
from hlnas.model.kernels import backends, fla_calls, without_autocast
from hlnas.model.kernels.recompute import maybe_recompute

__all__ = ["simple_gla", "naive_simple_gla", "chunk_simple_gla_torch"]


def _check(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, g_gamma: Tensor | None, h0: Tensor | None) -> None:
    if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            "simple_gla expects q, k [B,T,H,K] and v [B,T,H,V]; "
            f"got q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}"
        )
    B, T, H, K = q.shape
    if g is not None and g_gamma is not None:
        raise ValueError("simple_gla takes g ([B,T,H]) or g_gamma ([H]), not both")
    if g is not None and g.shape != (B, T, H):
        raise ValueError(f"simple_gla g must be [B,T,H]=[{B},{T},{H}]; got {tuple(g.shape)}")
    if g_gamma is not None and g_gamma.shape != (H,):
        raise ValueError(f"simple_gla g_gamma must be [H]=[{H}]; got {tuple(g_gamma.shape)}")
    if h0 is not None and h0.shape != (B, H, K, v.shape[-1]):
        raise ValueError(
            f"simple_gla initial_state must be [B,H,K,V]=[{B},{H},{K},{v.shape[-1]}]; got {tuple(h0.shape)}"
        )


def _log_decay(q: Tensor, g: Tensor | None, g_gamma: Tensor | None, dt: torch.dtype) -> Tensor:
    """The per-step log-decay as ``[B, T, H]`` in ``dt`` (zeros when there is none)."""
    B, T, H, _ = q.shape
    if g is not None:
        return g.to(dt)
    if g_gamma is not None:
        return g_gamma.to(dt).expand(B, T, H)
    return q.new_zeros(B, T, H, dtype=dt)


@without_autocast
def naive_simple_gla(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None = None,
    *,
    g_gamma: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference -> (o ``[B, T, H, V]`` in q's dtype, final state ``[B, H, K, V]`` or None)."""
    _check(q, k, v, g, g_gamma, initial_state)
    dt = compute_dtype(q)
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    gl = _log_decay(q, g, g_gamma, dt)
    qs, ks, vs = q.to(dt) * scale, k.to(dt), v.to(dt)
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=dt) if initial_state is None else initial_state.to(dt)
    out = []
    for t in range(T):
        S = gl[:, t, :, None, None].exp() * S + ks[:, t, :, :, None] * vs[:, t, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", qs[:, t], S))
    o = torch.stack(out, 1) if T else v.new_zeros(B, 0, H, v.shape[-1], dtype=dt)
    return o.to(q.dtype), (S if output_final_state else None)


#: exp(x) is computed as exp2(x * log2(e)) on log-decays kept in log2 units: on CPU torch's exp2
#: kernel is ~3x faster than exp's. The cumulative sums carry rounding of the same size.
_LOG2E = 1.4426950408889634


@without_autocast
def chunk_simple_gla_torch(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None = None,
    *,
    g_gamma: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor | None]:
    """Block-parallel form of :func:`naive_simple_gla`, pure PyTorch and differentiable.

    Within a chunk: masked, decay-weighted ``q k^T`` times v (matmuls). Across chunks: each chunk's
    contribution to the state is computed in one batched matmul; only the [B, H, K, V] carry
    ``S <- exp(sum g) S + U`` loops over chunks. Every ``exp`` takes a difference of cumulative
    log-decays that is <= 0 (the upper triangle is masked before exp), so nothing overflows.
    All matmuls are 3-D batched ones on contiguous [B*H*n, C, D] blocks (made once, so no
    matmul copies its operands), ``scale`` rides on their alpha, exponentials are exp2 of
    log2-decays, and the large temporaries are updated in place where autograd allows it.
    """
    _check(q, k, v, g, g_gamma, initial_state)
    dt = compute_dtype(q)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    C = max(1, min(chunk_size, T))
    n = -(-T // C)
    pad = n * C - T

    def blocks(t: Tensor) -> Tensor:  # [B, T, H, D] -> [B*H*n, C, D], contiguous; padding: zeros
        t = t.to(dt)
        if pad:
            t = F.pad(t, (0, 0, 0, 0, 0, pad))
        return t.reshape(B, n, C, H, -1).permute(0, 3, 1, 2, 4).reshape(B * H * n, C, -1)

    qc, kc, vc = blocks(q), blocks(k), blocks(v)
    # padded steps get g = 0 (no decay) and k = v = 0: the state passes through them unchanged
    gl = _log_decay(q, g, g_gamma, dt)
    if pad:
        gl = F.pad(gl, (0, 0, 0, pad))
    gc = (gl.reshape(B, n, C, H).permute(0, 3, 1, 2) * _LOG2E).cumsum(-1).reshape(B * H * n, C)  # log2 units

    mask = torch.full((C, C), float("-inf"), dtype=dt, device=q.device).triu(1)
    # in place where autograd allows it: each [B*H*n, C, C] or [B*H*n, C, D] temporary is MBs
    decay = torch.sub(gc[:, :, None], gc[:, None, :]).add_(mask).exp2_()  # 0 above the diagonal
    A = torch.baddbmm(qc.new_zeros(()), qc, kc.transpose(1, 2), beta=0, alpha=scale).mul_(decay)

    last = gc[:, -1:]  # total log2-decay of each chunk
    U = torch.bmm((kc * torch.exp2(last - gc)[..., None]).transpose(1, 2), vc)  # [B*H*n, K, V]
    chunk_decay = torch.exp2(last).view(B, H, n, 1, 1).unbind(2)
    U = U.view(B, H, n, K, V).unbind(2)
    S = q.new_zeros(B, H, K, V, dtype=dt) if initial_state is None else initial_state.to(dt)
    starts = []
    for i in range(n):
        starts.append(S)
        S = torch.addcmul(U[i], chunk_decay[i], S)
    starts = torch.stack(starts, 2).view(B * H * n, K, V)
    # intra-chunk part, then the inter-chunk part added in place
    o = torch.bmm(A, vc).baddbmm_(qc * torch.exp2(gc)[..., None], starts, alpha=scale)
    o = o.view(B, H, n * C, V).transpose(1, 2)[:, :T]
    return o.to(q.dtype), (S if output_final_state else None)


def simple_gla(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None = None,
    *,
    g_gamma: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    backend: str | None = None,
) -> tuple[Tensor, Tensor | None]:
    """S_t = exp(g_t) S_{t-1} + k_t^T v_t, o_t = scale q_t S_t -> (o ``[B,T,H,V]``, state ``[B,H,K,V]`` float32).

    g ``[B, T, H]`` or g_gamma ``[H]``: log-decays (<= 0). ``scale`` defaults to K^-0.5 (fla's default).
    ``initial_state`` ``[B, H, K, V]`` (float32).
    """
    _check(q, k, v, g, g_gamma, initial_state)
    inputs = dict(q=q, k=k, v=v, g=g, g_gamma=g_gamma, initial_state=initial_state)
    if backends.route("simple_gla", backend, **inputs) == "fla":  # its rules: backends.RULES["simple_gla"]
        return fla_calls.fla_simple_gla(**inputs, scale=scale, output_final_state=output_final_state)
    # large inputs keep only themselves for backward and recompute the rest there (hlnas.model.kernels.recompute)
    return maybe_recompute(chunk_simple_gla_torch, **inputs, qv=(q, v), scale=scale,
                           output_final_state=output_final_state)


"""Kimi Delta Attention (KDA, Kimi Linear, arXiv 2510.26692): the gated delta rule with a decay per key channel.

    S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T        o_t = scale * q_t^T S_t

Decay first, then the delta correction against the decayed state (fla's ``fla.ops.kda`` order), so with ``g`` equal
across a head's channels it is the gated delta rule. Shapes: q, k ``[B, T, H, K]`` (keys l2-normalized by the
caller), v ``[B, T, H, V]``, g ``[B, T, H, K]`` (natural-log decays, ``<= 0``), beta ``[B, T, H]`` (in (0, 1), or
(0, 2) with negative eigenvalues), state ``[B, H, K, V]`` float32. ``scale`` defaults to ``K ** -0.5`` as in fla.

The PyTorch path is the DPLR recurrence of :mod:`hlnas.model.kernels.dplr`: decay then delta is
``diag(e^g) S + b (a^T S) + k' v^T`` with ``a = -e^g k``, ``b = k' = beta k``. ``naive_kda`` is its own token loop,
written the decay-then-delta way, so the chunked path is checked against the rule as the paper states it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hlnas.model.kernels import backends, fla_calls, without_autocast
from hlnas.model.kernels.dplr import DPLR_CHUNK, check_dplr_inputs, chunked_dplr_recurrence
from hlnas.model.nn import compute_dtype

__all__ = ["kda", "naive_kda", "chunk_kda_torch"]


def _check(q, k, v, g, beta, initial_state) -> None:
    check_dplr_inputs("kda", {"q": q, "k": k, "g": g}, v, {"beta": beta}, initial_state)


@without_autocast
def naive_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
              initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference in float32 (float64 stays float64): decay the state per key channel, then correct it
    toward v. Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` or None)."""
    _check(q, k, v, g, beta, initial_state)
    out_dtype, dt = q.dtype, compute_dtype(q)
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    q, k, v, g = (x.to(dt).transpose(1, 2) for x in (q, k, v, g))
    beta = beta.to(dt).transpose(1, 2)
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.to(dt)
    out = []
    for t in range(T):
        S = g[:, :, t].exp()[..., None] * S
        kt = k[:, :, t]
        u = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhk,bhkv->bhv", kt, S))
        S = S + kt[..., :, None] * u[..., None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t] * scale, S))
    o = torch.stack(out, 2).transpose(1, 2).to(out_dtype)
    return o, (S if output_final_state else None)


def _as_dplr(k: Tensor, g: Tensor, beta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """KDA's (a, b, k') of the DPLR form."""
    kb = k * beta[..., None]
    return -(g.exp() * k), kb, kb


def chunk_kda_torch(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                    initial_state: Tensor | None = None, output_final_state: bool = False,
                    chunk_size: int = DPLR_CHUNK) -> tuple[Tensor, Tensor | None]:
    """Chunked KDA in PyTorch. Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` or None)."""
    _check(q, k, v, g, beta, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dt = compute_dtype(q)
    a, b, kk = _as_dplr(k.to(dt), g.to(dt), beta.to(dt))
    o, s = chunked_dplr_recurrence(q, kk, v, a, b, g, scale, initial_state, output_final_state, chunk_size)
    return o.to(q.dtype), s


def kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
        initial_state: Tensor | None = None, output_final_state: bool = False,
        backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """KDA -> (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32 or None).

    q, k ``[B,T,H,K]`` (k l2-normalized), v ``[B,T,H,V]``, g ``[B,T,H,K]`` log-decays, beta ``[B,T,H]``,
    initial_state ``[B,H,K,V]``. ``backend``: "fla" | "torch" | "auto" (:func:`hlnas.model.kernels.resolve_backend`).
    """
    _check(q, k, v, g, beta, initial_state)
    if backends.route("kda", backend, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state) == "fla":
        return fla_calls.fla_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                output_final_state=output_final_state)
    return chunk_kda_torch(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                           output_final_state=output_final_state)

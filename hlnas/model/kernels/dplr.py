"""The diagonal-plus-low-rank (DPLR) state recurrence shared by KDA and RWKV-7: their PyTorch paths.

    S_t = diag(exp(gk_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T        o_t = scale * q_t^T S_t

State ``S`` is ``[B, H, K, V]`` (keys down the rows, fla's default layout). Shapes: q, k, a, b, gk ``[B, T, H, K]``
(gk the natural-log decay per key channel, ``<= 0``), v ``[B, T, H, V]``. The decay and the low-rank term both act on
``S_{t-1}``: RWKV-7's transition ``diag(w_t) - kappa_t (a_t kappa_t)^T`` (arXiv 2503.14456, section 4) with
``a = -kappa, b = kappa * a``, and KDA's decay-then-delta step (:mod:`hlnas.model.kernels.kda` writes it in this form).

Chunked path. Inside a chunk starting from state ``S_0``, with ``c_s`` the cumulative log-decay through token s and
``p_s = c_s - gk_s`` (through s-1), every state is
``S_s = exp(c_s) S_0 + sum_{j<=s} exp(c_s - c_j) (b_j u_j^T + k_j v_j^T)`` where ``u_j = S_{j-1}^T a_j``. So the
``u`` of a chunk solve one unit lower-triangular system ``(I - A_ab) U = A_ak V + (exp(p) a) S_0``, with
``A_xy[s, j] = sum_d x_s[d] exp(p_s[d] - c_j[d]) y_j[d]`` for j < s. Every exponent is a difference ``c_s - c_j``
(or ``p_s - c_j``) with j before s, so never positive: no overflow however strong the decay, at the price of one
``[C, C, K]`` tensor of pairwise decays per chunk (exact per channel, where a factorisation through the chunk start
would overflow). The loop left is the state hand-off between chunks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.kernels import without_autocast
from hlnas.model.nn import compute_dtype

__all__ = ["naive_dplr_recurrence", "chunked_dplr_recurrence", "check_dplr_inputs", "DPLR_CHUNK"]

#: Chunk length of the PyTorch path: the pairwise decays cost C^2 K a chunk, so shorter than the delta rules' chunks.
DPLR_CHUNK = 16


def check_dplr_inputs(op: str, keyed: dict[str, Tensor], v: Tensor, per_head: dict[str, Tensor],
                      initial_state: Tensor | None) -> None:
    """``keyed`` tensors must share one ``[B,T,H,K]`` shape, v be ``[B,T,H,V]``, ``per_head`` ones ``[B,T,H]``; the
    messages quote the shapes got."""
    (n0, t0), *rest = keyed.items()
    if t0.ndim != 4:
        raise ValueError(f"{op} expects {n0} [B,T,H,K]; got {n0}={tuple(t0.shape)}")
    for n, t in rest:
        if t.shape != t0.shape:
            raise ValueError(f"{op} expects {n} of {n0}'s shape [B,T,H,K]={tuple(t0.shape)}; got {n}={tuple(t.shape)}")
    if v.ndim != 4 or v.shape[:3] != t0.shape[:3]:
        raise ValueError(f"{op} expects v [B,T,H,V] with {n0}'s B,T,H; got v={tuple(v.shape)} {n0}={tuple(t0.shape)}")
    for n, t in per_head.items():
        if t.shape != t0.shape[:3]:
            raise ValueError(f"{op} expects {n} [B,T,H]={tuple(t0.shape[:3])}; got {n}={tuple(t.shape)}")
    if initial_state is not None:
        B, _, H, K = t0.shape
        want = (B, H, K, v.shape[-1])
        if tuple(initial_state.shape) != want:
            raise ValueError(f"{op} initial_state must be [B,H,K,V]={want}; got {tuple(initial_state.shape)}")


@without_autocast
def naive_dplr_recurrence(q, k, v, a, b, gk, scale, initial_state, output_final_state):
    """Token loop of the DPLR recurrence in float32 (float64 stays float64): the ground truth of the chunked path."""
    out_dtype, dt = q.dtype, compute_dtype(q)
    B, T, H, K = q.shape
    q, k, v, a, b, gk = (x.to(dt).transpose(1, 2) for x in (q, k, v, a, b, gk))  # [B,H,T,D]
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.to(dt)
    out = []
    for t in range(T):
        u = torch.einsum("bhk,bhkv->bhv", a[:, :, t], S)  # a_t^T S_{t-1}
        S = gk[:, :, t].exp()[..., None] * S + b[:, :, t, :, None] * u[..., None, :] + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    o = torch.stack(out, 2).transpose(1, 2).to(out_dtype)
    return o, (S if output_final_state else None)


def _pairwise(x: Tensor, c_row: Tensor, c_col: Tensor, y: Tensor, strict: bool) -> Tensor:
    """``M[s, j] = sum_d x_s[d] exp(c_row_s[d] - c_col_j[d]) y_j[d]`` for j < s (``strict``) or j <= s, else 0.
    x, c_row ``[..., C, K]``; y, c_col ``[..., C, K]`` -> ``[..., C, C]``."""
    C = x.shape[-2]
    keep = torch.ones(C, C, dtype=torch.bool, device=x.device).tril(-1 if strict else 0)
    diff = (c_row[..., :, None, :] - c_col[..., None, :, :]).masked_fill(~keep[..., None], float("-inf"))
    return torch.einsum("...sd,...sjd,...jd->...sj", x, diff.exp(), y)


@without_autocast
def chunked_dplr_recurrence(q, k, v, a, b, gk, scale, initial_state, output_final_state, chunk_size=DPLR_CHUNK):
    """Chunked DPLR recurrence in PyTorch (one triangular solve a chunk, a loop over chunks only); autograd-differentiable.

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out_dtype, dt = q.dtype, compute_dtype(q)
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = max(1, min(chunk_size, T))
    N = -(-T // C)
    pad = N * C - T
    # [B,T,H,D] -> [B,H,N,C,D]; zero-padded tail tokens (k=v=a=b=0, no decay) neither read nor change the state
    q, k, v, a, b, gk = (F.pad(x.to(dt).transpose(1, 2), (0, 0, 0, pad)).reshape(B, H, N, C, -1)
                         for x in (q, k, v, a, b, gk))
    c = gk.cumsum(-2)  # log-decay through token s
    p = c - gk  # through token s-1
    A_ab = _pairwise(a, p, c, b, strict=True)
    A_ak = _pairwise(a, p, c, k, strict=True)
    A_qb = _pairwise(q, c, c, b, strict=False)
    A_qk = _pairwise(q, c, c, k, strict=False)
    eye = torch.eye(C, dtype=dt, device=q.device)
    Tinv = torch.linalg.solve_triangular(eye - A_ab, eye.expand(B, H, N, C, C), upper=False, unitriangular=True)
    u0 = Tinv @ (A_ak @ v)  # U = u0 + w S_0
    w = Tinv @ (p.exp() * a)
    last = c[..., -1:, :]  # [B,H,N,1,K]
    carry = last.exp().transpose(-1, -2)  # [B,H,N,K,1]: the chunk's decay of the state it starts from
    b_out = (b * (last - c).exp()).transpose(-1, -2)  # [B,H,N,K,C]: token s reaches the chunk end decayed by exp(c_C - c_s)
    k_out = (k * (last - c).exp()).transpose(-1, -2)
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(dt)
    states, us = [], []
    for n in range(N):  # the only sequential part
        u = u0[:, :, n] + w[:, :, n] @ S
        states.append(S)
        us.append(u)
        S = carry[:, :, n] * S + b_out[:, :, n] @ u + k_out[:, :, n] @ v[:, :, n]
    S0, U = torch.stack(states, 2), torch.stack(us, 2)  # [B,H,N,K,V], [B,H,N,C,V]
    o = scale * ((q * c.exp()) @ S0 + A_qb @ U + A_qk @ v)
    o = o.reshape(B, H, N * C, V)[:, :, :T].transpose(1, 2).to(out_dtype)
    return o, (S if output_final_state else None)

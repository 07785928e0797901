"""The delta rule (DeltaNet): a linear-attention state corrected toward each new value.

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T        o_t = scale * q_t S_t

equivalently ``S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T``. Shapes: q, k ``[B, T, H, K]``
(keys l2-normalized by the caller, else the state can blow up), v ``[B, T, H, V]``, beta ``[B, T, H]``
in (0, 1), state ``[B, H, K, V]`` (fla's default layout). ``scale`` defaults to ``K ** -0.5`` as in fla.

Chunked path (the WY / UT transform of the DeltaNet paper, arXiv 2406.06484): inside a chunk of C
tokens starting from state S_0, the corrected values ``u_s = beta_s (v_s - S_{s-1}^T k_s)`` satisfy a
unit lower-triangular system ``(I + A) U = beta V - beta K S_0`` with
``A[s, j] = beta_s (k_s . k_j)`` for j < s. One triangular solve per chunk (all chunks at once) gives
``U0 = (I+A)^-1 beta V`` and ``W = (I+A)^-1 beta K``, so ``U = U0 - W S_0`` and the only loop left is
the cheap state hand-off between chunks. The gated variant (``gated_delta_rule``) shares this code:
it adds the decays ``exp(b_s - b_j)`` of the cumulative log-gate ``b`` inside the chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.nn import compute_dtype
from hlnas.model.kernels import backends, fla_calls, without_autocast
from hlnas.model.kernels.recompute import maybe_recompute

__all__ = ["delta_rule", "naive_delta_rule", "chunk_delta_rule_torch",
           # shared with gated_delta_rule (g=None: no decay)
           "check_delta_inputs", "naive_delta_recurrence", "chunked_delta_recurrence", "torch_chunk_size"]


def torch_chunk_size(x: Tensor) -> int:
    """Chunk length of the public ops' PyTorch path: 32 is the fastest on CPU (the C^2 terms shrink),
    64 on GPU (fewer sequential steps)."""
    return 64 if x.is_cuda else 32


# -- shared by delta_rule and gated_delta_rule ----------------------------------------------------
def check_delta_inputs(op: str, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None, initial_state: Tensor | None) -> None:
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"{op} expects q and k of one shape [B,T,H,K]; got q={tuple(q.shape)} k={tuple(k.shape)}")
    if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"{op} expects v [B,T,H,V] with q's B,T,H; got v={tuple(v.shape)} q={tuple(q.shape)}")
    for name, t in (("beta", beta), ("g", g)):
        if t is not None and t.shape != q.shape[:3]:
            raise ValueError(f"{op} expects {name} [B,T,H]={tuple(q.shape[:3])}; got {name}={tuple(t.shape)}")
    if initial_state is not None:
        B, _, H, K = q.shape
        want = (B, H, K, v.shape[-1])
        if tuple(initial_state.shape) != want:
            raise ValueError(f"{op} initial_state must be [B,H,K,V]={want}; got {tuple(initial_state.shape)}")


@without_autocast
def naive_delta_recurrence(q, k, v, beta, g, scale, initial_state, output_final_state):
    """Token loop of the (gated) delta rule; g=None means no decay."""
    out_dtype, dt = q.dtype, compute_dtype(q)
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    q, k, v = (x.to(dt).transpose(1, 2) for x in (q, k, v))  # [B,H,T,D]
    beta = beta.to(dt).transpose(1, 2)  # [B,H,T]
    g = None if g is None else g.to(dt).transpose(1, 2)
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.to(dt)
    out = []
    for t in range(T):
        if g is not None:
            S = S * g[:, :, t].exp()[..., None, None]
        kt = k[:, :, t]
        u = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhk,bhkv->bhv", kt, S))
        S = S + kt[..., :, None] * u[..., None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t] * scale, S))
    o = torch.stack(out, 2).transpose(1, 2).to(out_dtype)
    return o, (S if output_final_state else None)


@without_autocast
def chunked_delta_recurrence(q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size):
    """Chunked (gated) delta rule in PyTorch; autograd-differentiable. g=None means no decay."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out_dtype, dt = q.dtype, compute_dtype(q)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    C = max(1, min(chunk_size, T))  # T=1 (decode) solves a 1x1 system, not a padded 64-row one
    N = -(-T // C)
    pad = N * C - T
    # [B,T,H,D] -> [B,H,N,C,D], one copy each; zero-padded tail tokens have k=v=beta=g=0: they neither
    # read nor change the state
    q, k, v = (F.pad(x.to(dt).transpose(1, 2), (0, 0, 0, pad)).reshape(B, H, N, C, -1) for x in (q, k, v))
    beta = F.pad(beta.to(dt).transpose(1, 2), (0, pad)).reshape(B, H, N, C, 1)
    kb = k * beta
    kk = kb @ k.transpose(-1, -2)  # [B,H,N,C,C]: beta_s k_s . k_j
    qk = q @ k.transpose(-1, -2)  # scale is applied once, to the output
    if g is not None:
        b = F.pad(g.to(dt).transpose(1, 2), (0, pad)).reshape(B, H, N, C).cumsum(-1)  # cumulative log-decay
        incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        # exp of differences b_s - b_j <= 0 only (j <= s), masked to -inf above the diagonal: never overflows
        decay = (b[..., :, None] - b[..., None, :]).masked_fill(~incl, float("-inf")).exp()
        kk, qk = kk * decay, qk * decay  # qk is now causal too
        eb = b.exp()[..., None]
        kb_rhs, q_in = kb * eb, q * eb  # the chunk-start state reaches token s decayed by exp(b_s)
        k_out = k * (b[..., -1:] - b).exp()[..., None]  # token s reaches the chunk end decayed by exp(b_C - b_s)
        carry = b[..., -1].exp().reshape(B * H, N, 1, 1)
    else:
        qk = qk.tril()
        kb_rhs, q_in, k_out, carry = kb, q, k, None
    # T = (I + A)^-1 for the unit lower-triangular I + A (unitriangular=True reads only A's strict lower
    # part); one solve against I, then matmuls, is cheaper on CPU than solving for V + K columns
    eye = torch.eye(C, dtype=dt, device=q.device).expand(B, H, N, C, C)
    Tinv = torch.linalg.solve_triangular(kk.tril(-1), eye, upper=False, unitriangular=True)
    BH = B * H
    u0 = (Tinv @ (v * beta)).reshape(BH, N, C, V)
    w = (Tinv @ kb_rhs).reshape(BH, N, C, K)
    kt = k_out.transpose(-1, -2).reshape(BH, N, K, C)
    # the only sequential part: per chunk, u = u0 - w S and S <- carry S + k_out^T u
    S = q.new_zeros(BH, K, V) if initial_state is None else initial_state.to(dt).reshape(BH, K, V)
    states, us = [], []
    for n in range(N):
        u = torch.baddbmm(u0[:, n], w[:, n], S, alpha=-1)
        states.append(S)
        us.append(u)
        S = torch.baddbmm(S if carry is None else S * carry[:, n], kt[:, n], u)
    S0 = torch.stack(states, 1).view(B * H * N, K, V)  # the state entering each chunk
    U = torch.stack(us, 1).view(B * H * N, C, V)
    o = torch.baddbmm(q_in.reshape(-1, C, K) @ S0, qk.reshape(-1, C, C), U, beta=scale, alpha=scale)
    o = o.view(B, H, N * C, V)[:, :, :T].transpose(1, 2).to(out_dtype)
    S = S.view(B, H, K, V)
    return o, (S if output_final_state else None)


# -- delta_rule ---------------------------------------------------------------------------------
def naive_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, scale: float | None = None,
                     initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference in float32 (float64 stays float64).

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    check_delta_inputs("delta_rule", q, k, v, beta, None, initial_state)
    return naive_delta_recurrence(q, k, v, beta, None, scale, initial_state, output_final_state)


def chunk_delta_rule_torch(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, scale: float | None = None,
                           initial_state: Tensor | None = None, output_final_state: bool = False,
                           chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """Chunked delta rule in PyTorch (one triangular solve per chunk, a loop over chunks only).

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    check_delta_inputs("delta_rule", q, k, v, beta, None, initial_state)
    return chunked_delta_recurrence(q, k, v, beta, None, scale, initial_state, output_final_state, chunk_size)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, scale: float | None = None,
               initial_state: Tensor | None = None, output_final_state: bool = False,
               backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """The delta rule -> (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32 or None).

    q, k ``[B,T,H,K]`` (k l2-normalized), v ``[B,T,H,V]``, beta ``[B,T,H]``, initial_state ``[B,H,K,V]``.
    ``backend``: "fla" | "torch" | "auto" (see :func:`hlnas.model.kernels.resolve_backend`).
    """
    check_delta_inputs("delta_rule", q, k, v, beta, None, initial_state)
    # float64 (tests) always runs the PyTorch path: backends.RULES["delta_rule"]
    if backends.route("delta_rule", backend, q=q, k=k, v=v, beta=beta, initial_state=initial_state) == "fla":
        return fla_calls.fla_delta_rule(q, k, v, beta, scale=scale, initial_state=initial_state,
                                       output_final_state=output_final_state)
    # large inputs keep only themselves for backward and recompute the rest there (hlnas.model.kernels.recompute)
    C = torch_chunk_size(q)
    return maybe_recompute(chunked_delta_recurrence, q, k, v, beta, None, scale, initial_state, output_final_state, C,
                           qv=(q, v), chunk_size=C)

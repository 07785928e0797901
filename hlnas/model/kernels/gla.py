"""Gated linear attention (GLA): a linear-attention recurrence with a per-key-channel decay.

    S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t        o_t = scale * q_t S_t

Shapes: q, k, g ``[B, T, H, K]`` (g is the log-space forget gate, ``g <= 0``), v ``[B, T, H, V]``,
state ``[B, H, K, V]`` (fla's default ``state_v_first=False`` layout). ``scale`` defaults to
``K ** -0.5`` as in fla. Used by the GLA and HGRN-2 mixers (HGRN-2: q=swish(q), k=1-f, v=i, g=log f).

Numerics of the chunked path: a decay exp(b_i - b_j) between rows j <= i (b the cumulative log-gate)
is only ever factored through a reference row r as exp(b_i - b_r) * exp(b_r - b_j) when no factor can
overflow: across chunks and sub-blocks r lies between j and i (both factors <= 1); inside a block
r is its first row and the block's total decay must stay below ``_FAST_MAX_DECAY`` (exp(40) in
float32), else the block is split and, at 4 rows, takes the exact pairwise exp(b_i - b_j). So no inf
or nan appears however strong the decay (fla's kernels likewise use a reference row per sub-chunk).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.nn import compute_dtype
from hlnas.model.kernels import backends, fla_calls, without_autocast

__all__ = ["gla", "naive_gla", "chunk_gla_torch"]


def _check(q: Tensor, k: Tensor, v: Tensor, g: Tensor, initial_state: Tensor | None) -> None:
    if q.ndim != 4 or k.shape != q.shape or g.shape != q.shape:
        raise ValueError(
            f"gla expects q, k, g of one shape [B,T,H,K]; got q={tuple(q.shape)} k={tuple(k.shape)} g={tuple(g.shape)}"
        )
    if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"gla expects v [B,T,H,V] with q's B,T,H; got v={tuple(v.shape)} q={tuple(q.shape)}")
    if initial_state is not None:
        B, _, H, K = q.shape
        want = (B, H, K, v.shape[-1])
        if tuple(initial_state.shape) != want:
            raise ValueError(f"gla initial_state must be [B,H,K,V]={want}; got {tuple(initial_state.shape)}")


@without_autocast
def naive_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float | None = None,
              initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference -> (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` or None)."""
    _check(q, k, v, g, initial_state)
    out_dtype, dt = q.dtype, compute_dtype(q)
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    q, k, v, g = (x.to(dt).transpose(1, 2) for x in (q, k, v, g))  # [B,H,T,D]
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.to(dt)
    out = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None] + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t] * scale, S))
    return torch.stack(out, 2).transpose(1, 2).to(out_dtype), (S if output_final_state else None)


#: Largest within-block log-decay (max over channels) for which a block uses one reference row:
#: exp(+-thr) then stays far inside the float range (float32 overflows at exp(88.7), float64 at exp(709)).
_FAST_MAX_DECAY = {torch.float32: 40.0, torch.float64: 400.0}
#: chunk_gla_torch halves its chunk (down to 16 rows) while more than this share of chunks is strong.
_MAX_STRONG_FRACTION = 0.125


def _scores(q: Tensor, k: Tensor, b: Tensor, thr: float) -> Tensor:
    """Intra-block scores ``A[m,i,j] = sum_K q_i k_j exp(b_i - b_j)`` for j <= i, else 0.

    q, k, b: ``[M, C, K]``, b the cumulative log-gate from the block start (<= 0, non-increasing);
    returns ``[M, C, C]``. A block whose total decay is <= ``thr`` uses its start as the one reference,
    (q e^b)(k e^-b)^T: one matmul, both factors within exp(+-thr). Stronger blocks go to ``_split``;
    blocks of <= 4 rows take the exact pairwise decay. So no exp() sees a large positive argument.
    """
    M, C, _ = q.shape
    strong = (-b[:, -1]).amax(-1) > thr  # [M]

    def fast(q: Tensor, k: Tensor, b: Tensor) -> Tensor:
        return ((q * b.exp()) @ (k * (-b).exp()).transpose(-1, -2)).tril_()

    if not strong.any():
        return fast(q, k, b)
    if not strong.all():
        A = q.new_zeros(M, C, C).index_put((~strong,), fast(q[~strong], k[~strong], b[~strong]))
        q, k, b = q[strong], k[strong], b[strong]
    if C <= 4:  # exact; the upper triangle is clamped to exp(0) and masked (no inf * 0 = nan)
        tri = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        decay = (b[:, :, None] - b[:, None, :]).clamp(max=0).exp() * tri[..., None]
        hard = torch.einsum("mik,mjk,mijk->mij", q, k, decay)
    else:
        hard = _split(q, k, b, thr)
    return hard if strong.all() else A.index_put((strong,), hard)


def _split(q: Tensor, k: Tensor, b: Tensor, thr: float) -> Tensor:
    """``_scores`` of strongly decaying blocks, by sub-blocks of c rows (16, or 4 for blocks of <= 16).

    Diagonal sub-blocks recurse with b re-referenced to their own start. For sub-blocks I > J the decay
    is split at the last row r of J, exp(b_i - b_r) * exp(b_r - b_j), both factors <= 1, one small
    matmul per pair (scores, not states: a K x V state per 4-row sub-block would cost far more).
    """
    M, C, K = q.shape
    c = 16 if C % 16 == 0 and C > 16 else 4
    n = C // c
    qs, ks, bs = (x.reshape(M, n, c, K) for x in (q, k, b))
    b_end = bs[:, :, -1:]  # [M,n,1,K]
    b_start = torch.cat([torch.zeros_like(b_end[:, :1]), b_end[:, :-1]], 1)  # decay before each sub-block
    A_diag = _scores(qs.reshape(M * n, c, K), ks.reshape(M * n, c, K), (bs - b_start).reshape(M * n, c, K), thr)
    I, J = torch.tril_indices(n, n, -1, device=q.device)  # sub-block pairs I > J
    q_ref = qs[:, I] * (bs[:, I] - b_end[:, J]).exp()  # [M,P,c,K]
    k_ref = ks[:, J] * (b_end[:, J] - bs[:, J]).exp()
    d = torch.arange(n, device=q.device)
    A = q.new_zeros(n, n, M, c, c)  # sub-block (I, J) first so index_put places whole blocks
    A = A.index_put((I, J), (q_ref @ k_ref.transpose(-1, -2)).transpose(0, 1))
    A = A.index_put((d, d), A_diag.reshape(M, n, c, c).transpose(0, 1))
    return A.permute(2, 0, 3, 1, 4).reshape(M, C, C)


@without_autocast
def chunk_gla_torch(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float | None = None,
                    initial_state: Tensor | None = None, output_final_state: bool = False,
                    chunk_size: int = 64, max_fast_decay: float | None = None) -> tuple[Tensor, Tensor | None]:
    """Chunked GLA in PyTorch (autograd-differentiable): matmuls inside chunks, a loop over chunks only.

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    ``chunk_size`` must be a multiple of 4; inputs shorter than a chunk use one chunk of T rounded up
    to 4. Blocks whose log-decay exceeds ``max_fast_decay`` (default by dtype, ``_FAST_MAX_DECAY``) are
    split into overflow-free sub-blocks (see ``_scores``), and the chunk is halved (to >= 16 rows) while
    many chunks are that strong; tests pass 0 or inf to force either form.
    """
    _check(q, k, v, g, initial_state)
    if chunk_size < 4 or chunk_size % 4:
        raise ValueError(f"chunk_size={chunk_size} must be a positive multiple of 4")
    out_dtype, dt = q.dtype, compute_dtype(q)
    thr = _FAST_MAX_DECAY[dt] if max_fast_decay is None else max_fast_decay
    B, T, H, K = q.shape
    V, M = v.shape[-1], B * H
    scale = K**-0.5 if scale is None else scale
    C = min(chunk_size, -(-T // 4) * 4)  # T=1 (decode) runs one 4-row block, not a padded 64-row chunk
    L = T + (-T % C)

    def rows(x: Tensor) -> Tensor:  # [B,T,H,D] -> [B*H,L,D]; zero padding: g=0 keeps, k=0 adds nothing
        x = x.to(dt).transpose(1, 2)
        return (F.pad(x, (0, 0, 0, L - T)) if L > T else x).reshape(M, L, x.shape[-1])

    q, k, v, g = rows(q) * scale, rows(k), rows(v), rows(g)
    while C >= 32 and C % 8 == 0:  # strong decays would send most chunks down the slower split path
        strong = (-g.reshape(M, -1, C, K).sum(-2)).amax(-1) > thr
        if strong.float().mean().item() <= _MAX_STRONG_FRACTION:
            break
        C //= 2
    N = L // C
    q, k, v, g = (x.reshape(M, N, C, x.shape[-1]) for x in (q, k, v, g))
    b = g.cumsum(-2)  # log-decay from the chunk start through each row, <= 0
    b_tot = b[:, :, -1:]  # [M,N,1,K]
    qe = q * b.exp()  # q_i exp(b_i - b_start): reads the state at the chunk start
    if ((-b_tot).amax(-1) <= thr).all():  # the common case, with fewer passes over memory
        ke = k * (-b).exp()  # <= exp(thr)
        o = (qe @ ke.transpose(-1, -2)).tril_() @ v
        ke = ke * b_tot.exp()  # k_j exp(b_end - b_j)
    else:
        A = _scores(q.reshape(M * N, C, K), k.reshape(M * N, C, K), b.reshape(M * N, C, K), thr)
        o = A.reshape(M, N, C, C) @ v
        ke = k * (b_tot - b).exp()
    U = ke.transpose(-1, -2) @ v  # [M,N,K,V]: each chunk's additions to the state, at its end

    # inter-chunk: carry the state; every exp() above and here has an argument <= 0, or <= thr
    decay = b_tot.exp().transpose(-1, -2)  # [M,N,K,1]
    S = q.new_zeros(M, K, V) if initial_state is None else initial_state.to(dt).reshape(M, K, V)
    starts = []
    for i in range(N):
        starts.append(S)
        S = torch.addcmul(U[:, i], decay[:, i], S)
    o = torch.baddbmm(o.reshape(M * N, C, V), qe.reshape(M * N, C, K),
                      torch.stack(starts, 1).reshape(M * N, K, V))
    o = o.reshape(B, H, L, V)[:, :, :T].transpose(1, 2)
    return o.to(out_dtype), (S.reshape(B, H, K, V) if output_final_state else None)


def gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float | None = None,
        initial_state: Tensor | None = None, output_final_state: bool = False,
        backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """GLA -> (o ``[B,T,H,V]``, final state ``[B,H,K,V]`` float32 or None). See the module docstring.

    fla path: :func:`hlnas.model.kernels.fla_calls.fla_gla`.
    """
    _check(q, k, v, g, initial_state)
    if backends.route("gla", backend, q=q, k=k, v=v, g=g, initial_state=initial_state) == "fla":
        return fla_calls.fla_gla(q, k, v, g, scale=scale, initial_state=initial_state, output_final_state=output_final_state)
    return chunk_gla_torch(q, k, v, g, scale=scale, initial_state=initial_state, output_final_state=output_final_state)

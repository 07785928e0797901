"""The gated delta rule (Gated DeltaNet, arXiv 2412.06464): the delta rule with a scalar decay per head.

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T        o_t = scale * q_t S_t

fla's order (``fla.ops.gated_delta_rule.naive``): decay first, ``S' = exp(g_t) S_{t-1}``, then the
delta update ``S_t = S' + beta_t k_t (v_t - S'^T k_t)^T``; the two orders are the same map since the
decay is a scalar. Shapes: q, k ``[B, T, H, K]`` (keys l2-normalized by the caller), v ``[B, T, H, V]``,
g ``[B, T, H]`` (natural-log decay, ``g <= 0``), beta ``[B, T, H]`` in (0, 1), state ``[B, H, K, V]``
(fla's default ``state_v_first=False``). ``scale`` defaults to ``K ** -0.5`` as in fla.
The PyTorch paths are those of :mod:`hlnas.model.kernels.delta_rule` with the decay switched on.

fla on Hopper: fla 0.6's gated backward (``chunk_bwd_dqkwg``) raises RuntimeError with
3.4.0 <= triton < 3.7.1 unless its TileLang backend can run (fla issue #640). When a gradient is
needed there, this op runs the PyTorch path instead and says so once (remedy: ``pip install tilelang``);
forward-only calls still use fla, whose forward is unaffected. The check is
:func:`hlnas.model.kernels.backends.fla_gated_backward_ok`, its rule ``backends.RULES["gated_delta_rule"]``.
"""

from __future__ import annotations

from torch import Tensor

from hlnas.model.kernels import backends, fla_calls
from hlnas.model.kernels.recompute import maybe_recompute
from hlnas.model.kernels.delta_rule import check_delta_inputs, chunked_delta_recurrence, naive_delta_recurrence, torch_chunk_size

__all__ = ["gated_delta_rule", "naive_gated_delta_rule", "chunk_gated_delta_rule_torch"]


def naive_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                           initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference in float32 (float64 stays float64).

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    check_delta_inputs("gated_delta_rule", q, k, v, beta, g, initial_state)
    return naive_delta_recurrence(q, k, v, beta, g, scale, initial_state, output_final_state)


def chunk_gated_delta_rule_torch(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                                 initial_state: Tensor | None = None, output_final_state: bool = False,
                                 chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """Chunked gated delta rule in PyTorch (one triangular solve per chunk, a loop over chunks only).

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    check_delta_inputs("gated_delta_rule", q, k, v, beta, g, initial_state)
    return chunked_delta_recurrence(q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size)


def gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                     initial_state: Tensor | None = None, output_final_state: bool = False,
                     backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """The gated delta rule -> (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32 or None).

    q, k ``[B,T,H,K]`` (k l2-normalized), v ``[B,T,H,V]``, g and beta ``[B,T,H]``,
    initial_state ``[B,H,K,V]``. ``backend``: "fla" | "torch" | "auto" (:func:`hlnas.model.kernels.resolve_backend`).
    """
    check_delta_inputs("gated_delta_rule", q, k, v, beta, g, initial_state)
    # float64 (tests), or a gradient where fla's gated backward fails (#640): the PyTorch path
    if backends.route("gated_delta_rule", backend, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state) == "fla":
        return fla_calls.fla_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                             output_final_state=output_final_state)
    # large inputs keep only themselves for backward and recompute the rest there (hlnas.model.kernels.recompute)
    C = torch_chunk_size(q)
    return maybe_recompute(chunked_delta_recurrence, q, k, v, beta, g, scale, initial_state, output_final_state, C,
                           qv=(q, v), chunk_size=C)

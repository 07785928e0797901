"""RWKV-7's state update (RWKV-7 "Goose", arXiv 2503.14456, section 4): the generalized delta rule.

    S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T        o_t = scale * r_t^T S_t

In the paper's terms the transition is ``diag(w_t) - kappa_t (alpha_t kappa_t)^T``: the mixer passes
``a = -kappa`` and ``b = kappa * alpha`` (the normalized removal key and the in-context learning rate), fla's
``chunk_rwkv7`` convention. Shapes: r, w, k, a, b ``[B, T, H, K]`` (w the natural-log decay per key channel, in
``[-exp(-0.5), 0]`` in the mixer), v ``[B, T, H, V]``, state ``[B, H, K, V]`` float32. ``scale`` is 1 by default, as
RWKV-7 reads the state unscaled.

The PyTorch paths are :mod:`hlnas.model.kernels.dplr`'s: ``naive_rwkv7`` its token loop, ``chunk_rwkv7_torch`` the
chunked form.
"""

from __future__ import annotations

from torch import Tensor

from hlnas.model.kernels import backends, fla_calls
from hlnas.model.kernels.dplr import DPLR_CHUNK, check_dplr_inputs, chunked_dplr_recurrence, naive_dplr_recurrence

__all__ = ["rwkv7", "naive_rwkv7", "chunk_rwkv7_torch"]


def _check(r, w, k, v, a, b, initial_state) -> None:
    check_dplr_inputs("rwkv7", {"r": r, "w": w, "k": k, "a": a, "b": b}, v, {}, initial_state)


def naive_rwkv7(r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, *, scale: float = 1.0,
                initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference in float32 (float64 stays float64).
    Returns (o ``[B,T,H,V]`` in r's dtype, final state ``[B,H,K,V]`` or None)."""
    _check(r, w, k, v, a, b, initial_state)
    return naive_dplr_recurrence(r, k, v, a, b, w, scale, initial_state, output_final_state)


def chunk_rwkv7_torch(r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, *, scale: float = 1.0,
                      initial_state: Tensor | None = None, output_final_state: bool = False,
                      chunk_size: int = DPLR_CHUNK) -> tuple[Tensor, Tensor | None]:
    """Chunked RWKV-7 recurrence in PyTorch. Returns (o ``[B,T,H,V]`` in r's dtype, final state or None)."""
    _check(r, w, k, v, a, b, initial_state)
    return chunked_dplr_recurrence(r, k, v, a, b, w, scale, initial_state, output_final_state, chunk_size)


def rwkv7(r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, *, scale: float = 1.0,
          initial_state: Tensor | None = None, output_final_state: bool = False,
          backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """RWKV-7's recurrence -> (o ``[B,T,H,V]`` in r's dtype, final state ``[B,H,K,V]`` float32 or None).

    ``backend``: "fla" | "torch" | "auto" (:func:`hlnas.model.kernels.resolve_backend`).
    """
    _check(r, w, k, v, a, b, initial_state)
    if backends.route("rwkv7", backend, r=r, w=w, k=k, v=v, a=a, b=b, initial_state=initial_state) == "fla":
        return fla_calls.fla_rwkv7(r, w, k, v, a, b, scale=scale, initial_state=initial_state,
                                  output_final_state=output_final_state)
    return chunk_rwkv7_torch(r, w, k, v, a, b, scale=scale, initial_state=initial_state,
                             output_final_state=output_final_state)

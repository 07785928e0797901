"""The gated delta rule (Gated DeltaNet, arXiv 2412.06464): the delta rule with a scalar decay per head.

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T        o_t = scale * q_t S_t

fla's order (``fla.ops.gated_delta_rule.naive``): decay first, ``S' = exp(g_t) S_{t-1}``, then the
delta update ``S_t = S' + beta_t k_t (v_t - S'^T k_t)^T``; the two orders are the same map since the
decay is a scalar. Shapes: q, k ``[B, T, H, K]`` (keys l2-normalized by the caller), v ``[B, T, H, V]``,
g ``[B, T, H]`` (natural-log decay, ``g <= 0``), beta ``[B, T, H]`` in (0, 1), state ``[B, H, K, V]``
(fla's default ``state_v_first=False``). ``scale`` defaults to ``K ** -0.5`` as in fla.
The PyTorch paths are those of :mod:`hlnas.kernels.delta_rule` with the decay switched on.

fla on Hopper: fla 0.6's gated backward (``chunk_bwd_dqkwg``) raises RuntimeError with
3.4.0 <= triton < 3.7.1 unless its TileLang backend can run (fla issue #640). When a gradient is
needed there, this op runs the PyTorch path instead and says so once (remedy: ``pip install tilelang``);
forward-only calls still use fla, whose forward is unaffected.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re

import torch
from torch import Tensor

from hlnas.kernels import resolve_backend, warn_once
from hlnas.kernels.delta_rule import _FLA_RECURRENT_MAX_T, _check, _chunked, _naive, _needs_grad, _torch_chunk

__all__ = ["gated_delta_rule", "naive_gated_delta_rule", "chunk_gated_delta_rule_torch"]



def naive_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                           initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference in float32 (float64 stays float64).

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    _check("gated_delta_rule", q, k, v, beta, g, initial_state)
    return _naive(q, k, v, beta, g, scale, initial_state, output_final_state)


def chunk_gated_delta_rule_torch(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                                 initial_state: Tensor | None = None, output_final_state: bool = False,
                                 chunk_size: int = 64) -> tuple[Tensor, Tensor | None]:
    """Chunked gated delta rule in PyTorch (one triangular solve per chunk, a loop over chunks only).

    Returns (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32/float64 or None).
    """
    _check("gated_delta_rule", q, k, v, beta, g, initial_state)
    return _chunked(q, k, v, beta, g, scale, initial_state, output_final_state, chunk_size)


def gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                     initial_state: Tensor | None = None, output_final_state: bool = False,
                     backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """The gated delta rule -> (o ``[B,T,H,V]`` in q's dtype, final state ``[B,H,K,V]`` float32 or None).

    q, k ``[B,T,H,K]`` (k l2-normalized), v ``[B,T,H,V]``, g and beta ``[B,T,H]``,
    initial_state ``[B,H,K,V]``. ``backend``: "fla" | "torch" | "auto" (:func:`hlnas.kernels.resolve_backend`).
    """
    _check("gated_delta_rule", q, k, v, beta, g, initial_state)
    # fla's Triton kernels take 16/32-bit floats; float64 (tests) always runs the PyTorch path
    if resolve_backend("gated_delta_rule", q, backend) == "fla" and q.dtype != torch.float64:
        needs_grad = _needs_grad(q, k, v, g, beta, initial_state)
        if needs_grad:
            ok, reason = _fla_gated_backward_ok()
            if not ok:
                warn_once(f"gated_delta_rule: using the PyTorch kernel (forward and backward) instead of fla: {reason}")
                return _chunked(q, k, v, beta, g, scale, initial_state, output_final_state, _torch_chunk(q))
        return _fla_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state, needs_grad)
    return _chunked(q, k, v, beta, g, scale, initial_state, output_final_state, _torch_chunk(q))


def _fla_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state, needs_grad):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    dtype = q.dtype
    kw = dict(
        g=g.float(),  # log-space decay; fla's own layer hands it float32 (its in-kernel gate makes it so)
        beta=beta.to(dtype),
        scale=scale,
        initial_state=None if initial_state is None else initial_state.float(),  # fla keeps states in float32
        output_final_state=output_final_state,
    )
    # the fused recurrent kernel has no backward (it raises): only for grad-free short calls, as fla's layer
    if not needs_grad and q.shape[1] <= _FLA_RECURRENT_MAX_T:
        o, s = fused_recurrent_gated_delta_rule(q, k.to(dtype), v.to(dtype), **kw)
    else:
        o, s = chunk_gated_delta_rule(q, k.to(dtype), v.to(dtype), **kw)
    return o.to(dtype), s


# -- can fla's gated backward run here? ------------------------------------------------------------
def _gated_backward_verdict(capability: tuple[int, int] | None, triton_version: str | None,
                            tilelang: tuple[bool, str]) -> tuple[bool, str]:
    """(ok, reason) from the facts alone: fla 0.6 refuses the gated chunk_bwd_dqkwg on Hopper (sm 9.x)
    with 3.4.0 <= triton < 3.7.1 (fla/ops/common/chunk_o.py, issue #640) unless TileLang takes it over."""
    if capability is None or capability[0] != 9:
        return True, f"not a Hopper GPU (capability {capability})"
    tv = _version_tuple(triton_version)
    if tv is None or not ((3, 4, 0) <= tv < (3, 7, 1)):
        return True, f"triton {triton_version} is outside the affected range [3.4.0, 3.7.1)"
    usable, why = tilelang
    if usable:
        return True, f"fla's TileLang backend handles the gated backward ({why})"
    return False, (
        f"fla's gated-delta-rule backward raises on Hopper (sm {capability[0]}{capability[1]}) with triton "
        f"{triton_version} (fla issue #640) and its TileLang backend is unavailable: {why}. "
        "Remedy: `pip install tilelang` (needs nvcc), or triton >= 3.7.1"
    )


def _fla_gated_backward_ok() -> tuple[bool, str]:
    """Probe this process (CUDA capability, triton version, TileLang) and return the verdict."""
    return _gated_backward_verdict(_cuda_capability(), _triton_version(), _tilelang_usable())


def _version_tuple(version: str | None) -> tuple[int, int, int] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return None if m is None else (int(m[1]), int(m[2]), int(m[3] or 0))


def _cuda_capability() -> tuple[int, int] | None:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:
        return None
    return triton.__version__


@functools.cache
def _tilelang_usable() -> tuple[bool, str]:
    """Whether fla would route the gated backward to TileLang: the same checks as fla's dispatch."""
    if importlib.util.find_spec("tilelang") is None:
        return False, "the tilelang package is not installed"
    if os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        return False, "FLA_DISABLE_BACKEND_DISPATCH=1 turns fla's backends off"
    try:
        from fla.ops.common.backends.tilelang import CommonTileLangBackend
    except Exception as e:
        return False, f"fla's TileLang backend cannot be imported: {type(e).__name__}: {e}"
    if not CommonTileLangBackend.is_available():
        return False, "tilelang is installed but fla finds no usable nvcc (set CUDA_HOME)"
    if not CommonTileLangBackend().is_enabled():
        return False, "fla's TileLang backend is disabled (FLA_TILELANG=0)"
    return True, "tilelang installed and enabled"

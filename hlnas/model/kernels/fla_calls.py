"""The calls into flash-linear-attention (fla), arguments adapted: each op's fla path, called by the op module once
:func:`hlnas.model.kernels.backends.route` chose fla. fla's ops are imported here, on first call, so nothing imports
fla (and Triton) before a GPU op runs."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from hlnas.model.kernels.backends import needs_grad

__all__ = ["FLA_RECURRENT_MAX_T", "fla_hgrn", "fla_gla", "fla_simple_gla", "fla_delta_rule", "fla_gated_delta_rule",
           "fla_kda", "fla_rwkv7", "fla_l2norm", "fla_causal_conv1d"]


#: fla's layers switch to the fused recurrent kernel at or below this length (decode, short prompts).
FLA_RECURRENT_MAX_T = 64


def _contiguous_inputs(fn):
    """fla's kernels are called with dense inputs: their Triton pointers assume them (fla's own ``input_guard`` is not
    on every op), and hlnas's projections may hand over split views (hlnas.model.nn.fused_linear). A no-op on dense ones."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        dense = lambda a: a.contiguous() if isinstance(a, Tensor) else a  # noqa: E731
        return fn(*map(dense, args), **{k: dense(v) for k, v in kwargs.items()})

    return call


@_contiguous_inputs
def fla_hgrn(x: Tensor, g: Tensor, *, initial_state: Tensor | None = None,
             output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    from fla.ops.hgrn import chunk_hgrn, fused_recurrent_hgrn

    h0 = None if initial_state is None else initial_state.float()
    short = x.shape[1] <= FLA_RECURRENT_MAX_T and not torch.is_grad_enabled()
    # fla's chunk_hgrn backward gives no gradient for initial_state and ignores the final state's
    # gradient dht (fla/ops/hgrn/chunk.py: backward(ctx, do, dht) never reads dht; dx came out
    # off by 5e-2): whenever either can carry a gradient, take the fused recurrent kernel, which has both
    state_grad = output_final_state and torch.is_grad_enabled() and (x.requires_grad or g.requires_grad)
    if short or state_grad or (h0 is not None and h0.requires_grad):
        # fused_recurrent keeps its state in x's dtype: run it in float32 so a decode state stays float32.
        o, ht = fused_recurrent_hgrn(x.float(), g.float(), initial_state=h0, output_final_state=output_final_state)
        return o.to(x.dtype), ht
    # chunk_hgrn accumulates in float32 and returns a float32 final state
    return chunk_hgrn(x, g, initial_state=h0, output_final_state=output_final_state)


@_contiguous_inputs
def fla_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float | None = None,
            initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """``fused_recurrent_gla`` for T <= 64 (as fla's layers do), else ``chunk_gla``; both take g in log
    space and a float32 ``[B,H,K,V]`` state."""
    from fla.ops.gla import chunk_gla, fused_recurrent_gla

    h0 = None if initial_state is None else initial_state.float()  # fla asserts a float32 state
    if q.shape[1] <= FLA_RECURRENT_MAX_T:
        return fused_recurrent_gla(q, k, v, gk=g, scale=scale, initial_state=h0, output_final_state=output_final_state)
    return chunk_gla(q, k, v, g, scale=scale, initial_state=h0, output_final_state=output_final_state)


@_contiguous_inputs
def fla_simple_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None = None, *, g_gamma: Tensor | None = None,
                   scale: float | None = None, initial_state: Tensor | None = None,
                   output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    from fla.ops.simple_gla import chunk_simple_gla, fused_recurrent_simple_gla

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if g_gamma is not None and g_gamma.requires_grad and torch.is_grad_enabled():
        # fla's kernels return no gradient for g_gamma; as a [B,T,H] g it gets one
        g, g_gamma = g_gamma.float().expand(q.shape[:3]).contiguous(), None
    g = None if g is None else g.float()
    g_gamma = None if g_gamma is None else g_gamma.float()
    k, v = k.to(q.dtype), v.to(q.dtype)  # fla's kernels expect one dtype for q, k, v
    h0 = None if initial_state is None else initial_state.float()
    # fla's layers decode with the recurrent kernel; launching the chunk kernel for a few tokens is slower
    short = q.shape[1] <= FLA_RECURRENT_MAX_T and not torch.is_grad_enabled()
    fn = fused_recurrent_simple_gla if short else chunk_simple_gla
    return fn(q, k, v, g=g, g_gamma=g_gamma, scale=scale, initial_state=h0, output_final_state=output_final_state)


@_contiguous_inputs
def fla_delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, scale: float | None = None,
                   initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    from fla.ops.delta_rule import chunk_delta_rule, fused_recurrent_delta_rule

    dtype = q.dtype
    k, v = k.to(dtype), v.to(dtype)
    h0 = None if initial_state is None else initial_state.float()  # fla keeps states in float32
    kw = dict(scale=scale, initial_state=h0, output_final_state=output_final_state)
    # chunk_delta_rule asserts q.dtype != float32; the fused recurrent kernel takes float32 and has a
    # backward, and is what fla's layer uses for short inputs anyway
    if dtype == torch.float32 or q.shape[1] <= FLA_RECURRENT_MAX_T:
        o, s = fused_recurrent_delta_rule(q, k, v, beta.to(dtype), **kw)
    else:
        o, s = chunk_delta_rule(q, k, v, beta.to(dtype), **kw)
    return o.to(dtype), s


@_contiguous_inputs
def fla_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
                         initial_state: Tensor | None = None,
                         output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
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
    if not needs_grad(q, k, v, g, beta, initial_state) and q.shape[1] <= FLA_RECURRENT_MAX_T:
        o, s = fused_recurrent_gated_delta_rule(q, k.to(dtype), v.to(dtype), **kw)
    else:
        o, s = chunk_gated_delta_rule(q, k.to(dtype), v.to(dtype), **kw)
    return o.to(dtype), s


@_contiguous_inputs
def fla_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float | None = None,
            initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """fla's KDA on the mixer's decays and beta (no gate, l2norm or sigmoid in the kernel), float32 states; fused
    recurrent for grad-free calls of T <= 64 (as fla's layer decodes), else chunked."""
    from fla.ops.kda import chunk_kda, fused_recurrent_kda

    h0 = None if initial_state is None else initial_state.float()
    short = not needs_grad(q, k, v, g, beta, initial_state) and q.shape[1] <= FLA_RECURRENT_MAX_T
    o, s = (fused_recurrent_kda if short else chunk_kda)(q, k.to(q.dtype), v.to(q.dtype), g=g.float(), beta=beta.to(q.dtype),
                                                         scale=scale, initial_state=h0, output_final_state=output_final_state)
    return o.to(q.dtype), s


@_contiguous_inputs
def fla_rwkv7(r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, *, scale: float = 1.0,
              initial_state: Tensor | None = None, output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """fla's RWKV-7 (DPLR kernels), as :func:`fla_kda` picks; inputs in r's dtype (fla warns on float32), state float32."""
    from fla.ops.rwkv7 import chunk_rwkv7, fused_recurrent_rwkv7

    h0 = None if initial_state is None else initial_state.float()
    short = not needs_grad(r, w, k, v, a, b, initial_state) and r.shape[1] <= FLA_RECURRENT_MAX_T
    o, s = (fused_recurrent_rwkv7 if short else chunk_rwkv7)(r, *(t.to(r.dtype) for t in (w, k, v, a, b)), scale=scale,
                                                             initial_state=h0, output_final_state=output_final_state)
    return o.to(r.dtype), s


def fla_l2norm(x: Tensor, eps: float) -> Tensor:
    """fla's Triton l2norm (one kernel forward, one backward; it saves the output and a float32 rstd): x ``[..., D]``
    -> y in x's dtype."""
    from fla.modules.norm.l2norm import l2norm

    return l2norm(x, eps)


def fla_causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None) -> Tensor:
    """fla's Triton causal conv (forward and backward kernels, the activation fused): x ``[B, T, C]`` (strided views
    such as one third of a fused q/k/v projection are read in place), weight ``[C, 1, K]`` -> y ``[B, T, C]``."""
    from fla.modules.causal_conv1d import causal_conv1d

    y, _ = causal_conv1d(x, weight[:, 0, :], bias, activation=activation, backend="triton")
    return y



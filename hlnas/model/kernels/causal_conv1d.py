"""Causal depthwise convolution over time (fla ``fla.modules.causal_conv1d``): the short convolutions before the
linear mixers' projections, Mamba-2's conv1d and attention's input conv (:class:`hlnas.model.mixers.short_conv.ShortConvolution`).

    y[:, t, c] = act(b[c] + sum_k w[c, 0, k] * x[:, t - K + 1 + k, c])

Shapes: x ``[B, T, C]``, weight ``[C, 1, K]`` (an ``nn.Conv1d``'s depthwise weight), bias ``[C]`` or None, act
``silu`` or none. The inputs before the first token are ``initial_state`` (the last ``K - 1`` inputs of the previous
call, ``[B, K - 1, C]``, the decode cache) or zeros; ``output_final_state`` returns the last ``K - 1`` inputs of this
call in the same form.

Paths: :func:`naive_causal_conv1d` (a loop over time, the reference); :func:`causal_conv1d_torch` (one depthwise
``conv1d``; on a CPU in float32/64 the same sum as shifted multiply-adds in one autograd node); fla's Triton kernel
for CUDA calls with no state in or out, outside ``torch.compile``. The PyTorch path on CUDA pays for a ``torch.cat``
of the zero past, two transposes and a non-contiguous output that every elementwise op after it reads strided: in
the paper-340m GatedDeltaNet 3:1 step the convolutions and their cat took 54 ms of 552 (profiled on a GPU); fla's
kernel made that step 1.26x faster. Under ``torch.compile`` fla's kernel would break the graph, and inductor does not
fuse a convolution (it calls aten's depthwise kernels: 2.5 ms of a 17 ms compiled HGRN 3:1 recall step on a GPU), so
compiled calls write the conv as the K shifted multiply-adds (:data:`SHIFTED_SUM_UNDER_COMPILE`), plain pointwise ops
that inductor fuses with the zero past, the bias and the activation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.kernels import backends, fla_calls

__all__ = ["causal_conv1d", "naive_causal_conv1d", "causal_conv1d_torch", "shifted_sum", "ACTIVATIONS",
           "SHIFTED_SUM_UNDER_COMPILE"]

ACTIVATIONS = (None, "silu")
#: under torch.compile the conv as K shifted multiply-adds (fused by inductor) rather than aten's conv1d (an extern
#: kernel); off: conv1d there too (the paper-scale benchmark's ``@atenconv`` rows measure the difference)
SHIFTED_SUM_UNDER_COMPILE = True


def _check(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None,
           initial_state: Tensor | None) -> None:
    if x.ndim != 3 or weight.ndim != 3 or weight.shape[:2] != (x.shape[2], 1):
        raise ValueError(f"causal_conv1d expects x [B, T, C] and weight [C, 1, K]; got x={tuple(x.shape)} "
                         f"weight={tuple(weight.shape)}")
    if bias is not None and bias.shape != (x.shape[2],):
        raise ValueError(f"causal_conv1d bias must be [C]=[{x.shape[2]}]; got {tuple(bias.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"causal_conv1d activation {activation!r}; allowed: None, 'silu'")
    want = (x.shape[0], weight.shape[2] - 1, x.shape[2])
    if initial_state is not None and tuple(initial_state.shape) != want:
        raise ValueError(f"causal_conv1d initial_state must be [B, K-1, C]={list(want)}; got {tuple(initial_state.shape)}")


def _with_past(x: Tensor, K: int, initial_state: Tensor | None) -> Tensor:
    """x with its ``K - 1`` past inputs prepended: ``[B, K - 1 + T, C]``."""
    past = x.new_zeros(x.shape[0], K - 1, x.shape[2]) if initial_state is None else initial_state.to(x.dtype)
    return torch.cat([past, x], dim=1)


def _last_inputs(xx: Tensor, K: int) -> Tensor:
    """The decode state a call hands on: the last ``K - 1`` of its inputs (past included), ``[B, K - 1, C]``."""
    return xx[:, xx.shape[1] - (K - 1):].detach().clone()


def _act(y: Tensor, activation: str | None) -> Tensor:
    return F.silu(y) if activation == "silu" else y


def naive_causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, activation: str | None = None,
                        initial_state: Tensor | None = None,
                        output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """Token by token: each output the weighted sum of its window -> (y ``[B, T, C]``, last ``K - 1`` inputs or None)."""
    _check(x, weight, bias, activation, initial_state)
    K, T = weight.shape[2], x.shape[1]
    xx = _with_past(x, K, initial_state)
    taps = weight[:, 0, :].to(x.dtype)  # [C, K]
    out = [(xx[:, t : t + K] * taps.t()).sum(1) + (0 if bias is None else bias.to(x.dtype)) for t in range(T)]
    y = torch.stack(out, 1) if T else x.new_zeros(x.shape)
    return _act(y, activation), (_last_inputs(xx, K) if output_final_state else None)


class _ShiftedConv(torch.autograd.Function):
    """Causal depthwise conv as shifted multiply-adds, one autograd node: ``y[:, t] = sum_k xx[:, t + k] * w[:, 0, k]``
    for xx ``[B, T + K - 1, C]`` (the past prepended), w ``[C, 1, K]`` -> y ``[B, T, C]``. The backward is the same sum
    transposed: ``dxx[:, j] = sum_k dy[:, j - k] * w[:, 0, k]`` and ``dw[:, 0, k] = sum_(b, t) xx[:, t + k] * dy``.
    The taps are copied to ``[K, C]`` first: multiplying by a strided column ``w[:, 0, k]`` (stride K) took ~3x as long
    as by a contiguous row on CPU."""

    @staticmethod
    def forward(ctx, xx: Tensor, w: Tensor) -> Tensor:
        K = w.shape[-1]
        T = xx.shape[1] - K + 1
        taps = w[:, 0, :].t().contiguous()  # [K, C]
        y = xx[:, 0:T] * taps[0]
        for k in range(1, K):
            y.addcmul_(xx[:, k : k + T], taps[k])
        ctx.save_for_backward(xx, taps)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        xx, taps = ctx.saved_tensors
        B, TK, C = xx.shape
        K = taps.shape[0]
        T = TK - K + 1
        dxx = dw = None
        if ctx.needs_input_grad[0]:
            dxx = xx.new_zeros(B, TK, C)
            for k in range(K):
                dxx[:, k : k + T].addcmul_(dy, taps[k])
        if ctx.needs_input_grad[1]:
            dw = torch.stack([(xx[:, k : k + T] * dy).sum((0, 1)) for k in range(K)], 1).unsqueeze(1)  # [C, 1, K]
        return dxx, dw


def shifted_sum(xx: Tensor, w: Tensor) -> Tensor:
    """``y[..., t, c] = sum_k xx[..., t + k, c] * w[c, 0, k]`` for xx ``[..., T + K - 1, C]`` (the past prepended), w
    ``[C, 1, K]``, as plain ops, which autograd differentiates and inductor fuses."""
    K = w.shape[-1]
    T = xx.shape[-2] - K + 1
    y = xx[..., 0:T, :] * w[:, 0, 0]
    for k in range(1, K):
        y = y + xx[..., k : k + T, :] * w[:, 0, k]
    return y


def causal_conv1d_torch(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, activation: str | None = None,
                        initial_state: Tensor | None = None,
                        output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """The PyTorch path -> (y ``[B, T, C]``, the last ``K - 1`` inputs ``[B, K - 1, C]`` or None)."""
    K = weight.shape[2]
    xx = _with_past(x, K, initial_state)
    w = weight.to(x.dtype)
    b = None if bias is None else bias.to(x.dtype)
    if SHIFTED_SUM_UNDER_COMPILE and torch.compiler.is_compiling():
        y = shifted_sum(xx, w)
        if b is not None:
            y = y + b
    elif x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        # the same sum as shifted multiply-adds (equal to conv1d within float rounding; tests/test_nn.py): oneDNN's
        # depthwise conv1d backward took ~0.8 ms a call on a 2-core CPU for the default space's [16, 32, 64]
        # tensors, about a tenth of an HGRN recall-model step; one autograd node with its own backward, since the
        # same sum left to autograd was ~30 small ops a call (the CPU recall-step benchmark measures both)
        y = _ShiftedConv.apply(xx, w)
        if b is not None:
            y = y + b
    else:
        y = F.conv1d(xx.transpose(1, 2), w, b, groups=x.shape[2]).transpose(1, 2)
    return _act(y, activation), (_last_inputs(xx, K) if output_final_state else None)


def causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, activation: str | None = None,
                  initial_state: Tensor | None = None, output_final_state: bool = False,
                  backend: str | None = None) -> tuple[Tensor, Tensor | None]:
    """-> (y ``[B, T, C]`` in x's dtype, the last ``K - 1`` inputs ``[B, K - 1, C]`` or None). ``backend``: "fla" |
    "torch" | "auto" (:func:`hlnas.model.kernels.resolve_backend`)."""
    _check(x, weight, bias, activation, initial_state)
    if backends.route("causal_conv1d", backend, x=x, weight=weight, initial_state=initial_state,
                      output_final_state=output_final_state) == "fla":
        return fla_calls.fla_causal_conv1d(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype),
                                          activation), None
    return causal_conv1d_torch(x, weight, bias, activation=activation, initial_state=initial_state,
                               output_final_state=output_final_state)

"""HGRN's elementwise gated recurrence (fla ``fla.ops.hgrn``).

    h_t = exp(g_t) * h_{t-1} + x_t,    o_t = h_t

Shapes: x and g ``[B, T, D]`` (D channels; no heads: every channel is its own scalar recurrence),
g is the forget gate in log space (``g <= 0``, e.g. ``logsigmoid``), state ``[B, D]`` in float32.
There is no query and no scale: the output is the state itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hlnas.model.nn import compute_dtype
from hlnas.model.kernels import backends, fla_calls, without_autocast

__all__ = ["hgrn", "naive_hgrn", "chunk_hgrn_torch"]


def _check(x: Tensor, g: Tensor, initial_state: Tensor | None) -> None:
    if x.ndim != 3 or g.shape != x.shape:
        raise ValueError(f"hgrn expects x and g of one shape [B, T, D]; got x={tuple(x.shape)} g={tuple(g.shape)}")
    if initial_state is not None and initial_state.shape != (x.shape[0], x.shape[2]):
        raise ValueError(
            f"hgrn initial_state must be [B, D]=[{x.shape[0]}, {x.shape[2]}]; got {tuple(initial_state.shape)}"
        )


@without_autocast
def naive_hgrn(
    x: Tensor, g: Tensor, *, initial_state: Tensor | None = None, output_final_state: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference -> (o ``[B, T, D]`` in x's dtype, final state ``[B, D]`` or None)."""
    _check(x, g, initial_state)
    dt = compute_dtype(x)
    B, T, D = x.shape
    h = x.new_zeros(B, D, dtype=dt) if initial_state is None else initial_state.to(dt)
    xs, gs = x.to(dt), g.to(dt)
    out = []
    for t in range(T):
        h = gs[:, t].exp() * h + xs[:, t]
        out.append(h)
    o = torch.stack(out, 1) if T else x.new_zeros(B, 0, D, dtype=dt)
    return o.to(x.dtype), (h if output_final_state else None)


#: exp(g) is computed as exp2(g * log2(e)): on CPU torch's exp2 kernel is ~3x faster than exp's
_LOG2E = 1.4426950408889634


def _default_chunk(T: int) -> int:
    """~sqrt(T): the loops run over the C positions of a chunk and over the T / C chunks (C = 32 at
    T = 1024; measured on CPU at T = 1024, C = 16 and 23 are slower)."""
    return max(1, round(T**0.5))


def _gates(g: Tensor, n: int, C: int, shift: int = 0) -> Tensor:
    """exp(g[:, t + shift]) as a new ``[B, n, C, D]`` tensor, 1 past the end (g ``[B, T, D]``)."""
    B, T, D = g.shape
    a = g.new_empty(B, n * C, D)
    torch.mul(g[:, shift:], _LOG2E, out=a[:, : T - shift])
    a[:, T - shift :].zero_()
    return a.exp2_().view(B, n, C, D)


def _pad_blocks(t: Tensor, n: int, C: int) -> Tensor:
    """[B, T, D] -> [B, n, C, D] (a view where the strides allow), zeros past T."""
    B, T, D = t.shape
    if n * C != T:
        t = F.pad(t, (0, 0, 0, n * C - T))
    return t.reshape(B, n, C, D)


def _scan(x: Tensor, a: Tensor, h0: Tensor | None, out: Tensor, reverse: bool = False) -> Tensor:
    """The linear recurrence ``h = a_t h + x_t`` over t = i*C + c, without autograd.

    x, a: ``[B, n, C, D]`` (chunk i, position c); h0: ``[B, D]`` or None (zeros). Every state goes
    into ``out`` (``[B, n, C, D]``; it may be ``a`` itself: each position's coefficient is read
    before its state overwrites it). ``reverse`` runs from the last step to the first, h0 then
    being the state after the end. Returns the state after the last step.

    Two levels, each step one multiply-add: a loop over the C in-chunk positions runs every chunk
    at once from a zero state, keeping only its end state b; with A the product of the chunk's
    coefficients, a loop over the n chunks carries the true state across their boundaries
    (h <- A h + b); then the in-chunk loop runs again from those entering states, writing out.
    Only products of coefficients appear, never quotients, so any decay (a coefficient of
    exactly 0 included) is exact. The temporaries are all [B, n, D] or smaller.
    """
    B, n, C, D = x.shape
    order = slice(None, None, -1) if reverse else slice(None)
    xs, As, outs = x.unbind(2)[order], a.unbind(2)[order], out.unbind(2)[order]
    b = xs[0]
    for xc, ac in zip(xs[1:], As[1:]):
        b = torch.addcmul(xc, ac, b)
    b_end, A_end = b.unbind(1), a.prod(2).unbind(1)
    h = x.new_zeros(B, D) if h0 is None else h0
    entering = [h] * n
    for i in range(n - 1, -1, -1) if reverse else range(n):
        entering[i] = h
        h = torch.addcmul(b_end[i], A_end[i], h)
    s = torch.stack(entering, 1)
    for xc, ac, oc in zip(xs, As, outs):
        s = torch.addcmul(xc, ac, s, out=oc)
    return h


class _HgrnScan(torch.autograd.Function):
    """h_t = exp(g_t) h_{t-1} + x_t by :func:`_scan`, with a hand-written backward, itself a scan
    run in reverse: dh_t = do_t + exp(g_{t+1}) dh_{t+1} (dh after the end = the final state's
    gradient); then dx_t = dh_t, dg_t = dh_t exp(g_t) h_{t-1}, d initial_state = exp(g_0) dh_0."""

    @staticmethod
    def forward(ctx, x: Tensor, g: Tensor, h0: Tensor | None, C: int) -> tuple[Tensor, Tensor]:
        B, T, D = x.shape
        n = -(-T // C)
        # padded steps: x = 0 and a = 1, so the state passes through them unchanged
        hs = _gates(g, n, C)  # the gates, overwritten by the states: the output is the only big tensor
        ht = _scan(_pad_blocks(x, n, C), hs, h0, out=hs)
        ctx.save_for_backward(g, hs, h0)
        return hs.view(B, n * C, D)[:, :T], ht

    @staticmethod
    def backward(ctx, do: Tensor, dht: Tensor):
        g, hs, h0 = ctx.saved_tensors
        B, n, C, D = hs.shape
        T = do.shape[1]
        a_next = _gates(g, n, C, shift=1)  # exp(g_{t+1}), 1 past the end
        dh = torch.empty_like(hs)
        _scan(_pad_blocks(do, n, C), a_next, dht, out=dh, reverse=True)
        dh, a_next, hs = (t.view(B, n * C, D) for t in (dh, a_next, hs))
        dx = dg = dh0 = None
        a0 = torch.exp2(g[:, 0] * _LOG2E)
        if ctx.needs_input_grad[1]:  # dg_t = dh_t * exp(g_t) * h_{t-1}
            dg = torch.empty_like(dh)
            torch.mul(dh[:, 1:], a_next[:, :-1], out=dg[:, 1:]).mul_(hs[:, :-1])
            if h0 is None:
                dg[:, 0].zero_()
            else:
                torch.mul(dh[:, 0], a0, out=dg[:, 0]).mul_(h0)
            dg = dg[:, :T]
        if ctx.needs_input_grad[0]:
            dx = dh[:, :T]
        if ctx.needs_input_grad[2]:
            dh0 = a0 * dh[:, 0]
        return dx, dg, dh0, None


@without_autocast
def chunk_hgrn_torch(
    x: Tensor,
    g: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Block-parallel form of :func:`naive_hgrn`, pure PyTorch and differentiable.

    A two-level scan with a hand-written backward (:class:`_HgrnScan`): Python loops over the C
    positions of a chunk (every chunk at once) and over the T / C chunks (the [B, D] boundary
    state), each step one multiply-add, instead of T steps of the token loop. ``chunk_size``
    defaults to ~sqrt(T). The only exponentials are the gates exp(g_t) themselves and there are
    no divisions, so gates of any strength (g down to -inf) are handled exactly.
    """
    _check(x, g, initial_state)
    dt = compute_dtype(x)
    B, T, D = x.shape
    if T == 0:
        h = x.new_zeros(B, D, dtype=dt) if initial_state is None else initial_state.to(dt)
        return x.new_zeros(B, 0, D), (h if output_final_state else None)
    C = max(1, min(_default_chunk(T) if chunk_size is None else chunk_size, T))
    h0 = None if initial_state is None else initial_state.to(dt)
    o, ht = _HgrnScan.apply(x.to(dt), g.to(dt), h0, C)
    return o.to(x.dtype), (ht if output_final_state else None)


def hgrn(
    x: Tensor,
    g: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    backend: str | None = None,
) -> tuple[Tensor, Tensor | None]:
    """h_t = exp(g_t) h_{t-1} + x_t over x, g ``[B, T, D]`` -> (o ``[B, T, D]``, final state ``[B, D]`` float32).

    ``initial_state``: ``[B, D]`` (float32), the state before the first token.
    """
    _check(x, g, initial_state)
    if backends.route("hgrn", backend, x=x, g=g, initial_state=initial_state) == "fla":
        return fla_calls.fla_hgrn(x, g, initial_state=initial_state, output_final_state=output_final_state)
    return chunk_hgrn_torch(x, g, initial_state=initial_state, output_final_state=output_final_state)

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

from hlnas.kernels import resolve_backend

__all__ = ["hgrn", "naive_hgrn", "chunk_hgrn_torch", "make_inputs"]


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check(x: Tensor, g: Tensor, initial_state: Tensor | None) -> None:
    if x.ndim != 3 or g.shape != x.shape:
        raise ValueError(f"hgrn expects x and g of one shape [B, T, D]; got x={tuple(x.shape)} g={tuple(g.shape)}")
    if initial_state is not None and initial_state.shape != (x.shape[0], x.shape[2]):
        raise ValueError(
            f"hgrn initial_state must be [B, D]=[{x.shape[0]}, {x.shape[2]}]; got {tuple(initial_state.shape)}"
        )


def naive_hgrn(
    x: Tensor, g: Tensor, *, initial_state: Tensor | None = None, output_final_state: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Token-by-token reference -> (o ``[B, T, D]`` in x's dtype, final state ``[B, D]`` or None)."""
    _check(x, g, initial_state)
    dt = _compute_dtype(x)
    B, T, D = x.shape
    h = x.new_zeros(B, D, dtype=dt) if initial_state is None else initial_state.to(dt)
    xs, gs = x.to(dt), g.to(dt)
    out = []
    for t in range(T):
        h = gs[:, t].exp() * h + xs[:, t]
        out.append(h)
    o = torch.stack(out, 1) if T else x.new_zeros(B, 0, D, dtype=dt)
    return o.to(x.dtype), (h if output_final_state else None)


#: largest |cumulative log-decay| in a chunk for the exp(G) * cumsum(exp(-G) x) form: exp(+-60) is far
#: inside float32's range, and the cancellation it brings into dg stays at rounding level
_EXP_LIMIT = 60.0


def _shift(t: Tensor, k: int) -> Tensor:
    """t[:, :, s] -> t[:, :, s - k] along the in-chunk axis (dim 2), zeros shifted in."""
    return F.pad(t[:, :, :-k], (0, 0, k, 0))


def chunk_hgrn_torch(
    x: Tensor,
    g: Tensor,
    *,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor | None]:
    """Block-parallel form of :func:`naive_hgrn`, pure PyTorch and differentiable.

    Inside a chunk, with G the in-chunk cumulative log-decay, the state from zero is
    ``exp(G_t) * cumsum_s(exp(-G_s) x_s)``: a handful of elementwise passes. That form needs
    ``exp(|G|)`` to fit the float type (and loses precision in dg as |G| grows), so when some
    chunk's total decay is stronger than ``_EXP_LIMIT`` (forget gates near 0) all chunks go
    through a Hillis-Steele scan instead, which only exponentiates sums <= 0. A Python loop
    over chunks carries the [B, D] boundary state; the outputs then get ``exp(G) * carry``.
    """
    _check(x, g, initial_state)
    dt = _compute_dtype(x)
    B, T, D = x.shape
    C = max(1, min(chunk_size, T))
    n = -(-T // C)
    pad = n * C - T
    # padded steps have x = 0, g = 0 (no decay), so they leave the final state untouched
    xc = F.pad(x.to(dt), (0, 0, 0, pad)).view(B, n, C, D)
    gc = F.pad(g.to(dt), (0, 0, 0, pad)).view(B, n, C, D)
    G = gc.cumsum(2)
    eG = G.exp()
    if G.detach().abs().amax() <= _EXP_LIMIT:
        b = eG * (xc * (-G).exp()).cumsum(2)
    else:
        b, la, k = xc, gc, 1
        while k < C:
            # compose each step with the segment ending k steps earlier:
            # (a1, b1) then (a2, b2) = (a1 a2, a2 b1 + b2)
            b, la = b + la.exp() * _shift(b, k), la + _shift(la, k)
            k *= 2
    h = x.new_zeros(B, D, dtype=dt) if initial_state is None else initial_state.to(dt)
    carries = []
    for i in range(n):
        carries.append(h)
        h = eG[:, i, -1] * h + b[:, i, -1]
    o = b + eG * torch.stack(carries, 1)[:, :, None]
    o = o.reshape(B, n * C, D)[:, :T]
    return o.to(x.dtype), (h if output_final_state else None)


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
    if resolve_backend("hgrn", x, backend) == "torch":
        return chunk_hgrn_torch(x, g, initial_state=initial_state, output_final_state=output_final_state)
    from fla.ops.hgrn import chunk_hgrn, fused_recurrent_hgrn

    h0 = None if initial_state is None else initial_state.float()
    short = x.shape[1] <= 64 and not torch.is_grad_enabled()
    if short or (h0 is not None and h0.requires_grad):
        # fused_recurrent keeps its state in x's dtype and chunk_hgrn gives no gradient for
        # initial_state; run the recurrent kernel in float32 so a decode state stays float32.
        o, ht = fused_recurrent_hgrn(x.float(), g.float(), initial_state=h0, output_final_state=output_final_state)
        return o.to(x.dtype), ht
    # chunk_hgrn accumulates in float32 and returns a float32 final state
    return chunk_hgrn(x, g, initial_state=h0, output_final_state=output_final_state)


def make_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """x and g ``[B, T, H*K]`` (HGRN has no heads: D = H*K channels; V is ignored).

    g = logsigmoid(N(2, 1)): per-step decays mostly in (0.7, 0.99), the range HGRN's gates sit in.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    D = H * K
    x = torch.randn(B, T, D, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, D, generator=gen) + 2.0)
    return {"x": x.to(device=device, dtype=dtype), "g": g.to(device=device, dtype=dtype)}

"""Small building blocks shared by the mixers and the model: norms, short convolution, RoPE, SwiGLU.

Plain PyTorch, identical on CPU and GPU. Each keeps its decode state in a plain dict so the
cache's byte count is simply the sum of the tensors it holds.
"""

from __future__ import annotations

import os
import threading

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.model.config import swiglu_hidden  # noqa: F401  (re-exported: the MLP's sizing rule)

__all__ = ["compute_dtype", "RMSNorm", "GatedRMSNorm", "SwiGLU", "rotary", "rotary_qk",
           "rope_table", "grow_rope_tables", "rope_tables_bytes", "ROPE_TABLE", "swiglu_hidden", "fused_linear",
           "lean_gated_norm", "takes_lean_norm", "fused_on", "fused_forms", "FUSED_ON_CPU", "LEAN_GATED_NORM"]


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype recurrences and reductions run in: float64 for float64 inputs (the reference tests), else float32
    (bf16 accumulations lose the state's small terms)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


#: The fused forms of the LM's norms and projections (F.rms_norm in :class:`RMSNorm`, :func:`fused_linear`) run on CUDA
#: only. Why: on the CPU default's recall models they measured 0.98-0.99x the composed forms' step (the stacked
#: weights' copy costs more than the one GEMM saves at d=64), and the CPU path stays bit for bit what the CPU results
#: so far were measured with. Tests set it.
FUSED_ON_CPU = False


def fused_on(device: torch.device | str) -> bool:
    """Whether computations on ``device`` take the fused forms (CUDA; the CPU where :data:`FUSED_ON_CPU`)."""
    return torch.device(device).type == "cuda" or FUSED_ON_CPU


def fused_forms(x: Tensor) -> bool:
    """Whether ``x``'s computations take the fused forms (:func:`fused_on` its device)."""
    return fused_on(x.device)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if fused_forms(x):
            # torch's fused kernel, the same float32 math: on CUDA one kernel forward and one backward saving x and
            # its rstd, where the composed form below ran about seven fp32 elementwise kernels each way and saved
            # their [B, T, C] outputs (paper-340m Transformer 0.78x a plain-PyTorch one with nn.RMSNorm, at 1.16x
            # its memory)
            cdt = compute_dtype(x)
            return F.rms_norm(x.to(cdt), (x.shape[-1],), self.weight.to(cdt), self.eps).to(x.dtype)
        # float32, float64 for float64 inputs (the reference tests: it once rounded them to float32)
        xf = x.to(compute_dtype(x))
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(xf.dtype)).to(x.dtype)


#: The gated norms take :func:`lean_gated_norm` wherever the fused forms run (:func:`fused_forms`); off, they take the
#: composed form there too (the saved-memory benchmark compares the two). HLNAS_LEAN_GATED_NORM=0 turns it off, a
#: switch for device diagnoses (it once cleared the lean norm of a misaligned-address fault).
LEAN_GATED_NORM = os.environ.get("HLNAS_LEAN_GATED_NORM", "1") != "0"


def takes_lean_norm(x: Tensor) -> bool:
    """Whether a gated norm takes :func:`lean_gated_norm` for ``x``: :data:`LEAN_GATED_NORM` on, and the fused forms'
    device."""
    return LEAN_GATED_NORM and fused_forms(x)


class GatedRMSNorm(RMSNorm):
    """RMSNorm(x) * act(gate): the output gate of GLA, HGRN, RetNet, DeltaNet and GatedDeltaNet."""

    def __init__(self, dim: int, eps: float = 1e-6, act: str = "swish"):
        super().__init__(dim, eps)
        if act not in ("swish", "sigmoid"):
            raise ValueError(f"act must be 'swish' or 'sigmoid', got {act!r}")
        self.act = act

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:  # type: ignore[override]
        if takes_lean_norm(x):
            return lean_gated_norm(x, gate, self.weight, self.eps, self.act)
        cdt = compute_dtype(x)
        g = F.silu(gate.to(cdt)) if self.act == "swish" else torch.sigmoid(gate.to(cdt))
        return (super().forward(x).to(cdt) * g).to(x.dtype)


def _act_and_slope(g: Tensor, act: str) -> tuple[Tensor, Tensor]:
    """act(g) and act'(g) in g's dtype, for swish (silu) or sigmoid."""
    s = torch.sigmoid(g)
    if act == "sigmoid":
        return s, s * (1 - s)
    return g * s, s * (1 + g * (1 - s))


class _LeanGatedNorm(torch.autograd.Function):
    """A gated RMSNorm that keeps only its inputs (in their own dtype) and one rstd per row (or group) for
    backward, and recomputes the rest there. Either ``RMSNorm(x) * w * act(gate)`` (``gate_first`` False: GLA, HGRN,
    RetNet, the delta rules) or ``RMSNorm(x * silu(gate)) * w`` over ``groups`` equal slices of the last dim
    (``gate_first``: Mamba-2's norm_before_gate=False). Float32 math throughout (float64 for float64 inputs), one
    rounding at the output.

    Why: composed, autograd saved four or five float32 copies of the [B, T, C] activations a layer (the casts, the
    normalised value, the activated gate); Mamba-2 at paper-340m (C = 2048, B=8, T=4096) kept 1.25 GiB a layer, about
    30 GiB of its 24 layers, and ran out of an 80 GB GPU's memory."""

    @staticmethod
    def forward(ctx, x, gate, weight, eps, act, gate_first, groups):
        cdt = compute_dtype(x)
        xf, gf, w = x.to(cdt), gate.to(cdt), weight.to(cdt)
        a, _ = _act_and_slope(gf, act)
        h = (xf * a if gate_first else xf).unflatten(-1, (groups, -1))
        rstd = torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)
        y = (h * rstd).flatten(-2) * w
        ctx.save_for_backward(x, gate, weight, rstd)
        ctx.act, ctx.gate_first, ctx.groups = act, gate_first, groups
        return (y if gate_first else y * a).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, gate, weight, rstd = ctx.saved_tensors
        cdt = compute_dtype(x)
        xf, gf, w, dy = x.to(cdt), gate.to(cdt), weight.to(cdt), dy.to(cdt)
        a, slope = _act_and_slope(gf, ctx.act)
        h = (xf * a if ctx.gate_first else xf).unflatten(-1, (ctx.groups, -1))
        n = (h * rstd).flatten(-2)  # the normalised value, before the weight
        dgate = None
        if not ctx.gate_first:  # y = n w a
            dgate = dy * n * w * slope
            dy = dy * a
        dw = (dy * n).reshape(-1, n.shape[-1]).sum(0)
        dn = (dy * w).unflatten(-1, (ctx.groups, -1))
        nn_ = n.unflatten(-1, (ctx.groups, -1))
        dh = (rstd * (dn - nn_ * (dn * nn_).mean(-1, keepdim=True))).flatten(-2)
        if ctx.gate_first:  # h = x a
            dgate, dh = dh * xf * slope, dh * a
        return dh.to(x.dtype), dgate.to(gate.dtype), dw.to(weight.dtype), None, None, None, None


def lean_gated_norm(x: Tensor, gate: Tensor, weight: Tensor, eps: float, act: str = "swish", gate_first: bool = False,
                    groups: int = 1) -> Tensor:
    """:class:`_LeanGatedNorm` as a function (Mamba-2's grouped norm calls it)."""
    return _LeanGatedNorm.apply(x, gate, weight, eps, act, gate_first, groups)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, hidden, bias=False)
        self.up_proj = nn.Linear(d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_model, bias=False)

    @staticmethod
    def param_count(d_model: int, hidden: int) -> int:
        return 3 * d_model * hidden

    def forward(self, x: Tensor) -> Tensor:
        gate, up = fused_linear(x, self.gate_proj, self.up_proj)
        return self.down_proj(F.silu(gate) * up)


def fused_linear(x: Tensor, *projs: nn.Module) -> tuple[Tensor, ...]:
    """``tuple(p(x) for p in projs)`` as one matmul over the stacked weights where every ``p`` is a bias-free
    ``nn.Linear``: the backward then takes x's gradient in one GEMM, where separate projections ran one each and
    added them in float32 (the paper-340m profile: a Transformer's fp32 adds 47 ms a step against a plain-PyTorch
    one's 19 with fused QKV and gate-up). The parameters
    stay separate (names, init and state dicts are unchanged); the values are the same up to float rounding. On CUDA only (:data:`FUSED_ON_CPU`)."""
    if not fused_forms(x) or len(projs) < 2 or any(type(p) is not nn.Linear or p.bias is not None for p in projs):
        return tuple(p(x) for p in projs)
    out = F.linear(x, torch.cat([p.weight for p in projs]))
    return out.split([p.out_features for p in projs], dim=-1)


#: rotary() and rotary_qk() read cos/sin from a table made once per device (rope_table) instead of computing them in
#: their graph.
#: Why: inductor inlined the cos/sin of the angle table into the kernels that rotate q and k (and their backward),
#: recomputing pow, cos and sin for every element: on a GPU two such kernels took 6.8 of a 27.4 ms compiled
#: all-attention recall step. With the table the compiled graph-replayed recall step ran 1.27x (all-attention), 1.05x
#: (GLA 3:1), 1.09x (RetNet pure) and 1.04x (HGRN 3:1) its own row without, bit for bit the same rotation
#: (tests/test_rope_table.py), so it is on; HLNAS_ROPE_TABLE=0 computes cos/sin in place again.
ROPE_TABLE = os.environ.get("HLNAS_ROPE_TABLE", "1") != "0"
_TABLES: dict[tuple, tuple[Tensor, Tensor]] = {}
_RETIRED: list = []  # grown-out tables, kept alive: another CUDA stream may still be reading one
_TABLES_LOCK = threading.Lock()


def _angles(device, start: int, length: int, half: int, theta: float) -> Tensor:
    inv = 1.0 / (theta ** (torch.arange(0, half, device=device, dtype=torch.float32) / half))
    pos = torch.arange(start, start + length, device=device, dtype=torch.float32)
    return pos[:, None] * inv[None, :]  # [length, half]


@torch.compiler.disable  # made eagerly, outside any compiled graph: the graph then reads it as an input
def rope_table(device: torch.device, length: int, half: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin ``[n, half]`` (float32) of positions ``0..n-1``, ``n >= length``, made once per device, width and
    theta and grown by doubling. Inside a CUDA graph capture a missing table is computed (into the graph) but not
    kept; a table made on a CUDA stream is finished before other streams can see it."""
    key = (str(device), half, float(theta))
    with _TABLES_LOCK:
        have = _TABLES.get(key)
        if have is not None and have[0].shape[0] >= length:
            return have
        n = max(length, 2 * have[0].shape[0] if have is not None else length)
        ang = _angles(device, 0, n, half, theta)
        table = (ang.cos(), ang.sin())
        if device.type == "cuda":
            if torch.cuda.is_current_stream_capturing():
                return table  # recorded into the graph, so valid only where it replays
            torch.cuda.current_stream(device).synchronize()
        if have is not None:
            _RETIRED.append(have)
        _TABLES[key] = table
        return table


def grow_rope_tables(length: int) -> None:
    """Grow every table made so far to cover positions ``0..length-1``: a decode to ``length`` then allocates no
    table of its own (the decode-memory benchmark measures what the cache holds, apart from this)."""
    with _TABLES_LOCK:
        keys = list(_TABLES)
    for device, half, theta in keys:
        rope_table(torch.device(device), length, half, theta)


def rope_tables_bytes() -> int:
    """Bytes held by the RoPE tables of every device, the grown-out ones kept alive included: per device and width,
    shared by every sequence and model, so not part of any cache."""
    with _TABLES_LOCK:
        return sum(t.nbytes for pair in [*_TABLES.values(), *_RETIRED] for t in pair)


def _cos_sin(x: Tensor, offset: int, theta: float, table: bool | None) -> tuple[Tensor, Tensor]:
    """cos and sin ``[1, T, 1, D // 2]`` of positions offset..offset+T-1 for x ``[B, T, H, D]``: from
    :func:`rope_table` (``table``, default :data:`ROPE_TABLE`) or computed in place; the same values either way."""
    T, half = x.shape[1], x.shape[3] // 2
    if ROPE_TABLE if table is None else table:
        return tuple(t[offset:offset + T][None, :, None, :] for t in rope_table(x.device, offset + T, half, theta))
    ang = _angles(x.device, offset, T, half, theta)
    return ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    xf = x.to(compute_dtype(x))
    # split, not slices: its backward is one cat, where each slice's backward fills a zero tensor of x's size and
    # autograd then adds them (bit for bit the same values)
    x1, x2, rest = xf.split([half, half, xf.shape[-1] - 2 * half], dim=-1)
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
    return out.to(x.dtype)


def rotary(x: Tensor, offset: int, theta: float = 10000.0, table: bool | None = None) -> Tensor:
    """Rotary position embedding on x: [B, T, H, D] for positions offset..offset+T-1 (half-split form).
    ``table``: cos/sin from :func:`rope_table` (default :data:`ROPE_TABLE`); the same values either way."""
    return _rotate(x, *_cos_sin(x, offset, theta, table))


def rotary_qk(q: Tensor, k: Tensor, offset: int, theta: float = 10000.0,
              table: bool | None = None) -> tuple[Tensor, Tensor]:
    """:func:`rotary` on q and k (same T and head dim) with one cos/sin: one table fetch per layer, so a compiled
    layer breaks its graph once at :func:`rope_table`, not once for q and once for k."""
    if q.shape[1] != k.shape[1] or q.shape[3] != k.shape[3]:
        raise ValueError(f"rotary_qk: q {tuple(q.shape)} and k {tuple(k.shape)} differ in length or head dim")
    cos, sin = _cos_sin(q, offset, theta, table)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)

"""GLA op: the chunked PyTorch path against the token-by-token reference (CPU, float64), decode
against the parallel call, overflow safety under strong decay, and fla against torch on CUDA."""

from __future__ import annotations

import math

import pytest
import torch

from hlnas.errors import KernelUnavailable
from hlnas.model.kernels.gla import chunk_gla_torch, gla, naive_gla
from tests.helpers import assert_close, assert_runs_close
from tests.kernels.inputs import gla_inputs as make_inputs

SHAPES = [  # (B, T, H, K, V)
    (2, 100, 3, 16, 32),  # T not a multiple of the chunk
    (1, 1, 2, 8, 8),  # decode step
    (2, 64, 2, 8, 4),  # exactly one chunk
    (1, 17, 1, 4, 4),  # shorter than a chunk, not a multiple of 4
    (1, 300, 2, 16, 8),  # several chunks plus a remainder
]
# gate strength: multiplies g = logsigmoid(N(0,1)); "weak" is GLA-like (logsigmoid/16), "strong" ~ -5 per step
GATES = {"weak": 1 / 16, "mid": 1.0, "strong": 6.0}
# max_fast_decay: None = by dtype; 0 = every block split down to exact 4x4 pairwise; inf = one reference
# per chunk; 20 = a mix of fast and split blocks (and chunk halving) for the "mid" gates
PATHS = {"auto": None, "split": 0.0, "fast": math.inf, "mixed": 20.0}


def sid(s) -> str:
    return "B{}-T{}-H{}-K{}-V{}".format(*s)


def inputs(shape, gate: float, h0: bool, dtype=torch.float64, seed=0) -> dict:
    B, T, H, K, V = shape
    x = make_inputs(B, T, H, K, V, dtype=dtype, seed=seed)
    x["g"] = x["g"] * gate
    if h0:
        x["initial_state"] = torch.randn(B, H, K, V, dtype=dtype, generator=torch.Generator().manual_seed(seed + 1))
    return {n: t.requires_grad_() for n, t in x.items()}


def run_with_grads(fn, x: dict, seed: int = 7, **kw):
    """Forward with output_final_state, then gradients of <o, do> + <S, dS> w.r.t. every input."""
    o, s = fn(**x, output_final_state=True, **kw)
    gen = torch.Generator().manual_seed(seed)
    # rounded through bf16 so a bf16 run and its float32 reference get the very same cotangents
    do = torch.randn(o.shape, generator=gen).bfloat16().to(device=o.device, dtype=o.dtype)
    ds = torch.randn(s.shape, generator=gen).bfloat16().to(device=s.device, dtype=s.dtype)
    grads = torch.autograd.grad((o * do).sum() + (s * ds).sum(), list(x.values()))
    return o, s, dict(zip(x, grads))


@pytest.mark.parametrize("path", PATHS, ids=list(PATHS))
@pytest.mark.parametrize("gate", GATES, ids=list(GATES))
@pytest.mark.parametrize("h0", [False, True], ids=["h0none", "h0"])
@pytest.mark.parametrize("shape", SHAPES, ids=sid)
def test_chunk_matches_naive(shape, h0, gate, path):
    x = inputs(shape, GATES[gate], h0)
    o_ref, s_ref, g_ref = run_with_grads(naive_gla, x)
    o, s, g = run_with_grads(chunk_gla_torch, x, max_fast_decay=PATHS[path])
    assert_runs_close((o_ref, s_ref, g_ref), (o, s, g), 1e-6)


@pytest.mark.parametrize("chunk_size", [4, 16, 32, 128])
def test_chunk_sizes(chunk_size):
    x = inputs((1, 150, 2, 8, 8), 1.0, True)
    o_ref, s_ref, g_ref = run_with_grads(naive_gla, x)
    o, s, g = run_with_grads(chunk_gla_torch, x, chunk_size=chunk_size)
    assert_runs_close((o_ref, s_ref, g_ref), (o, s, g), 1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("step", [-5.0, -40.0])
def test_strong_decay_is_finite(dtype, step):
    """Per-step log-gates around ``step``: a 64-row chunk decays by e^-320 .. e^-2560, beyond exp()'s range
    (float32 overflows at e^88, float64 at e^709) if any factor were taken relative to the wrong row."""
    B, T, H, K, V = 2, 200, 2, 16, 16
    x = make_inputs(B, T, H, K, V, dtype=dtype, seed=3)
    gen = torch.Generator().manual_seed(4)
    x["g"] = (step + 0.5 * torch.randn(B, T, H, K, generator=gen)).clamp(max=-0.01).to(dtype)
    x["g"][:, 90:110] = -0.001  # and a calm stretch, so chunks mix fast and split blocks
    x = {n: t.requires_grad_() for n, t in x.items()}
    o_ref, s_ref, g_ref = run_with_grads(naive_gla, x)
    o, s, g = run_with_grads(chunk_gla_torch, x)
    for name, t in [("o", o), ("final_state", s), *((f"d{n}", t) for n, t in g.items())]:
        assert torch.isfinite(t).all(), f"{name} has inf/nan"
    tol = 1e-6 if dtype == torch.float64 else 1e-4
    assert_runs_close((o_ref, s_ref, g_ref), (o, s, g), tol)


@pytest.mark.parametrize("shape", [(2, 45, 2, 8, 16), (1, 130, 3, 16, 8)], ids=sid)
def test_decode_matches_parallel(shape):
    """One call over T tokens == a call over a prefix, then one token at a time carrying final_state."""
    x = {n: t.detach() for n, t in inputs(shape, 1.0, True).items()}
    o_full, s_full = gla(**x, output_final_state=True, backend="torch")
    split = shape[1] - 9
    pre = {n: (t[:, :split] if n != "initial_state" else t) for n, t in x.items()}
    o_pre, s = gla(**pre, output_final_state=True, backend="torch")
    outs = [o_pre]
    for t in range(split, shape[1]):
        step = {n: x[n][:, t : t + 1] for n in ("q", "k", "v", "g")}
        o_t, s = gla(**step, initial_state=s, output_final_state=True, backend="torch")
        outs.append(o_t)
    assert_close("decode o", o_full, torch.cat(outs, 1), 1e-10)
    assert_close("decode state", s_full, s, 1e-10)


def test_dtypes_and_defaults():
    x = make_inputs(1, 70, 2, 8, 8, dtype=torch.bfloat16)
    o, s = gla(**x, output_final_state=True)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32 and s.shape == (1, 2, 8, 8)
    o, s = gla(**x)
    assert s is None
    ref, _ = naive_gla(**x, scale=0.5)
    assert_close("scale", ref, gla(**x, scale=0.5)[0], 1e-2)


def test_bad_shapes_and_backend():
    x = make_inputs(1, 8, 2, 4, 4)
    with pytest.raises(ValueError, match=r"g=\(1, 8, 2, 3\)"):
        gla(**{**x, "g": x["g"][..., :3]})
    with pytest.raises(ValueError, match=r"initial_state must be \[B,H,K,V\]"):
        gla(**x, initial_state=torch.zeros(1, 2, 4, 5))
    with pytest.raises(ValueError, match="multiple of 4"):
        chunk_gla_torch(**x, chunk_size=30)
    with pytest.raises(KernelUnavailable):
        gla(**x, backend="fla")


# -- GPU: fla's Triton kernels against the torch path ------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("T", [37, 500, 1024])  # 37 takes fused_recurrent_gla, the others chunk_gla
@pytest.mark.parametrize("h0", [False, True], ids=["h0none", "h0"])
@pytest.mark.parametrize("g32", [False, True], ids=["gbf16", "gfp32"])  # the mixers pass a float32 g
def test_fla_matches_torch(T, h0, g32):
    B, H, K, V = 2, 4, 64, 64
    x = make_inputs(B, T, H, K, V, dtype=torch.bfloat16, device="cuda")
    if g32:
        x["g"] = x["g"].float()
    if h0:
        x["initial_state"] = torch.randn(B, H, K, V, device="cuda")  # fla wants a float32 state
    x = {n: t.requires_grad_() for n, t in x.items()}
    o, s, g = run_with_grads(gla, x, backend="fla")
    ref_in = {n: t.detach().float().requires_grad_() for n, t in x.items()}
    o_ref, s_ref, g_ref = run_with_grads(gla, ref_in, backend="torch")
    assert s.dtype == torch.float32 and s.shape == (B, H, K, V)
    assert_runs_close((o_ref, s_ref, g_ref), (o, s, g), 1e-2, name=f"T{T} ")

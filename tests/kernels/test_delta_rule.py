"""delta_rule: the chunked PyTorch path against the token loop (float64, outputs, final state and
every gradient), decode == parallel, input checks; on GPU, fla against the PyTorch path."""

from __future__ import annotations

import pytest
import torch

from hlnas.kernels.delta_rule import chunk_delta_rule_torch, delta_rule, naive_delta_rule
from tests.helpers import assert_close
from tests.helpers import forward_and_grads as _run
from tests.kernels.inputs import DELTA_SHAPES, delta_case, delta_shape_id
from tests.kernels.inputs import delta_rule_inputs as make_inputs

SHAPES, _id = DELTA_SHAPES, delta_shape_id


def _inputs(B, T, H, K, V, h0, dtype=torch.float64, seed=0):
    return delta_case(make_inputs, B, T, H, K, V, h0, dtype=dtype, seed=seed)




@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_chunk_matches_naive(shape):
    B, T, H, K, V, C, h0 = shape
    inp = _inputs(B, T, H, K, V, h0)
    o_ref, s_ref, g_ref = _run(naive_delta_rule, inp)
    o, s, g = _run(chunk_delta_rule_torch, inp, chunk_size=C)
    assert o.dtype == torch.float64 and s.dtype == torch.float64
    assert_close("o", o_ref, o, 1e-6)
    assert_close("final_state", s_ref, s, 1e-6)
    for n in g_ref:
        assert_close(f"d{n}", g_ref[n], g[n], 1e-6)


@pytest.mark.parametrize("shape", [(2, 50, 2, 16, 8, 16, True), (1, 70, 3, 8, 8, 64, False)], ids=_id)
def test_decode_matches_parallel(shape):
    """One call over T tokens == a prefix call, then one token at a time carrying final_state."""
    B, T, H, K, V, C, h0 = shape
    inp = make_inputs(B, T, H, K, V, dtype=torch.float64)
    state = 0.1 * torch.randn(B, H, K, V, dtype=torch.float64) if h0 else None
    full, s_full = delta_rule(**inp, initial_state=state, output_final_state=True)
    P = T // 2 + 3
    cut = lambda lo, hi: {n: t[:, lo:hi] for n, t in inp.items()}  # noqa: E731
    parts = []
    o, state = delta_rule(**cut(0, P), initial_state=state, output_final_state=True)
    parts.append(o)
    for t in range(P, T):
        o, state = delta_rule(**cut(t, t + 1), initial_state=state, output_final_state=True)
        parts.append(o)
    assert_close("decode o", full, torch.cat(parts, 1), 1e-10)
    assert_close("decode state", s_full, state, 1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_low_precision_dtypes(dtype):
    """Output keeps the input dtype, the state is float32, and both track the float64 reference."""
    inp = make_inputs(2, 90, 2, 16, 16, dtype=dtype)
    o, s = delta_rule(**inp, output_final_state=True, backend="torch")
    assert o.dtype == dtype and s.dtype == torch.float32
    o_ref, s_ref = naive_delta_rule(**{n: t.double() for n, t in inp.items()}, output_final_state=True)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert_close("o", o_ref, o, tol)
    assert_close("state", s_ref, s, tol)


def test_no_final_state_by_default_and_scale():
    inp = make_inputs(1, 10, 2, 8, 8, dtype=torch.float64)
    o, s = delta_rule(**inp)
    assert s is None
    o2, _ = naive_delta_rule(**inp, scale=0.5)
    o3, _ = delta_rule(**inp, scale=0.5)
    assert_close("scale", o2, o3, 1e-10)
    assert_close("default scale", naive_delta_rule(**inp, scale=8**-0.5)[0], o, 1e-10)


def test_shape_errors_quote_values():
    inp = make_inputs(2, 10, 3, 8, 4)
    with pytest.raises(ValueError, match=r"beta"):
        delta_rule(**{**inp, "beta": inp["beta"][:, :5]})
    with pytest.raises(ValueError, match=r"\(2, 3, 8, 4\)"):
        delta_rule(**inp, initial_state=torch.zeros(2, 3, 4, 8))
    with pytest.raises(ValueError, match=r"v="):
        delta_rule(**{**inp, "v": inp["v"][:1]})


@pytest.mark.gpu
@pytest.mark.parametrize("T", [40, 500, 1024])  # 40: fla's fused recurrent kernel, else chunk_delta_rule
@pytest.mark.parametrize("h0", [False, True], ids=["", "h0"])
def test_fla_matches_torch_on_cuda(T, h0):
    B, H, K, V = 2, 4, 64, 64
    inp = make_inputs(B, T, H, K, V, dtype=torch.bfloat16, device="cuda")
    if h0:
        inp["initial_state"] = 0.1 * torch.randn(B, H, K, V, device="cuda")
    ref_inp = {n: t.float().detach().requires_grad_(True) for n, t in inp.items()}
    for t in inp.values():
        t.requires_grad_(True)
    o_ref, s_ref = delta_rule(**ref_inp, output_final_state=True, backend="torch")
    o, s = delta_rule(**inp, output_final_state=True, backend="fla")
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert_close(f"fla o T{T}", o_ref, o, 1e-2)
    assert_close(f"fla state T{T}", s_ref, s, 1e-2)
    do = torch.randn_like(o_ref)
    g_ref = torch.autograd.grad((o_ref * do).sum(), list(ref_inp.values()))
    g = torch.autograd.grad((o.float() * do).sum(), list(inp.values()))
    for n, a, b in zip(inp, g_ref, g):
        assert_close(f"fla d{n} T{T}", a, b, 1e-2)


@pytest.mark.gpu
def test_fla_float32_on_cuda():
    """float32 inputs take fla's fused recurrent kernel (chunk_delta_rule refuses float32)."""
    inp = make_inputs(2, 300, 4, 64, 64, device="cuda")
    inp["initial_state"] = 0.1 * torch.randn(2, 4, 64, 64, device="cuda")
    ref_inp = {n: t.clone().requires_grad_(True) for n, t in inp.items()}
    for t in inp.values():
        t.requires_grad_(True)
    o_ref, s_ref = delta_rule(**ref_inp, output_final_state=True, backend="torch")
    o, s = delta_rule(**inp, output_final_state=True, backend="fla")
    assert_close("fla fp32 o", o_ref, o, 1e-3)
    assert_close("fla fp32 state", s_ref, s, 1e-3)
    do, ds = torch.randn_like(o), torch.randn_like(s)
    g_ref = torch.autograd.grad((o_ref * do).sum() + (s_ref * ds).sum(), list(ref_inp.values()))
    g = torch.autograd.grad((o * do).sum() + (s * ds).sum(), list(inp.values()))
    for n, a, b in zip(inp, g_ref, g):
        assert_close(f"fla fp32 d{n}", a, b, 1e-3)


@pytest.mark.slow
def test_naive_matches_fla_reference():
    """Pins the semantics (update order, default scale, state layout) to fla's own PyTorch reference."""
    pytest.importorskip("fla.ops.delta_rule.naive", exc_type=ImportError)
    from fla.ops.delta_rule.naive import delta_rule_recurrence  # takes [B, H, T, D]

    inp = make_inputs(2, 40, 3, 16, 8, dtype=torch.float64)
    h0 = torch.randn(2, 3, 16, 8, dtype=torch.float64)
    o, s = naive_delta_rule(**inp, initial_state=h0, output_final_state=True)
    tr = lambda x: x.transpose(1, 2)  # noqa: E731
    o_fla, s_fla = delta_rule_recurrence(*(tr(inp[n]) for n in ("q", "k", "v", "beta")), initial_state=h0)
    assert_close("o vs fla", o_fla, tr(o), 1e-5)  # fla's reference computes in float32
    assert_close("state vs fla", s_fla, s, 1e-5)

"""delta_rule: scale, input checks; on GPU, fla against the PyTorch path. (The chunked path against the token loop
and decode == parallel: test_delta_family.py, with the gated rule.)"""

from __future__ import annotations

import pytest
import torch

from hlnas.model.kernels.delta_rule import delta_rule, naive_delta_rule
from tests.helpers import assert_close
from tests.kernels.inputs import delta_rule_inputs as make_inputs


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

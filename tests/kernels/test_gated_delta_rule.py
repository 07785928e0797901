"""gated_delta_rule: strong decays, input checks, the fla-on-Hopper backward guard; on GPU, fla against PyTorch. (The
chunked path against the token loop and decode == parallel: test_delta_family.py, with the delta rule.)"""

from __future__ import annotations

import logging

import pytest
import torch

import hlnas.model.kernels.backends as backends
import hlnas.model.kernels.fla_calls as fla_calls
from hlnas.model.kernels.gated_delta_rule import (
    chunk_gated_delta_rule_torch,
    gated_delta_rule,
    naive_gated_delta_rule,
)
from tests.helpers import assert_close
from tests.kernels.inputs import gated_delta_rule_inputs as make_inputs



def test_strong_decay_stays_finite():
    """Log-decays down to -30 per token: the chunked path must not overflow (only exp of b_s - b_j <= 0)."""
    inp = make_inputs(1, 150, 2, 8, 8, dtype=torch.float64)
    inp["g"] = -30 * torch.rand(1, 150, 2, dtype=torch.float64)
    o_ref, s_ref = naive_gated_delta_rule(**inp, output_final_state=True)
    o, s = chunk_gated_delta_rule_torch(**inp, output_final_state=True)
    assert_close("o", o_ref, o, 1e-6)
    assert_close("state", s_ref, s, 1e-6)


def test_shape_errors_quote_values():
    inp = make_inputs(2, 10, 3, 8, 4)
    with pytest.raises(ValueError, match=r"g=\(2, 10, 2\)"):
        gated_delta_rule(**{**inp, "g": inp["g"][..., :2]})
    with pytest.raises(ValueError, match=r"\(2, 3, 8, 4\)"):
        gated_delta_rule(**inp, initial_state=torch.zeros(2, 3, 4, 8))


@pytest.mark.slow
def test_naive_matches_fla_reference():
    """Pins the semantics (decay-then-update order, default scale, state layout) to fla's reference."""
    pytest.importorskip("fla.ops.gated_delta_rule.naive", exc_type=ImportError)
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    inp = make_inputs(2, 40, 3, 16, 8, dtype=torch.float64)
    h0 = torch.randn(2, 3, 16, 8, dtype=torch.float64)
    o, s = naive_gated_delta_rule(**inp, initial_state=h0, output_final_state=True)
    o_fla, s_fla = naive_recurrent_gated_delta_rule(
        inp["q"], inp["k"], inp["v"], inp["beta"], inp["g"], initial_state=h0, output_final_state=True
    )
    assert_close("o vs fla", o_fla, o, 1e-5)  # fla's reference computes in float32
    assert_close("state vs fla", s_fla, s, 1e-5)


# -- the Hopper / triton / tilelang guard (fla issue #640) -------------------------------------------
NO_TL = (False, "the tilelang package is not installed")


@pytest.mark.parametrize(
    "cap, triton, tilelang, ok",
    [
        ((9, 0), "3.6.0", NO_TL, False),  # the H200 image: must refuse
        ((9, 0), "3.4.0", NO_TL, False),
        ((9, 0), "3.7.0+git1234", NO_TL, False),
        ((9, 0), "3.6.0", (True, "installed"), True),  # fla routes the backward to TileLang
        ((9, 0), "3.7.1", NO_TL, True),  # fixed triton
        ((9, 0), "3.3.1", NO_TL, True),  # before the regression
        ((8, 0), "3.6.0", NO_TL, True),  # A100
        ((10, 0), "3.6.0", NO_TL, True),  # Blackwell
        (None, None, NO_TL, True),  # no CUDA
    ],
    ids=["h200-t3.6", "h200-t3.4", "h200-t3.7dev", "h200-tilelang", "h200-t3.7.1", "h200-t3.3", "a100", "b200", "cpu"],
)
def test_backward_guard_verdict(monkeypatch, cap, triton, tilelang, ok):
    monkeypatch.setattr(backends, "_cuda_capability", lambda: cap)
    monkeypatch.setattr(backends, "_triton_version", lambda: triton)
    monkeypatch.setattr(backends, "tilelang_usable", lambda: tilelang)
    got, reason = backends.fla_gated_backward_ok()
    assert got is ok, reason
    if not ok:
        assert "pip install tilelang" in reason and "#640" in reason and triton in reason


def test_guard_falls_back_to_torch_with_one_warning(monkeypatch, caplog):
    """With grads needed and the guard saying no, the fla backend runs the PyTorch path (fla is never
    called) and warns once; forward-only calls would still go to fla."""
    monkeypatch.setattr(backends, "resolve_backend", lambda op, x, backend=None: "fla")
    monkeypatch.setattr(backends, "fla_gated_backward_ok", lambda: (False, "test reason: pip install tilelang"))
    monkeypatch.setattr(backends, "_logged", set())
    called = []
    monkeypatch.setattr(fla_calls, "fla_gated_delta_rule", lambda *a, **kw: called.append(a))
    inp = {n: t.requires_grad_(True) for n, t in make_inputs(1, 20, 2, 8, 8).items()}
    with caplog.at_level(logging.WARNING, logger="hlnas.model.kernels"):
        o1, _ = gated_delta_rule(**inp, backend="fla")
        o2, _ = gated_delta_rule(**inp, backend="fla")
    assert not called
    warnings = [r for r in caplog.records if "test reason" in r.getMessage()]
    assert len(warnings) == 1 and "PyTorch" in warnings[0].getMessage()
    assert_close("fallback o", naive_gated_delta_rule(**inp)[0], o1, 1e-5)
    with torch.no_grad():
        gated_delta_rule(**inp, backend="fla")
    assert len(called) == 1  # no gradient needed: fla's forward is fine


def test_tilelang_probe_runs():
    ok, reason = backends.tilelang_usable()
    assert isinstance(ok, bool) and reason



@pytest.mark.gpu
@pytest.mark.parametrize("T", [500, 1024])
@pytest.mark.parametrize("h0", [False, True], ids=["", "h0"])
def test_fla_matches_torch_on_cuda(T, h0, caplog):
    B, H, K, V = 2, 4, 64, 64
    inp = make_inputs(B, T, H, K, V, dtype=torch.bfloat16, device="cuda")
    inp["g"] = inp["g"].float()  # log-decays are computed in float32 by the mixer, as in fla
    if h0:
        inp["initial_state"] = 0.1 * torch.randn(B, H, K, V, device="cuda")
    ref_inp = {n: t.float().detach().requires_grad_(True) for n, t in inp.items()}
    o_ref, s_ref = gated_delta_rule(**ref_inp, output_final_state=True, backend="torch")
    with torch.no_grad():  # the forward always runs fla's kernel
        o, s = gated_delta_rule(**inp, output_final_state=True, backend="fla")
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert_close(f"fla o T{T}", o_ref, o, 1e-2)
    assert_close(f"fla state T{T}", s_ref, s, 1e-2)
    # with gradients: fla, or the PyTorch fallback when fla's backward cannot run (issue #640)
    for t in inp.values():
        t.requires_grad_(True)
    with caplog.at_level(logging.WARNING, logger="hlnas.model.kernels"):
        o, _ = gated_delta_rule(**inp, output_final_state=True, backend="fla")
    ok, reason = backends.fla_gated_backward_ok()
    print("fla gated backward usable:", ok, reason)
    do = torch.randn_like(o_ref)
    g_ref = torch.autograd.grad((o_ref * do).sum(), list(ref_inp.values()))
    g = torch.autograd.grad((o.float() * do).sum(), list(inp.values()))
    for n, a, b in zip(inp, g_ref, g):
        assert_close(f"fla d{n} T{T}", a, b, 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 40])
def test_fla_short_forward_on_cuda(T):
    """Grad-free short calls (decode) take fla's fused recurrent kernel."""
    B, H, K, V = 2, 4, 64, 64
    inp = make_inputs(B, T, H, K, V, dtype=torch.bfloat16, device="cuda")
    inp["g"] = inp["g"].float()
    inp["initial_state"] = 0.1 * torch.randn(B, H, K, V, device="cuda")
    with torch.no_grad():
        o_ref, s_ref = gated_delta_rule(**{n: t.float() for n, t in inp.items()}, output_final_state=True, backend="torch")
        o, s = gated_delta_rule(**inp, output_final_state=True, backend="fla")
    assert_close(f"fla o T{T}", o_ref, o, 1e-2)
    assert_close(f"fla state T{T}", s_ref, s, 1e-2)

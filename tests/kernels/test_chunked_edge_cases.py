"""Edge cases of the chunked PyTorch paths of hgrn (two-level scan with a hand-written backward)
and simple_gla: default chunk sizes, T around chunk boundaries, T = 1, with and without an
initial state, gradients of every input (initial state included), partial requires_grad,
non-contiguous inputs, gates of any strength and the output dtypes; all against the token loop."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.kernels.hgrn import chunk_hgrn_torch, naive_hgrn
from hlnas.model.kernels.simple_gla import chunk_simple_gla_torch, naive_simple_gla
from tests.helpers import assert_close, assert_runs_close
from tests.helpers import forward_and_grads as _run
from tests.kernels.inputs import hgrn_inputs
from tests.kernels.inputs import simple_gla_inputs as sgla_inputs


def _hgrn(B, T, D, with_h0, dtype=torch.float64, seed=0):
    inputs = hgrn_inputs(B, T, 1, D, D, dtype=dtype, seed=seed)
    if with_h0:
        gen = torch.Generator().manual_seed(seed + 1)
        inputs["initial_state"] = torch.randn(B, D, generator=gen).to(
            torch.float64 if dtype == torch.float64 else torch.float32
        )
    return inputs


def _compare(ref_fn, fn, inputs, const=(), tol=1e-6, **kw):
    o_ref, ht_ref, g_ref = _run(ref_fn, inputs, const)
    o, ht, g = _run(fn, inputs, const, **kw)
    assert set(g) == set(g_ref)
    assert_runs_close((o_ref, ht_ref, g_ref), (o, ht, g), tol, state="ht")


# T around the default chunk (~sqrt(T)) and around explicit chunk sizes
@pytest.mark.parametrize("T", [1, 2, 3, 15, 16, 17, 63, 64, 65, 255, 1000, 1024])
@pytest.mark.parametrize("with_h0", [False, True], ids=["", "h0"])
def test_hgrn_default_chunk(T, with_h0):
    _compare(naive_hgrn, chunk_hgrn_torch, _hgrn(2, T, 6, with_h0))


# odd and even chunk lengths: hgrn's per-chunk maps come from a pairwise tree that peels odd levels
T_AND_CHUNK = [(1, 1), (1, 32), (5, 2), (31, 32), (33, 32), (64, 32), (100, 7), (40, 40), (40, 100)]
T_AND_CHUNK += [(50, 3), (77, 11), (90, 13), (64, 6)]


@pytest.mark.parametrize("T,C", T_AND_CHUNK)
@pytest.mark.parametrize("with_h0", [False, True], ids=["", "h0"])
def test_hgrn_explicit_chunk(T, C, with_h0):
    _compare(naive_hgrn, chunk_hgrn_torch, _hgrn(3, T, 5, with_h0), chunk_size=C)


@pytest.mark.parametrize("const", [("x",), ("g",), ("initial_state",), ("x", "g"), ("g", "initial_state")])
def test_hgrn_partial_requires_grad(const):
    _compare(naive_hgrn, chunk_hgrn_torch, _hgrn(2, 50, 4, True), const=const, chunk_size=8)


def test_hgrn_gates_of_any_strength():
    # forget gates of exactly 0 (g = -inf), near 0 (g = -50: products underflow) and exactly 1 (g = 0)
    inputs = _hgrn(2, 97, 8, True)
    g = inputs["g"].clone()
    g[:, 10] = float("-inf")
    g[:, 40:60] = -50.0
    g[:, 70:] = 0.0
    inputs["g"] = g
    o_ref, ht_ref = naive_hgrn(**inputs, output_final_state=True)
    o, ht = chunk_hgrn_torch(**inputs, output_final_state=True)
    assert_close("o", o_ref, o, 1e-12)
    assert_close("ht", ht_ref, ht, 1e-12)
    inputs["g"] = g.clamp(min=-50.0)  # gradients: exp at -inf is fine, but the loop's grads need finite g
    _compare(naive_hgrn, chunk_hgrn_torch, inputs)


def test_hgrn_only_final_state_or_only_output_used():
    inputs = _hgrn(2, 70, 4, True)
    for use in ("o", "ht"):
        grads = []
        for fn in (naive_hgrn, chunk_hgrn_torch):
            leaves = {n: t.clone().requires_grad_() for n, t in inputs.items()}
            o, ht = fn(**leaves, output_final_state=True)
            (o.sum() if use == "o" else ht.square().sum()).backward()
            grads.append({n: t.grad for n, t in leaves.items()})
        for name in inputs:
            assert_close(f"{use}: d{name}", grads[0][name], grads[1][name], 1e-10)


def test_hgrn_non_contiguous_inputs_and_expanded_grad():
    base = _hgrn(2, 45, 6, True)
    # [B, D, T] storage seen as [B, T, D]: every input is a transposed view
    x = base["x"].transpose(1, 2).contiguous().transpose(1, 2)
    g = base["g"].transpose(1, 2).contiguous().transpose(1, 2)
    assert not x.is_contiguous()
    inputs = {"x": x, "g": g, "initial_state": base["initial_state"]}
    _compare(naive_hgrn, chunk_hgrn_torch, inputs, chunk_size=8)
    leaves = {n: t.clone().requires_grad_() for n, t in inputs.items()}
    chunk_hgrn_torch(**leaves)[0].sum().backward()  # .sum()'s gradient is an expanded (stride-0) tensor
    ref = {n: t.clone().requires_grad_() for n, t in inputs.items()}
    naive_hgrn(**ref)[0].sum().backward()
    for name in inputs:
        assert_close(f"d{name}", ref[name].grad, leaves[name].grad, 1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hgrn_low_precision_dtypes(dtype):
    inputs = _hgrn(2, 300, 8, True, dtype=dtype)
    o, ht = chunk_hgrn_torch(**inputs, output_final_state=True)
    assert o.dtype == dtype and ht.dtype == torch.float32
    ref = {n: t.double() for n, t in inputs.items()}
    o_ref, ht_ref = naive_hgrn(**ref, output_final_state=True)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert_close("o", o_ref, o, tol)
    assert_close("ht", ht_ref, ht, tol)


def test_hgrn_no_grad_and_empty():
    inputs = _hgrn(2, 40, 4, True)
    with torch.no_grad():
        o, ht = chunk_hgrn_torch(**inputs, output_final_state=True)
    o_ref, ht_ref = naive_hgrn(**inputs, output_final_state=True)
    assert_close("o", o_ref, o, 1e-12)
    assert_close("ht", ht_ref, ht, 1e-12)
    empty = {n: (t[:, :0] if n != "initial_state" else t) for n, t in inputs.items()}
    o, ht = chunk_hgrn_torch(**empty, output_final_state=True)
    assert o.shape == (2, 0, 4)
    assert torch.equal(ht, inputs["initial_state"])


# simple_gla: T around the default chunk, T = 1, with and without initial state, every decay kind
@pytest.mark.parametrize("T", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("decay", ["g", "g_gamma", "none"])
@pytest.mark.parametrize("with_h0", [False, True], ids=["", "h0"])
def test_simple_gla_default_chunk(T, decay, with_h0):
    B, H, K, V = 2, 2, 8, 4
    inputs = sgla_inputs(B, T, H, K, V, dtype=torch.float64, decay=decay)
    if with_h0:
        gen = torch.Generator().manual_seed(3)
        inputs["initial_state"] = torch.randn(B, H, K, V, generator=gen, dtype=torch.float64)
    _compare(naive_simple_gla, chunk_simple_gla_torch, inputs)


@pytest.mark.parametrize("scale", [None, 1.0, 0.0, -0.3])
def test_simple_gla_scale_values(scale):
    inputs = sgla_inputs(2, 41, 2, 8, 8, dtype=torch.float64)
    inputs["initial_state"] = torch.randn(2, 2, 8, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    o_ref, ht_ref, g_ref = _run(naive_simple_gla, inputs, scale=scale)
    o, ht, g = _run(chunk_simple_gla_torch, inputs, scale=scale, chunk_size=16)
    tol = 1e-6
    if scale == 0.0:  # the output is exactly zero: compare absolutely
        assert o.abs().max() == 0
    else:
        assert_close("o", o_ref, o, tol)
    assert_close("ht", ht_ref, ht, tol)
    for name in g_ref:
        if g_ref[name].abs().max() == 0:
            assert g[name].abs().max() == 0, name
        else:
            assert_close(f"d{name}", g_ref[name], g[name], tol)


def test_simple_gla_float32_dtypes():
    inputs = sgla_inputs(1, 200, 2, 16, 16, dtype=torch.float32)
    o, ht = chunk_simple_gla_torch(**inputs, output_final_state=True)
    assert o.dtype == torch.float32 and ht.dtype == torch.float32
    o_ref, ht_ref = naive_simple_gla(**{n: t.double() for n, t in inputs.items()}, output_final_state=True)
    assert_close("o", o_ref, o, 1e-5)
    assert_close("ht", ht_ref, ht, 1e-5)

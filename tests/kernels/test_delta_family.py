"""What the delta rule and the gated delta rule share, tested once over both: the chunked PyTorch path against the
token loop (float64: outputs, final state and every gradient), a decode (a prefix, then one token at a
time carrying the state) equals one parallel call, and low-precision inputs keep their dtype, hold a float32 state
and track the float64 reference."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.kernels.delta_rule import chunk_delta_rule_torch, delta_rule, naive_delta_rule
from hlnas.model.kernels.gated_delta_rule import chunk_gated_delta_rule_torch, gated_delta_rule, naive_gated_delta_rule
from tests.helpers import assert_close, assert_decode_matches_parallel, assert_runs_close, forward_and_grads
from tests.kernels.inputs import DELTA_SHAPES, delta_case, delta_rule_inputs, delta_shape_id, gated_delta_rule_inputs

#: op name -> (the op, its token-loop reference, its chunked PyTorch path, its inputs)
OPS = {"delta_rule": (delta_rule, naive_delta_rule, chunk_delta_rule_torch, delta_rule_inputs),
       "gated_delta_rule": (gated_delta_rule, naive_gated_delta_rule, chunk_gated_delta_rule_torch,
                            gated_delta_rule_inputs)}


@pytest.mark.parametrize("shape", DELTA_SHAPES, ids=delta_shape_id)
@pytest.mark.parametrize("name", OPS)
def test_chunk_matches_naive(name, shape):
    _, naive, chunk, make_inputs = OPS[name]
    B, T, H, K, V, C, h0 = shape
    inp = delta_case(make_inputs, B, T, H, K, V, h0)
    ref = forward_and_grads(naive, inp)
    out = forward_and_grads(chunk, inp, chunk_size=C)
    assert out[0].dtype == torch.float64 and out[1].dtype == torch.float64
    assert_runs_close(ref, out, 1e-6)


@pytest.mark.parametrize("shape", [(2, 50, 2, 16, 8, 16, True), (1, 70, 3, 8, 8, 64, False)], ids=delta_shape_id)
@pytest.mark.parametrize("name", OPS)
def test_decode_matches_parallel(name, shape):
    op, _, _, make_inputs = OPS[name]
    B, T, H, K, V, C, h0 = shape
    inp = make_inputs(B, T, H, K, V, dtype=torch.float64)
    state = 0.1 * torch.randn(B, H, K, V, dtype=torch.float64) if h0 else None
    assert_decode_matches_parallel(op, inp, state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", OPS)
def test_low_precision_dtypes(name, dtype):
    op, naive, _, make_inputs = OPS[name]
    inp = make_inputs(2, 90, 2, 16, 16, dtype=dtype)
    o, s = op(**inp, output_final_state=True, backend="torch")
    assert o.dtype == dtype and s.dtype == torch.float32
    o_ref, s_ref = naive(**{n: t.double() for n, t in inp.items()}, output_final_state=True)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert_close("o", o_ref, o, tol)
    assert_close("state", s_ref, s, tol)

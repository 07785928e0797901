"""KDA and RWKV-7, the two ops on the DPLR recurrence (hlnas.model.kernels.dplr): the chunked PyTorch path against
each op's token loop in float64 (outputs, final state and every gradient, to 1e-10), decode == one parallel call,
low-precision inputs, input checks, and the token loops pinned to fla's own references. (fla's kernels against the
PyTorch path on CUDA: tests/kernels/test_backends.py, GPU_ROUTES.)"""

from __future__ import annotations

import pytest
import torch

from hlnas.model.kernels.kda import chunk_kda_torch, kda, naive_kda
from hlnas.model.kernels.rwkv7 import chunk_rwkv7_torch, naive_rwkv7, rwkv7
from tests.helpers import assert_close, assert_decode_matches_parallel, assert_runs_close, forward_and_grads
from tests.kernels.inputs import DELTA_SHAPES, delta_shape_id, kda_inputs, rwkv7_inputs

#: op name -> (the op, its token loop, its chunked PyTorch path, its inputs)
OPS = {"kda": (kda, naive_kda, chunk_kda_torch, kda_inputs),
       "rwkv7": (rwkv7, naive_rwkv7, chunk_rwkv7_torch, rwkv7_inputs)}


def _case(make, B, T, H, K, V, h0, dtype=torch.float64, **kw):
    inp = make(B, T, H, K, V, dtype=dtype, **kw)
    if h0:
        inp["initial_state"] = 0.1 * torch.randn(B, H, K, V, dtype=dtype)
    return inp


@pytest.mark.parametrize("shape", DELTA_SHAPES, ids=delta_shape_id)
@pytest.mark.parametrize("name", OPS)
def test_chunk_matches_the_token_loop(name, shape):
    _, naive, chunk, make = OPS[name]
    B, T, H, K, V, C, h0 = shape
    inp = _case(make, B, T, H, K, V, h0)
    ref = forward_and_grads(naive, inp)
    out = forward_and_grads(chunk, inp, chunk_size=min(C, 16))
    assert out[0].dtype == torch.float64 and out[1].dtype == torch.float64
    assert_runs_close(ref, out, 1e-10, name=f"{name} ")


def test_kda_strong_decays_stay_exact():
    """Log-decays down to -20 a step per channel (KDA's gate at A = 16): every exponent of the chunked path is a
    difference c_s - c_j <= 0, so nothing overflows and the float64 result stays exact."""
    inp = _case(kda_inputs, 2, 90, 2, 8, 8, True, strong=True)
    assert inp["g"].min() < -15
    assert_runs_close(forward_and_grads(naive_kda, inp), forward_and_grads(chunk_kda_torch, inp), 1e-10)


def test_kda_with_one_decay_per_head_is_the_gated_delta_rule():
    from hlnas.model.kernels.gated_delta_rule import naive_gated_delta_rule

    inp = _case(kda_inputs, 1, 30, 2, 8, 4, True)
    g_head = inp["g"][..., 0]
    o, s = naive_kda(**{**inp, "g": g_head[..., None].expand_as(inp["g"])}, output_final_state=True)
    o_ref, s_ref = naive_gated_delta_rule(**{**inp, "g": g_head}, output_final_state=True)
    assert_close("o", o_ref, o, 1e-12)
    assert_close("state", s_ref, s, 1e-12)


@pytest.mark.parametrize("h0", [False, True], ids=["", "h0"])
@pytest.mark.parametrize("name", OPS)
def test_decode_matches_parallel(name, h0):
    op, _, _, make = OPS[name]
    inp = make(2, 45, 2, 8, 8, dtype=torch.float64)
    assert_decode_matches_parallel(op, inp, 0.1 * torch.randn(2, 2, 8, 8, dtype=torch.float64) if h0 else None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", OPS)
def test_low_precision_dtypes(name, dtype):
    op, naive, _, make = OPS[name]
    inp = make(2, 70, 2, 16, 16, dtype=dtype)
    o, s = op(**inp, output_final_state=True, backend="torch")
    assert o.dtype == dtype and s.dtype == torch.float32
    o_ref, s_ref = naive(**{n: t.double() for n, t in inp.items()}, output_final_state=True)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert_close("o", o_ref, o, tol)
    assert_close("state", s_ref, s, tol)


def test_shape_errors_quote_values():
    inp = kda_inputs(2, 10, 3, 8, 4)
    with pytest.raises(ValueError, match=r"kda expects g of q's shape \[B,T,H,K\]=\(2, 10, 3, 8\); got g=\(2, 10, 3\)"):
        kda(**{**inp, "g": inp["g"][..., 0]})
    with pytest.raises(ValueError, match=r"initial_state must be \[B,H,K,V\]=\(2, 3, 8, 4\)"):
        kda(**inp, initial_state=torch.zeros(2, 3, 4, 8))
    r = rwkv7_inputs(2, 10, 3, 8, 4)
    with pytest.raises(ValueError, match=r"rwkv7 expects v \[B,T,H,V\] with r's B,T,H"):
        rwkv7(**{**r, "v": r["v"][:, :5]})


@pytest.mark.slow
def test_token_loops_match_fla_references():
    """Pins the semantics (decay before the correction, the low-rank term on S_{t-1}, default scales, state layout) to
    fla's own PyTorch references, which compute in float32."""
    naive_kda_fla = pytest.importorskip("fla.ops.kda.naive", exc_type=ImportError).naive_recurrent_kda
    dplr = pytest.importorskip("fla.ops.generalized_delta_rule.dplr.naive", exc_type=ImportError).dplr_recurrence
    inp = _case(kda_inputs, 2, 40, 3, 16, 8, True)
    o, s = naive_kda(**inp, output_final_state=True)
    o_fla, s_fla = naive_kda_fla(**{n: t.float() for n, t in inp.items()}, output_final_state=True)
    assert_close("kda o vs fla", o_fla, o, 1e-5)
    assert_close("kda state vs fla", s_fla, s, 1e-5)
    r = _case(rwkv7_inputs, 2, 40, 3, 16, 8, True)
    o, s = naive_rwkv7(**r, output_final_state=True)
    K = r["r"].shape[-1]
    # fla's dplr reference is head-first, scales q by K^-0.5 itself and names the decay gk
    hf = {n: r[n].float().transpose(1, 2) for n in ("r", "k", "v", "a", "b", "w")}
    o_fla, s_fla = dplr(hf["r"] * K**0.5, hf["k"], hf["v"], hf["a"], hf["b"], hf["w"],
                        initial_state=r["initial_state"].float(), output_final_state=True)
    assert_close("rwkv7 o vs fla", o_fla.transpose(1, 2), o, 1e-5)
    assert_close("rwkv7 state vs fla", s_fla, s, 1e-5)

"""hgrn op: the chunked PyTorch path equals the token loop (outputs, final state, every gradient),
decoding token by token equals one parallel call, and on CUDA fla's kernels match the PyTorch path."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.kernels.hgrn import chunk_hgrn_torch, hgrn, naive_hgrn
from tests.helpers import assert_close, assert_runs_close
from tests.helpers import forward_and_grads as _run
from tests.kernels.inputs import hgrn_inputs as make_inputs

# (B, T, H, K, chunk_size, with initial state); D = H*K channels
CASES = [
    (2, 100, 3, 16, 64, False),  # T not a multiple of the chunk
    (2, 128, 2, 8, 64, True),  # exact multiple, with an initial state
    (1, 1, 4, 16, 64, True),  # one decode step
    (3, 37, 1, 5, 8, True),  # many small chunks, odd width
    (1, 64, 2, 4, 1, False),  # chunk of one token
]
IDS = [f"B{b}-T{t}-H{h}-K{k}-C{c}{'-h0' if h0 else ''}" for b, t, h, k, c, h0 in CASES]


def _inputs(B, T, H, K, with_h0, dtype=torch.float64, device="cpu"):
    inputs = make_inputs(B, T, H, K, K, dtype=dtype, device=device)
    if with_h0:
        gen = torch.Generator(device="cpu").manual_seed(1)
        h0_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        inputs["initial_state"] = torch.randn(B, H * K, generator=gen).to(device=device, dtype=h0_dtype)
    return inputs




@pytest.mark.parametrize("B,T,H,K,C,with_h0", CASES, ids=IDS)
def test_chunked_matches_naive(B, T, H, K, C, with_h0):
    inputs = _inputs(B, T, H, K, with_h0)
    o_ref, ht_ref, g_ref = _run(naive_hgrn, inputs)
    o, ht, g = _run(chunk_hgrn_torch, inputs, chunk_size=C)
    assert_runs_close((o_ref, ht_ref, g_ref), (o, ht, g), 1e-6, state="ht")


@pytest.mark.parametrize("C", [8, 64])
def test_strong_decay_stays_exact(C):
    # forget gates near 0 (a chunk's total log-decay far below exp's range): the scan multiplies gates step by step, never exponentiates their sums
    inputs = _inputs(2, 150, 2, 8, True)
    inputs["g"] = inputs["g"] * 100 - 20
    o_ref, ht_ref, g_ref = _run(naive_hgrn, inputs)
    o, ht, g = _run(chunk_hgrn_torch, inputs, chunk_size=C)
    assert_runs_close((o_ref, ht_ref, g_ref), (o, ht, g), 1e-6, state="ht")


@pytest.mark.parametrize("B,T,H,K,C,with_h0", CASES[:2], ids=IDS[:2])
def test_decode_matches_parallel(B, T, H, K, C, with_h0):
    inputs = _inputs(B, T, H, K, with_h0)
    o_full, ht_full = hgrn(**inputs, output_final_state=True, backend="torch")
    split = T // 3
    x, g = inputs["x"], inputs["g"]
    o, h = hgrn(x[:, :split], g[:, :split], initial_state=inputs.get("initial_state"), output_final_state=True)
    parts = [o]
    for t in range(split, T):
        o, h = hgrn(x[:, t : t + 1], g[:, t : t + 1], initial_state=h, output_final_state=True)
        parts.append(o)
    assert_close("decode o", o_full, torch.cat(parts, 1), 1e-6)
    assert_close("decode ht", ht_full, h, 1e-6)


def test_rejects_bad_shapes():
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"g=\(2, 5, 7\)"):
        hgrn(x, torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match=r"\[B, D\]=\[2, 8\]"):
        hgrn(x, torch.randn(2, 5, 8), initial_state=torch.randn(2, 7))


@pytest.mark.gpu
@pytest.mark.parametrize("T", [500, 1024])
@pytest.mark.parametrize("h0", ["none", "const", "grad"], ids=["", "h0", "h0grad"])
def test_fla_matches_torch(T, h0):
    # h0="const": chunk_hgrn with a cached state; h0="grad": fused_recurrent_hgrn (chunk_hgrn has no dh0)
    B, H, K = 2, 4, 64
    inputs = _inputs(B, T, H, K, h0 != "none", dtype=torch.bfloat16, device="cuda")
    const = ("initial_state",) if h0 == "const" else ()
    ref_inputs = {n: t.float() for n, t in inputs.items()}
    o_ref, ht_ref, g_ref = _run(hgrn, ref_inputs, const, backend="torch")
    o, ht, g = _run(hgrn, inputs, const, backend="fla")
    assert ht.dtype == torch.float32
    assert_runs_close((o_ref, ht_ref, g_ref), (o, ht, g), 1e-2, state="ht")
    with torch.no_grad():  # the decode kernel (fused_recurrent) on a few tokens
        short = {n: t[:, :16] if t.ndim == 3 else t for n, t in inputs.items()}
        o_short, ht_short = hgrn(**short, output_final_state=True, backend="fla")
        short = {n: t.float() for n, t in short.items()}
        o_short_ref, ht_short_ref = hgrn(**short, output_final_state=True, backend="torch")
    assert ht_short.dtype == torch.float32
    assert_close("o short", o_short_ref, o_short, 1e-2)
    assert_close("ht short", ht_short_ref, ht_short, 1e-2)

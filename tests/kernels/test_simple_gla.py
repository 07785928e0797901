"""simple_gla op: the chunked PyTorch path equals the token loop (outputs, final state, every
gradient, g_gamma's included), decoding token by token equals one parallel call, and on CUDA fla's
kernels match the PyTorch path."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.kernels.simple_gla import chunk_simple_gla_torch, naive_simple_gla, simple_gla
from tests.helpers import assert_close, assert_runs_close
from tests.helpers import forward_and_grads as _run
from tests.kernels.inputs import simple_gla_inputs as make_inputs

# (B, T, H, K, V, chunk_size, decay, with initial state, scale)
CASES = [
    (2, 100, 3, 16, 32, 64, "g", False, None),  # T not a multiple of the chunk
    (2, 128, 2, 8, 8, 32, "g", True, None),  # exact multiple, initial state
    (1, 1, 4, 16, 16, 64, "g", True, None),  # one decode step
    (2, 77, 4, 16, 32, 16, "g_gamma", True, None),  # RetNet: constant per-head decay
    (1, 50, 2, 8, 4, 16, "none", False, 0.5),  # plain linear attention, explicit scale
    (3, 33, 2, 4, 8, 8, "g", True, 1.0),  # Mamba-2's SSD: scale 1
]
IDS = [
    f"B{b}-T{t}-H{h}-K{k}-V{v}-C{c}-{d}{'-h0' if h0 else ''}{'' if s is None else f'-s{s}'}"
    for b, t, h, k, v, c, d, h0, s in CASES
]


def _inputs(B, T, H, K, V, decay, with_h0, dtype=torch.float64, device="cpu"):
    inputs = make_inputs(B, T, H, K, V, dtype=dtype, device=device, decay=decay)
    if with_h0:
        gen = torch.Generator(device="cpu").manual_seed(1)
        h0_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        inputs["initial_state"] = torch.randn(B, H, K, V, generator=gen).to(device=device, dtype=h0_dtype)
    return inputs




@pytest.mark.parametrize("B,T,H,K,V,C,decay,with_h0,scale", CASES, ids=IDS)
def test_chunked_matches_naive(B, T, H, K, V, C, decay, with_h0, scale):
    inputs = _inputs(B, T, H, K, V, decay, with_h0)
    o_ref, ht_ref, g_ref = _run(naive_simple_gla, inputs, scale=scale)
    o, ht, g = _run(chunk_simple_gla_torch, inputs, scale=scale, chunk_size=C)
    assert_runs_close((o_ref, ht_ref, g_ref), (o, ht, g), 1e-6, state="ht")


@pytest.mark.parametrize("decay", ["g", "g_gamma"])
def test_decode_matches_parallel(decay):
    B, T, H, K, V = 2, 90, 3, 16, 8
    inputs = _inputs(B, T, H, K, V, decay, True)
    o_full, ht_full = simple_gla(**inputs, output_final_state=True, backend="torch")
    split = 70  # a prefix longer than one chunk, then 20 single steps

    def step(a, b, h):
        kw = {n: t[:, a:b] for n, t in inputs.items() if n in ("q", "k", "v", "g")}
        if "g_gamma" in inputs:
            kw["g_gamma"] = inputs["g_gamma"]
        return simple_gla(**kw, initial_state=h, output_final_state=True)

    o, h = step(0, split, inputs["initial_state"])
    parts = [o]
    for t in range(split, T):
        o, h = step(t, t + 1, h)
        parts.append(o)
    assert_close("decode o", o_full, torch.cat(parts, 1), 1e-6)
    assert_close("decode ht", ht_full, h, 1e-6)


def test_rejects_bad_shapes():
    q, k, v = torch.randn(2, 5, 3, 4), torch.randn(2, 5, 3, 4), torch.randn(2, 5, 3, 6)
    with pytest.raises(ValueError, match=r"g must be \[B,T,H\]=\[2,5,3\]"):
        simple_gla(q, k, v, torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="not both"):
        simple_gla(q, k, v, torch.randn(2, 5, 3), g_gamma=torch.randn(3))
    with pytest.raises(ValueError, match=r"initial_state must be \[B,H,K,V\]=\[2,3,4,6\]"):
        simple_gla(q, k, v, initial_state=torch.randn(2, 3, 6, 4))


@pytest.mark.gpu
@pytest.mark.parametrize("T", [500, 1024])
@pytest.mark.parametrize("decay", ["g", "g_gamma"])
@pytest.mark.parametrize("h0", ["none", "grad"], ids=["", "h0"])
def test_fla_matches_torch(T, decay, h0):
    B, H, K, V = 2, 4, 64, 64
    inputs = _inputs(B, T, H, K, V, decay, h0 != "none", dtype=torch.bfloat16, device="cuda")
    ref_inputs = {n: t.float() for n, t in inputs.items()}
    o_ref, ht_ref, g_ref = _run(simple_gla, ref_inputs, backend="torch")
    o, ht, g = _run(simple_gla, inputs, backend="fla")
    assert ht.dtype == torch.float32
    assert_runs_close((o_ref, ht_ref, g_ref), (o, ht, g), 1e-2, state="ht")
    with torch.no_grad():  # the decode kernel (fused_recurrent) on a few tokens, constant g_gamma
        short = {n: t[:, :16] if n in ("q", "k", "v", "g") else t for n, t in inputs.items()}
        o_s, ht_s = simple_gla(**short, output_final_state=True, backend="fla")
        short = {n: t.float() for n, t in short.items()}
        o_s_ref, ht_s_ref = simple_gla(**short, output_final_state=True, backend="torch")
    assert ht_s.dtype == torch.float32
    assert_close("o short", o_s_ref, o_s, 1e-2)
    assert_close("ht short", ht_s_ref, ht_s, 1e-2)


def test_large_inputs_recompute_in_backward_with_the_same_values_and_gradients(monkeypatch):
    """Above hlnas.model.kernels.recompute.RECOMPUTE_ABOVE_BYTES of chunk-start states the PyTorch path keeps only its inputs for backward
    (Mamba-2 at paper-340m ran out of memory keeping every layer's temporaries): same outputs and gradients,
    and far fewer bytes saved for backward."""
    import torch

    from hlnas.model.kernels import recompute
    from hlnas.model.kernels import simple_gla as sg

    torch.manual_seed(0)
    B, T, H, K, V = 2, 256, 2, 16, 16
    leaves = [torch.randn(B, T, H, K, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    leaves.append(torch.randn(B, T, H, V, dtype=torch.float64, requires_grad=True))
    g = (-torch.rand(B, T, H, dtype=torch.float64)).requires_grad_()

    def run():
        saved = []

        def pack(t):
            saved.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            o, S = sg.simple_gla(*leaves, g, scale=1.0, output_final_state=True, backend="torch")
        (o.square().sum() + S.sum()).backward()
        grads = [t.grad.clone() for t in (*leaves, g)]
        for t in (*leaves, g):
            t.grad = None
        return o.detach(), S.detach(), grads, sum(saved)

    o1, S1, g1, kept = run()
    monkeypatch.setattr(recompute, "RECOMPUTE_ABOVE_BYTES", 0)
    o2, S2, g2, recomputed = run()
    assert torch.equal(o1, o2) and torch.equal(S1, S2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    inputs = sum(t.numel() * t.element_size() for t in (*leaves, g))
    assert recomputed <= inputs < kept / 3  # only the inputs stay; the temporaries were several times their size

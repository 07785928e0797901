"""hlnas.model.kernels.causal_conv1d: the short convolution's PyTorch paths against the token-by-token reference, its decode
state, which calls take fla's Triton kernel (spied on CPU), and on a GPU fla's kernel against the PyTorch path."""

from __future__ import annotations

import pytest
import torch

import hlnas.model.kernels.backends as backends
import hlnas.model.kernels.fla_calls as fla_calls
from hlnas.model.kernels.causal_conv1d import causal_conv1d, causal_conv1d_torch, naive_causal_conv1d
from hlnas.model.mixers.short_conv import ShortConvolution
from tests.kernels.inputs import make_inputs


def _inputs(B=2, T=11, C=6, width=4, dtype=torch.float64, device="cpu", seed=0, bias=True):
    x = make_inputs("causal_conv1d", B, T, 1, C, C, dtype=dtype, device=device, seed=seed, width=width)
    if not bias:
        x["bias"] = None
    return x


def _grads(fn, x: dict, **kw):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in x.items() if torch.is_tensor(v)}
    y, _ = fn(**{**x, **leaves}, **kw)
    do = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y)
    grads = torch.autograd.grad((y * do).sum(), list(leaves.values()))
    return y, dict(zip(leaves, grads))


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["f64_shifted", "bf16_conv1d"])
def test_torch_path_is_the_reference_with_its_gradients(width, activation, bias, dtype):
    """float64 on a CPU runs the shifted multiply-adds; bfloat16 runs conv1d (the CUDA path's form): both equal the
    token-by-token sum, outputs and gradients (bf16 within its rounding)."""
    x = {**_inputs(width=width, bias=bias, dtype=dtype), "activation": activation}
    y, g = _grads(causal_conv1d_torch, x)
    ref_in = {k: (v.double() if torch.is_tensor(v) else v) for k, v in x.items()}
    y_ref, g_ref = _grads(naive_causal_conv1d, ref_in)
    tol = dict(rtol=0, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(y.double(), y_ref, **tol)
    assert set(g) == set(g_ref)
    for k in g_ref:
        torch.testing.assert_close(g[k].double(), g_ref[k], **tol, msg=lambda m, k=k: f"d{k}: {m}")


def test_the_decode_state_carries_the_last_inputs_across_calls():
    """One call over 11 tokens == 5 tokens, then 1, then 5, each starting from the last call's state; the state is
    the last K - 1 inputs (zeros before the first token)."""
    x = {**_inputs(T=11), "activation": "silu"}
    full, s_full = causal_conv1d(**x, output_final_state=True)
    torch.testing.assert_close(s_full, x["x"][:, -3:], rtol=0, atol=0)
    parts, state = [], None
    for a, b in [(0, 5), (5, 6), (6, 11)]:
        y, state = causal_conv1d(**{**x, "x": x["x"][:, a:b]}, initial_state=state, output_final_state=True)
        parts.append(y)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-12)
    torch.testing.assert_close(state, s_full, rtol=0, atol=0)
    one, s1 = causal_conv1d(**{**x, "x": x["x"][:, :1]}, output_final_state=True)
    assert torch.equal(s1[:, :2], torch.zeros_like(s1[:, :2])) and torch.equal(s1[:, 2], x["x"][:, 0])


def test_short_convolution_runs_the_op_and_keeps_its_cache():
    m = ShortConvolution(6, 4, activation="silu", bias=True).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    ref, _ = naive_causal_conv1d(x, m.weight, m.bias, activation="silu")
    torch.testing.assert_close(m(x), ref, rtol=0, atol=1e-12)
    cache: dict = {}
    y = torch.cat([m(x[:, :4], cache, key="c"), m(x[:, 4:], cache, key="c")], 1)
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-12)
    assert set(cache) == {"c"} and cache["c"].shape == (2, 3, 6)


def test_bad_input_names_what_is_wrong():
    x = _inputs()
    with pytest.raises(ValueError, match=r"x \[B, T, C\] and weight \[C, 1, K\]"):
        causal_conv1d(x["x"], x["weight"][:5], x["bias"])
    with pytest.raises(ValueError, match="bias must be"):
        causal_conv1d(x["x"], x["weight"], x["bias"][:2])
    with pytest.raises(ValueError, match="activation 'gelu'; allowed: None, 'silu'"):
        causal_conv1d(**{**x, "activation": "gelu"})
    with pytest.raises(ValueError, match=r"initial_state must be \[B, K-1, C\]=\[2, 3, 6\]"):
        causal_conv1d(**x, initial_state=torch.zeros(2, 4, 6, dtype=torch.float64))


# -- which calls take fla's kernel (spied: fla's Triton kernels need CUDA) ----------------------------------------------
@pytest.fixture
def fla_spy(monkeypatch):
    """Every call resolves to fla as on a GPU machine; fla's kernel replaced by the PyTorch path, its calls recorded."""
    calls: list = []
    monkeypatch.setattr(backends, "resolve_backend", lambda *a, **k: "fla")

    def fake(x, weight, bias, activation):
        calls.append((tuple(weight.shape), weight.dtype, None if bias is None else bias.dtype, activation))
        return causal_conv1d_torch(x, weight, bias, activation=activation)[0]

    monkeypatch.setattr(fla_calls, "fla_causal_conv1d", fake)
    return calls


def test_training_calls_take_fla_and_decode_and_compiled_calls_keep_pytorch(fla_spy, monkeypatch):
    x = {**_inputs(dtype=torch.float32), "activation": "silu"}
    y, s = causal_conv1d(**x)
    assert s is None and fla_spy == [((6, 1, 4), torch.float32, torch.float32, "silu")]
    torch.testing.assert_close(y, causal_conv1d_torch(**x)[0])
    causal_conv1d(**x, output_final_state=True)  # a decode cache: the PyTorch path
    causal_conv1d(**x, initial_state=torch.zeros(2, 3, 6))
    causal_conv1d(**{**x, **_inputs(dtype=torch.float32, width=8)})  # wider than fla's layers use
    causal_conv1d(**{**x, **_inputs(dtype=torch.float64)})  # float64: fla's kernels take 16/32-bit floats
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    causal_conv1d(**x)  # under torch.compile fla's kernel would break the graph: the PyTorch path
    assert len(fla_spy) == 1


def _traced_ops(fn, *args) -> tuple[object, set[str]]:
    """``fn(*args)`` under torch.compile with a backend that keeps dynamo's graph as traced: (result, its op names)."""
    ops: set[str] = set()

    def keep(gm, _):
        ops.update(str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method"))
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(fn, backend=keep, fullgraph=True)(*args), ops


@pytest.mark.parametrize("shifted", [True, False], ids=["shifted_sum", "conv1d"])
def test_compiled_calls_take_the_shifted_multiply_adds_that_inductor_fuses(shifted, monkeypatch):
    """Under torch.compile the conv is the K shifted multiply-adds (inductor calls aten's depthwise conv as an extern
    kernel and fuses nothing into it); equal to the reference, gradients too. Off, conv1d is traced (bfloat16: the
    CUDA path's form, where a CPU float32 call would take the one-node multiply-adds)."""
    import hlnas.model.kernels.causal_conv1d as op

    monkeypatch.setattr(op, "SHIFTED_SUM_UNDER_COMPILE", shifted)
    x = _inputs(dtype=torch.bfloat16, bias=True)
    leaves = [x["x"].clone().requires_grad_(), x["weight"].clone().requires_grad_(), x["bias"].clone().requires_grad_()]
    y, ops = _traced_ops(lambda a, w, b: causal_conv1d(a, w, b, activation="silu")[0], *leaves)
    assert any("conv1d" in o for o in ops) != shifted, ops
    y_ref, g_ref = _grads(naive_causal_conv1d, {**_inputs(bias=True), "activation": "silu"})
    torch.testing.assert_close(y.double(), y_ref, rtol=2e-2, atol=2e-2)
    do = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y)
    for k, g in zip(("x", "weight", "bias"), torch.autograd.grad((y * do).sum(), leaves)):
        torch.testing.assert_close(g.double(), g_ref[k], rtol=2e-2, atol=2e-2, msg=lambda m, k=k: f"d{k}: {m}")


def test_short_convolution_casts_its_weights_to_the_activations_dtype_for_fla(fla_spy):
    m = ShortConvolution(6, 4, activation=None, bias=True)  # float32 parameters, bf16 activations (autocast's)
    m(torch.randn(2, 5, 6).bfloat16())
    assert fla_spy == [((6, 1, 4), torch.bfloat16, torch.bfloat16, None)]
    m(torch.randn(2, 5, 6).bfloat16(), {}, key="conv")  # with a cache: PyTorch
    assert len(fla_spy) == 1


# -- GPU: fla's Triton kernel against the PyTorch path ------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 37, 1024])
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "qkv_view"])
def test_fla_matches_torch(T, activation, width, strided):
    """bf16 on fla's kernel against the float32 PyTorch path: output and the gradients of x, weight and bias. The
    strided case is a q of one fused q/k/v projection ([B, T, 3C] sliced), as the mixers hand it over."""
    B, C = 2, 192
    inp = _inputs(B=B, T=T, C=C, width=width, dtype=torch.bfloat16, device="cuda")
    gen = torch.Generator().manual_seed(5)
    # x as the mixers hand it over: a slice of a wider projection output, read strided (or a contiguous copy)
    base = torch.randn(B, T, 3 * C if strided else C, generator=gen).bfloat16().cuda()
    do = torch.randn(B, T, C, generator=gen).bfloat16().cuda()

    def run(dtype, backend):
        leaves = [base.to(dtype).requires_grad_(), inp["weight"].to(dtype).requires_grad_(),
                  inp["bias"].to(dtype).requires_grad_()]
        xv = leaves[0][..., :C]
        assert xv.is_contiguous() != strided
        if backend == "fla":
            assert backends.route("causal_conv1d", None, x=xv, weight=leaves[1]) == "fla"
        y, _ = causal_conv1d(xv, leaves[1], leaves[2], activation=activation, backend=backend)
        grads = torch.autograd.grad((y * do.to(dtype)).sum(), leaves)
        return [y.float(), *(g.float() for g in grads)]

    got, ref = run(torch.bfloat16, "fla"), run(torch.float32, "torch")
    for name, r, o in zip(("y", "dx", "dweight", "dbias"), ref, got):
        scale = r.abs().max().clamp_min(1.0)  # dweight and dbias sum over B*T positions: relative to their size
        torch.testing.assert_close(o / scale, r / scale, rtol=0, atol=2e-2, msg=lambda m, n=name: f"{n}: {m}")

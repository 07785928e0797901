"""hlnas.model.kernels.l2norm: the delta rules' q/k normalisation. The PyTorch path against the float64 formula, which
calls take fla's Triton kernel (spied on CPU), the mixers' use of the op, and on a GPU fla's kernel against the
PyTorch path."""

from __future__ import annotations

import pytest
import torch

import hlnas.model.kernels.backends as backends
import hlnas.model.kernels.fla_calls as fla_calls
from hlnas.model.kernels.l2norm import l2norm, l2norm_torch, naive_l2norm
from tests.kernels.inputs import make_inputs


def _x(dtype=torch.float64, device="cpu", shape=(2, 9, 3, 16)):
    return make_inputs("l2norm", *shape, 0, dtype=dtype, device=device)["x"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_torch_path_is_the_formula_with_its_gradient(dtype):
    x = _x(dtype).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    y, y_ref = l2norm_torch(x), naive_l2norm(x64)
    assert y.dtype == dtype
    tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(y.double(), y_ref, rtol=0, atol=tol)
    torch.testing.assert_close(y.double().norm(dim=-1), torch.ones(y.shape[:-1], dtype=torch.float64), rtol=0,
                               atol=max(tol, 1e-6) * 4)
    do = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (g,) = torch.autograd.grad((y.double() * do).sum(), x)
    (g_ref,) = torch.autograd.grad((y_ref * do).sum(), x64)
    torch.testing.assert_close(g.double(), g_ref, rtol=0, atol=tol * 10)


def test_a_zero_vector_stays_finite():
    y = l2norm(torch.zeros(2, 4, dtype=torch.float64))
    assert torch.equal(y, torch.zeros(2, 4, dtype=torch.float64))


def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"l2norm expects x \[\.\.\., D\] with D >= 1; got shape \(3, 0\)"):
        l2norm(torch.zeros(3, 0))


@pytest.fixture
def fla_spy(monkeypatch):
    """Every call resolves to fla as on a GPU machine; fla's kernel replaced by the PyTorch path, its calls recorded."""
    calls: list = []
    monkeypatch.setattr(backends, "resolve_backend", lambda *a, **k: "fla")

    def fake(x, eps):
        calls.append((tuple(x.shape), x.dtype, eps))
        return l2norm_torch(x, eps)

    monkeypatch.setattr(fla_calls, "fla_l2norm", fake)
    return calls


def test_float32_and_bf16_calls_take_fla_and_float64_and_compiled_calls_keep_pytorch(fla_spy, monkeypatch):
    l2norm(_x(torch.float32))
    l2norm(_x(torch.bfloat16), eps=1e-5)
    assert fla_spy == [((2, 9, 3, 16), torch.float32, 1e-6), ((2, 9, 3, 16), torch.bfloat16, 1e-5)]
    l2norm(_x(torch.float64))  # float64: fla's kernels take 16/32-bit floats
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    l2norm(_x(torch.float32))  # under torch.compile fla's kernel would break the graph: the PyTorch path
    assert len(fla_spy) == 2


@pytest.mark.parametrize("mixer", ["deltanet", "gated_deltanet"])
def test_the_delta_rule_mixers_normalise_q_and_k_through_the_op(mixer, fla_spy, monkeypatch):
    """Both mixers hand q and k (each [B, T, H, head_dim]) to the op: on a GPU machine they take fla's kernel."""
    import hlnas.model.kernels.delta_rule as dr
    import hlnas.model.kernels.gated_delta_rule as gdr
    from hlnas.model.config import ModelConfig
    from hlnas.model.layout import Layout
    from hlnas.model.build import build_model

    # the recurrence itself stays on its PyTorch path here (no fla on this machine): only the norm is spied
    monkeypatch.setattr(dr.backends, "route", lambda op, *a, **k: "fla" if op == "l2norm" else "torch")
    assert gdr.backends is dr.backends
    cfg = ModelConfig(d_model=64, n_layers=1, vocab_size=32, n_heads=2)
    build_model(Layout.parse("D" if mixer == "deltanet" else "Z"), cfg)(torch.randint(0, 32, (2, 12)))
    assert len(fla_spy) == 2  # q, then k
    for shape, dtype, eps in fla_spy:
        assert shape[:2] == (2, 12) and len(shape) == 4 and dtype == torch.float32 and eps == 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 37, 4, 32), (8, 1024, 8, 128)], ids=["small", "paper"])
def test_fla_matches_torch(dtype, shape):
    """fla's kernel against the float32 PyTorch path: output and gradient (bf16 within its rounding: fla's backward
    reads the bf16 output)."""
    x = _x(dtype, "cuda", shape)
    do = torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(dtype).cuda()

    def run(d, backend):
        leaf = x.detach().to(d).requires_grad_()
        if backend == "fla":
            assert backends.route("l2norm", None, x=leaf) == "fla"
        y = l2norm(leaf, backend=backend)
        (g,) = torch.autograd.grad((y * do.to(d)).sum(), leaf)
        return y.float(), g.float()

    (y, g), (y_ref, g_ref) = run(dtype, "fla"), run(torch.float32, "torch")
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y, y_ref, rtol=0, atol=tol)
    scale = g_ref.abs().max()
    torch.testing.assert_close(g / scale, g_ref / scale, rtol=0, atol=tol)

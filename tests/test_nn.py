"""hlnas.model.nn building blocks against their reference form."""

import pytest
import torch
import torch.nn.functional as F

from hlnas.model.mixers.short_conv import ShortConvolution
from tests.helpers import captured_replay


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_short_convolution_cpu_equals_conv1d(dtype, bias, activation):
    """The CPU path (shifted multiply-adds) is the causal depthwise conv1d: outputs and gradients, and the decode
    cache carries the window across calls."""
    torch.manual_seed(0)
    m = ShortConvolution(24, 4, activation=activation, bias=bias).to(dtype)
    if bias:
        torch.nn.init.normal_(m.bias)
    x = torch.randn(3, 11, 24, dtype=dtype, requires_grad=True)
    y = m(x)
    xx = torch.cat([x.new_zeros(3, 3, 24), x], 1)
    ref = F.conv1d(xx.transpose(1, 2), m.weight, m.bias, groups=24).transpose(1, 2)
    ref = F.silu(ref) if activation else ref
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y, ref, **tol)
    g = torch.randn_like(y)
    params = [x, m.weight] + ([m.bias] if bias else [])
    for a, b in zip(torch.autograd.grad(y, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, b, **tol)
    cache: dict = {}
    with torch.no_grad():
        steps = torch.cat([m(x[:, t : t + 1], cache) for t in range(x.shape[1])], 1)
    torch.testing.assert_close(steps, ref.detach(), **tol)


def test_shifted_conv_backward_is_its_forward_transposed():
    """The CPU conv's hand-written backward (hlnas.model.kernels.causal_conv1d._ShiftedConv) against autograd's numerical gradient, for the
    padded input (the past window included) and the taps."""
    from hlnas.model.kernels.causal_conv1d import _ShiftedConv

    torch.manual_seed(0)
    xx = torch.randn(2, 9, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 1, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_ShiftedConv.apply, (xx, w))


# -- the fused forms of the LM's elementwise and projection work (issue #22 point 2) ----------------------------
@pytest.fixture
def fused_on_cpu(monkeypatch):
    import hlnas.model.nn

    monkeypatch.setattr(hlnas.model.nn, "FUSED_ON_CPU", True)


def _grads(out, *tensors):
    return torch.autograd.grad(out.square().sum(), tensors)


@pytest.mark.parametrize("act", [None, "swish", "sigmoid"])
def test_rms_norm_fused_equals_the_composed_float32_form(act, fused_on_cpu):
    """RMSNorm's fused path (F.rms_norm) gives the composed form's values and gradients (x, weight, gate)."""
    from hlnas.model.nn import GatedRMSNorm, RMSNorm

    torch.manual_seed(0)
    norm = RMSNorm(24, eps=1e-5) if act is None else GatedRMSNorm(24, eps=1e-5, act=act)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 7, 24, requires_grad=True)
    g = torch.randn(3, 7, 24, requires_grad=True)
    y = norm(x) if act is None else norm(x, g)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    if act is not None:
        ref = ref * (F.silu(g) if act == "swish" else torch.sigmoid(g))
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(_grads(y, x, norm.weight, g) if act else _grads(y, x, norm.weight),
                    _grads(ref, x, norm.weight, g) if act else _grads(ref, x, norm.weight)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_rms_norm_keeps_a_bf16_input_bf16(fused_on_cpu):
    from hlnas.model.nn import RMSNorm

    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    assert RMSNorm(16)(x).dtype == torch.bfloat16


def test_fused_linear_equals_separate_projections(fused_on_cpu):
    """One matmul over stacked weights: the same outputs and the same gradients for x and each weight."""
    from torch import nn

    from hlnas.model.nn import fused_linear

    torch.manual_seed(0)
    projs = [nn.Linear(16, n, bias=False) for n in (16, 8, 8)]
    x = torch.randn(2, 5, 16, requires_grad=True)
    fused = fused_linear(x, *projs)
    plain = tuple(p(x) for p in projs)
    assert [t.shape for t in fused] == [t.shape for t in plain]
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a, b)
    loss = lambda outs: sum((o * (i + 1)).square().sum() for i, o in enumerate(outs))  # noqa: E731
    wanted = (x, *(p.weight for p in projs))
    for a, b in zip(torch.autograd.grad(loss(fused), wanted), torch.autograd.grad(loss(plain), wanted)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_fused_linear_leaves_other_projections_as_they_are(fused_on_cpu):
    """A projection with a bias or of another type is called as it is."""
    from torch import nn

    from hlnas.model.nn import fused_linear

    calls = []

    class Spy(nn.Linear):
        def forward(self, x):
            calls.append(self)
            return super().forward(x)

    x = torch.randn(2, 3, 4)
    spied = [Spy(4, 4, bias=False), nn.Linear(4, 2, bias=False)]
    fused_linear(x, *spied)
    assert calls == [spied[0]]
    biased = [nn.Linear(4, 4), nn.Linear(4, 2, bias=False)]
    out = fused_linear(x, *biased)
    torch.testing.assert_close(out[0], biased[0](x))


@pytest.mark.parametrize("head_dim", [8, 9])
def test_rotary_split_is_bit_for_bit_the_sliced_form(head_dim):
    from hlnas.model.nn import _cos_sin, _rotate

    torch.manual_seed(0)
    x = torch.randn(2, 6, 3, head_dim, requires_grad=True)
    cos, sin = _cos_sin(x, 2, 10000.0, table=False)
    y = _rotate(x, cos, sin)
    h = head_dim // 2
    x1, x2 = x[..., :h], x[..., h:2 * h]
    ref = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * h:]], dim=-1)
    assert torch.equal(y, ref)
    assert torch.equal(*(torch.autograd.grad((t * torch.arange(head_dim)).sum(), x)[0] for t in (y, ref)))


def test_on_the_cpu_the_composed_forms_run_by_default():
    """Without FUSED_ON_CPU a CPU tensor takes the composed forms: each projection called, the norm not fused."""
    from unittest import mock

    from torch import nn

    from hlnas.model.nn import RMSNorm, fused_linear

    projs = [nn.Linear(4, 4, bias=False), nn.Linear(4, 2, bias=False)]
    with mock.patch.object(nn.Linear, "forward", autospec=True, side_effect=lambda self, x: x[..., :self.out_features]) as fwd:
        fused_linear(torch.randn(2, 4), *projs)
    assert fwd.call_count == 2
    with mock.patch.object(F, "rms_norm", side_effect=AssertionError("fused on the CPU")):
        RMSNorm(4)(torch.randn(2, 4))


# -- the lean gated norm: inputs and one rstd kept for backward, the rest recomputed (issue #22 point 3) ----------
@pytest.mark.parametrize("act, gate_first, groups", [("swish", False, 1), ("sigmoid", False, 1), ("swish", True, 1),
                                                     ("swish", True, 3)])
def test_lean_gated_norm_gradients_are_exact_in_float64(act, gate_first, groups):
    from hlnas.model.nn import lean_gated_norm

    torch.manual_seed(0)
    x, g = (torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.empty(12, dtype=torch.float64).uniform_(0.5, 1.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda *t: lean_gated_norm(*t, 1e-5, act, gate_first, groups), (x, g, w))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_mamba2_grouped_norm_lean_equals_composed(dtype, tol, monkeypatch):
    """Mamba-2's RMSNorm(y * silu(z)) over groups: the lean form (CUDA, or FUSED_ON_CPU) gives the composed form's
    values and gradients, in float32 and within bf16 rounding for bf16 inputs."""
    import hlnas.model.nn
    from hlnas.model.mixers.mamba2 import _GroupedGatedRMSNorm

    torch.manual_seed(0)
    norm = _GroupedGatedRMSNorm(24, groups=2, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    y, z = (torch.randn(3, 7, 24).to(dtype).requires_grad_() for _ in range(2))
    runs = []
    for fused in (False, True):
        monkeypatch.setattr(hlnas.model.nn, "FUSED_ON_CPU", fused)
        out = norm(y, z)
        runs.append((out, *_grads(out.float(), y, z, norm.weight)))
    assert runs[0][0].dtype == runs[1][0].dtype == dtype
    for a, b in zip(*runs):
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


def _saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``fn()`` runs (parameters included)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def test_lean_gated_norm_keeps_only_its_bf16_inputs_for_backward(monkeypatch):
    """The composed gated norm saved float32 copies of bf16 activations (2 bytes a value became 4, several times);
    the lean one keeps x and the gate as they came, the weight and one float32 rstd per row."""
    import hlnas.model.nn
    from hlnas.model.nn import GatedRMSNorm

    norm = GatedRMSNorm(256)
    x, g = (torch.randn(4, 64, 256, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    inputs = 2 * x.numel() * 2 + 256 * 4 + 4 * 64 * 4  # x and gate in bf16, the weight, rstd [4, 64, 1]
    monkeypatch.setattr(hlnas.model.nn, "FUSED_ON_CPU", True)
    assert _saved_bytes(lambda: norm(x, g)) == inputs
    monkeypatch.setattr(hlnas.model.nn, "FUSED_ON_CPU", False)
    assert _saved_bytes(lambda: norm(x, g)) > 3 * inputs


@pytest.mark.gpu
@pytest.mark.parametrize("gate_first", [False, True])
def test_lean_gated_norm_on_cuda_compiled_and_in_a_graph_equals_eager(gate_first):
    """On CUDA the gated norms take the lean form inside compiled blocks and captured steps: torch.compile's trace of
    its autograd.Function and a CUDA graph replay give eager's values and gradients."""
    from hlnas.model.nn import lean_gated_norm

    torch.manual_seed(0)
    x, g = (torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    w = torch.rand(256, device="cuda", requires_grad=True)

    def run(fn, x, g, w):
        out = fn(x, g, w, 1e-5, "swish", gate_first, 2 if gate_first else 1)
        return (out, *torch.autograd.grad(out.float().square().sum(), (x, g, w)))

    want = run(lean_gated_norm, x, g, w)
    for a, b in zip(run(torch.compile(lean_gated_norm, fullgraph=True), x, g, w), want):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    captured = captured_replay(lambda *t: run(lean_gated_norm, *t), x, g, w)
    for a, b in zip(captured, want):
        torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=0)

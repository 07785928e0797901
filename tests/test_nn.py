"""hlnas.nn building blocks against their reference form."""

import pytest
import torch
import torch.nn.functional as F

from hlnas.nn import ShortConvolution


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
    """The CPU conv's hand-written backward (hlnas.nn._ShiftedConv) against autograd's numerical gradient, for the
    padded input (the past window included) and the taps."""
    from hlnas.nn import _ShiftedConv

    torch.manual_seed(0)
    xx = torch.randn(2, 9, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 1, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_ShiftedConv.apply, (xx, w))

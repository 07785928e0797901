"""hlnas.model.kernels.recompute on the delta rules' PyTorch path (GatedDeltaNet at paper-340m ran out of the H100's memory
on it, keeping every layer's chunk temporaries): above the threshold a call keeps only its inputs for backward, with
the same outputs and gradients."""

import pytest
import torch
import torch.nn.functional as F

from hlnas.model.kernels import recompute
from hlnas.model.kernels.delta_rule import delta_rule
from hlnas.model.kernels.gated_delta_rule import gated_delta_rule


def _run(op, leaves):
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    q, k, v, beta, g = leaves
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        kn = F.normalize(k, dim=-1)
        n_before = len(saved)
        if op == "delta_rule":
            o, S = delta_rule(q, kn, v, beta, output_final_state=True, backend="torch")
        else:
            o, S = gated_delta_rule(q, kn, v, g, beta, output_final_state=True, backend="torch")
        op_saved = sum(saved[n_before:])
    (o.square().sum() + S.sum()).backward()
    grads = [t.grad.clone() for t in leaves if t.grad is not None]
    for t in leaves:
        t.grad = None
    return o.detach(), S.detach(), grads, op_saved


@pytest.mark.parametrize("op", ["delta_rule", "gated_delta_rule"])
def test_delta_rules_recompute_above_the_threshold_with_the_same_values_and_gradients(op, monkeypatch):
    torch.manual_seed(0)
    B, T, H, K, V = 2, 128, 2, 16, 16
    f64 = dict(dtype=torch.float64)
    leaves = [torch.randn(B, T, H, K, **f64), torch.randn(B, T, H, K, **f64), torch.randn(B, T, H, V, **f64),
              torch.rand(B, T, H, **f64), -torch.rand(B, T, H, **f64) * 0.1]
    for t in leaves:
        t.requires_grad_()
    o1, S1, g1, kept = _run(op, leaves)
    monkeypatch.setattr(recompute, "RECOMPUTE_ABOVE_BYTES", 0)
    o2, S2, g2, recomputed = _run(op, leaves)
    assert torch.equal(o1, o2) and torch.equal(S1, S2)
    assert len(g1) == len(g2) >= 4
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    inputs = sum(t.numel() * t.element_size() for t in leaves)
    assert recomputed <= inputs < kept / 3  # only the inputs stay; the temporaries were several times their size


def test_no_recompute_without_a_gradient_or_below_the_threshold():
    calls = []
    fn = lambda x: calls.append(torch.is_grad_enabled()) or x * 2  # noqa: E731
    q = v = torch.zeros(1, 64, 1, 4)
    x = torch.ones(3, requires_grad=True)
    assert recompute.chunk_state_bytes(q, v) == 1 * 1 * 1 * 4 * 4 * 4
    out = recompute.maybe_recompute(fn, x, qv=(q, v))
    assert calls == [True] and out.grad_fn is not None and "Checkpoint" not in type(out.grad_fn).__name__

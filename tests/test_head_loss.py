"""The LM head's cross-entropy a chunk at a time (hlnas.training.head_loss) against the composed form."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import hlnas.model.nn
import hlnas.training.head_loss as head_loss
from hlnas.training.head_loss import linear_cross_entropy
from tests.helpers import captured_replay


def _case(dtype=torch.float64):
    torch.manual_seed(0)
    h = torch.randn(3, 7, 16, dtype=dtype, requires_grad=True)
    w = torch.randn(50, 16, dtype=dtype, requires_grad=True)
    t = torch.randint(0, 50, (3, 7))
    t[0, :3] = -100  # input-only tokens: not scored
    return h, w, t


@pytest.mark.parametrize("chunk", [1, 4, 5, 21, 100])
def test_values_and_gradients_equal_cross_entropy_of_the_whole_logits_in_float64(chunk):
    h, w, t = _case()
    got = linear_cross_entropy(h, w, t, chunk)
    want = F.cross_entropy((h @ w.t()).flatten(0, 1), t.flatten(), ignore_index=-100)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got * 1.7, (h, w)), torch.autograd.grad(want * 1.7, (h, w))):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)  # the incoming gradient scales both


def test_under_bf16_autocast_it_matches_the_lm_heads_loss_within_bf16_rounding():
    h, w, t = _case(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_cross_entropy(h, w, t, 8)
        want = F.cross_entropy(F.linear(h, w).float().flatten(0, 1), t.flatten(), ignore_index=-100)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    for a, b in zip(torch.autograd.grad(got, (h, w)), torch.autograd.grad(want, (h, w))):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)


def test_under_bf16_autocast_a_confident_targets_gradient_keeps_its_precision():
    """Where the target's probability is near 1 its logit gradient p - 1 is small: taken after rounding p to bf16 it
    would cancel (0.998 is 2^-8 from its neighbours). The gradients stay within bf16 rounding of float64's."""
    torch.manual_seed(0)
    h = torch.randn(64, 16)
    w = torch.randn(40, 16) * 0.1
    t = torch.randint(0, 40, (64,))
    w[t[0]] += 4 * h[0] / h[0].norm()  # token 0's target logit leads by about 4 * |h0|
    h.requires_grad_(), w.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = torch.autograd.grad(linear_cross_entropy(h, w, t, 16), (h, w))
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = torch.autograd.grad(F.cross_entropy(h64 @ w64.t(), t), (h64, w64))
    probs = torch.softmax(h64 @ w64.t(), -1)
    assert probs[0, t[0]] > 0.99  # the case is what it says
    for a, b in zip(got, want):
        assert ((a.double() - b).norm() / b.norm()).item() < 2e-2
    assert ((got[0][0].double() - want[0][0]).norm() / want[0][0].norm()).item() < 5e-2  # the confident row itself


def test_no_scored_token_gives_zero_loss_and_zero_gradients():
    h, w, t = _case()
    loss = linear_cross_entropy(h, w, torch.full_like(t, -100))
    assert loss.item() == 0 and all(g.abs().max() == 0 for g in torch.autograd.grad(loss, (h, w)))


def test_the_step_trains_on_it_where_the_fused_forms_run_and_learns_the_same(monkeypatch):
    """hlnas.lm.trainer's step takes the chunked loss where the fused forms run and the composed loss elsewhere; on a tiny
    model the two give the same loss curve within float32 rounding."""
    from hlnas.model.config import preset
    from hlnas.data.sources import DataConfig
    from hlnas.model.layout import build_layout
    from hlnas.lm.trainer import TrainConfig, train

    monkeypatch.setattr(hlnas.model.nn, "FUSED_ON_CPU", True)
    calls = []
    real = head_loss.linear_cross_entropy
    monkeypatch.setattr(head_loss, "linear_cross_entropy", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = (build_layout("gla", "3:1", 6), preset("proxy-tiny"),
            TrainConfig(tokens=6 * 4 * 64, batch_size=4, seq_len=64, log_every=1, val_batches=2, lr=3e-3),
            DataConfig(val_docs=8))
    chunked = train(*args, progress=False)
    assert len(calls) == 6
    monkeypatch.setattr(head_loss, "CHUNKED_HEAD_LOSS", False)
    composed = train(*args, progress=False)
    assert len(calls) == 6  # not called again
    assert chunked.status == composed.status == "ok" and len(chunked.losses) == 6
    for (s1, a), (s2, b) in zip(chunked.losses, composed.losses):
        assert s1 == s2 and a == pytest.approx(b, rel=1e-4)
    assert chunked.val_loss == pytest.approx(composed.val_loss, rel=1e-4)


def test_on_the_cpu_default_the_step_keeps_the_composed_loss():
    model = torch.nn.Module()
    model.lm_head = torch.nn.Linear(8, 11, bias=False)
    composed = object()
    assert head_loss.lm_step_loss(model, torch.device("cpu"), composed) == (composed, {})


@pytest.mark.gpu
def test_on_cuda_under_autocast_and_in_a_captured_graph_it_matches_the_composed_loss():
    torch.manual_seed(0)
    h = torch.randn(4096, 256, device="cuda", requires_grad=True)
    w = (torch.randn(8000, 256, device="cuda") * 0.05).requires_grad_()
    t = torch.randint(0, 8000, (4096,), device="cuda")

    def both(h=h, w=w):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            got = linear_cross_entropy(h, w, t, 1000)
            want = F.cross_entropy(F.linear(h, w).float(), t)
        return (got, want, *torch.autograd.grad(got, (h, w)), *torch.autograd.grad(want, (h, w)))

    got, want, gh, gw, wh, ww = both()
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(gh, wh, rtol=5e-2, atol=1e-4)
    torch.testing.assert_close(gw, ww, rtol=5e-2, atol=1e-4)
    captured = captured_replay(both, h, w)
    torch.testing.assert_close(captured[0], got, rtol=0, atol=0)

"""hlnas's Transformer runs the same work as a plain-PyTorch one (issue #22 point 2).

On the H100 (experiments/bench/paper_scale_h100_2026-12-05.md) hlnas's paper-340m Transformer ran at 0.78x the plain
one's tokens/s, and its profile put the gap in elementwise kernels: 604 against 385 of one kind, 457 against 240 fp32
adds a step. The fused forms (hlnas.model.nn: fused RMSNorm, split RoPE, one matmul over stacked input projections) are meant
to remove that. This counts every non-view aten op of one forward and backward under bf16 autocast, as the CUDA step
runs, with the fused forms on: the two models must issue the same ops, except one weight stack per fused projection
(q/k/v and gate/up: a copy of the weights, not of activations). Before the fused forms (0d122c2^) the same count was
594 against 457 ops at 2 layers."""

from __future__ import annotations

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hlnas.model.nn as hnn
from experiments.bench.paper_scale import plain_transformer
from hlnas.model.cost import resolve_config
from hlnas.model.config import ModelConfig
from hlnas.model.layout import build_layout
from hlnas.model.build import build_model
from hlnas.lm.trainer import lm_loss

# ops that make views (no kernel, no memory of their own)
VIEWS = {"view", "_unsafe_view", "slice", "detach", "unsqueeze", "squeeze", "split", "split_with_sizes", "t",
         "transpose", "expand", "as_strided", "alias", "permute", "select", "unbind"}


class _OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in VIEWS:
            dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
            self.counts[(name, str(dtype))] += 1
        return func(*args, **(kwargs or {}))


def _step_ops(model) -> collections.Counter:
    torch.manual_seed(0)
    x, y = torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 16))
    with _OpCount() as count:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = lm_loss(model(x), y)
        loss.backward()
    return count.counts


def test_hlnas_transformer_issues_the_plain_transformers_ops(monkeypatch):
    monkeypatch.setattr(hnn, "FUSED_ON_CPU", True)  # the forms the CUDA step runs
    monkeypatch.setattr(hnn, "_TABLES", {})  # RoPE's table made in this step, as the plain model makes its cos/sin
    cfg, n_layers = ModelConfig(d_model=64, vocab_size=256, n_heads=4, mlp_hidden=128), 3
    layout = build_layout("transformer", None, n_layers)
    plain, ours = plain_transformer(resolve_config(layout, cfg)), build_model(layout, cfg)
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in ours.parameters())
    want, got = _step_ops(plain), _step_ops(ours)
    assert got.pop(("cat", "None")) - want.pop(("cat", "None")) == 2 * n_layers  # the q/k/v and gate/up weight stacks
    assert got == want
    assert sum(got.values()) > 300  # the count saw the whole step


def test_the_composed_forms_on_the_cpu_issue_more(monkeypatch):
    """The check can fail: the CPU default's composed forms (FUSED_ON_CPU off) issue more ops than the plain model."""
    monkeypatch.setattr(hnn, "FUSED_ON_CPU", False)
    cfg, n_layers = ModelConfig(d_model=64, vocab_size=256, n_heads=4, mlp_hidden=128), 3
    layout = build_layout("transformer", None, n_layers)
    plain, ours = plain_transformer(resolve_config(layout, cfg)), build_model(layout, cfg)
    assert sum(_step_ops(ours).values()) > sum(_step_ops(plain).values())

"""The LM trainer's CUDA-graph step (issue #22 point 1) on a GPU: the graph runs, and its losses follow the eager
run's within bf16 noise (the warm-up steps of the capture are rewound). Skipped on CPU machines; run on the H200
through experiments/paper_grid/h200.sh (``pytest -m gpu``)."""

from __future__ import annotations

import pytest

from hlnas.model.config import ModelConfig
from hlnas.data.sources import DataConfig
from hlnas.model.layout import Layout
from hlnas.lm.trainer import TrainConfig, train

pytestmark = pytest.mark.gpu


# DZAD: the delta rules' short convolutions on fla's causal conv (eager and captured) or, compiled, on PyTorch's
@pytest.mark.parametrize("layout", ["AAAA", "GGAG", "DZAD"])
def test_graphed_lm_step_follows_the_eager_one(layout):
    cfg = ModelConfig(d_model=128, n_layers=4, vocab_size=256, n_heads=2)
    base = dict(tokens=40 * 8 * 128, batch_size=8, seq_len=128, log_every=5, device="cuda")
    eager = train(Layout.parse(layout), cfg, TrainConfig(**base, graph=False), DataConfig(), progress=False)
    graph = train(Layout.parse(layout), cfg, TrainConfig(**base, graph=True), DataConfig(), progress=False)
    assert eager.step_mode == "eager" and graph.step_mode == "graph"
    assert eager.status == graph.status == "ok" and graph.steps == eager.steps == 40
    for (s1, a), (s2, b) in zip(eager.losses, graph.losses):
        assert s1 == s2 and abs(a - b) < 0.05 * abs(a), (s1, a, b)
    assert abs(eager.val_loss - graph.val_loss) < 0.03 * eager.val_loss


@pytest.mark.parametrize("layout", ["AAAA", "GGAG", "DZAD"])
def test_a_compiled_model_is_captured_too_and_follows_the_eager_run(layout):
    """train.compile with the graph on: the compiled model inside the captured step (as the recall proxy's
    score.mqar.compile), the same losses within bf16 noise."""
    cfg = ModelConfig(d_model=128, n_layers=4, vocab_size=256, n_heads=2)
    base = dict(tokens=40 * 8 * 128, batch_size=8, seq_len=128, log_every=5, device="cuda")
    eager = train(Layout.parse(layout), cfg, TrainConfig(**base, graph=False), DataConfig(), progress=False)
    both = train(Layout.parse(layout), cfg, TrainConfig(**base, graph=True, compile=True), DataConfig(), progress=False)
    assert both.step_mode == "graph" and both.status == "ok" and both.steps == 40
    for (s1, a), (s2, b) in zip(eager.losses, both.losses):
        assert s1 == s2 and abs(a - b) < 0.05 * abs(a), (s1, a, b)

"""The trial pipeline's two stages (hlnas.pipeline.run): the recall stage reads only the layout, the model config and
score.mqar, runs first, and a recall model paused by the clock pauses the trial before its LM is trained; the LM stage
measures the trained candidate with every objective, the recall stage's result passed through, never trained again."""

import dataclasses
import time

import pytest

import hlnas.pipeline.run as pipeline
from hlnas.search.records import layout_spec
from hlnas.search.trial import run_trial
from hlnas.space import space_from_dict
from tests.searches import tiny_raw, tiny_space

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_recall_stage_reads_only_its_own_settings():
    """Two recipes that differ only in their LM settings give the recall stage the same arguments."""
    space = tiny_space()
    a = layout_spec(space, 0, "GGAG").recipe
    b = dataclasses.replace(a, train=dataclasses.replace(a.train, lr=a.train.lr * 2, tokens=a.train.tokens * 2))
    seen = []
    real = pipeline.recall_stage
    for recipe in (a, b):
        pipeline.recall_stage = lambda *args, **kw: seen.append((args, kw)) or {"mqar_acc": 0.5}
        try:
            pipeline.run(recipe, recall_only=True)
        finally:
            pipeline.recall_stage = real
    assert seen[0] == seen[1]
    (layout, model, mqar), kw = seen[0]
    assert (layout, model, mqar) == (a.layout, a.model, a.score.mqar) and kw["seed"] == a.train.seed


def test_a_paused_recall_stage_pauses_the_trial_before_its_lm_trains(tmp_path, monkeypatch):
    raw = tiny_raw()
    raw["scale"]["score"]["mqar"].update(steps=20, eval_every=5)  # a check before the end, where the clock is read
    space = space_from_dict(raw)
    spec = dataclasses.replace(layout_spec(space, 0, "GGAG"), state_dir=str(tmp_path / "state"), pause_by=time.time() - 1)
    trained = []
    monkeypatch.setattr(pipeline, "lm_stage", lambda *a, **k: trained.append(a) or pytest.fail("the LM trained"))
    result = run_trial(spec)
    assert result.status == "paused" and not trained
    assert result.metrics["mqar_finished"] is False and result.metrics["kv_cache_bytes"] > 0  # its cost is counted


def test_a_whole_trial_runs_the_recall_stage_once_and_scores_the_lm_half():
    space = tiny_space()
    calls = []
    real = pipeline.recall_stage

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)

    pipeline.recall_stage = counted
    try:
        result = run_trial(layout_spec(space, 0, "GGAG"))
    finally:
        pipeline.recall_stage = real
    assert result.ok, result.error
    assert len(calls) == 1
    m = result.metrics
    assert {"val_loss", "mqar_acc", "recall", "recall_raw", "recall_baseline", "kv_cache_bytes", "params"} <= set(m)
    assert m["recall"] == pytest.approx(max(0.0, (m["recall_raw"] - m["recall_baseline"]) / (1 - m["recall_baseline"])))

"""Several runs in one worker process (``ProcessExecutor(runs_per_worker=N)``, issue #21): each run's result is
the one it gets alone, a run that finishes frees its slot, and a worker that dies fails every run it held."""

from __future__ import annotations

import os
import signal

import pytest

from hlnas.model.config import preset
from hlnas.data.sources import DataConfig
from hlnas.errors import ConfigError
from hlnas.search.executors import ProcessExecutor
from hlnas.model.layout import Layout
from hlnas.pipeline.recipe import RunConfig
from hlnas.score.objectives import MqarConfig, ScoreConfig
from hlnas.lm.trainer import TrainConfig
from hlnas.search.trial import TrialSpec


def recall_spec(number: int, layout: str, seed: int, steps: int = 40) -> TrialSpec:
    """A fresh-model MQAR run alone (no LM training), small enough for a CPU test."""
    mqar = MqarConfig(seq_len=16, kv_pairs=2, vocab=16, batch=8, steps=steps, eval_every=10, test=32, val=32,
                      model={"d_model": 32, "n_heads": 2, "mlp_hidden": 32, "n_layers": len(layout),
                             "residual_init": "zero", "mixer_hparams": {"attention": {"input_conv": 4}}})
    recipe = RunConfig(layout=Layout.parse(layout), model=preset("proxy-tiny"),
                       train=TrainConfig(seed=seed, tokens=1, batch_size=1, seq_len=1), data=DataConfig(),
                       score=ScoreConfig(objectives=("mqar",), mqar=mqar), preset="proxy-tiny")
    return TrialSpec(number=number, recipe=recipe, recall_only=True)


def run_all(ex: ProcessExecutor, specs: list[TrialSpec]) -> dict:
    queue, out = list(specs), {}
    while queue or ex.in_flight():
        while queue and ex.in_flight() < ex.capacity:
            ex.submit(queue.pop(0))
        for r in ex.wait(timeout=120):
            out[r.number] = r
    return out


def alone_and_shared(specs: list[TrialSpec], runs_per_worker: int) -> tuple[dict, dict]:
    """The results of ``specs`` run one at a time in one worker, and ``runs_per_worker`` at a time in one worker."""
    out = []
    for ex in (ProcessExecutor(1), ProcessExecutor(1, runs_per_worker=runs_per_worker)):
        try:
            assert ex.capacity == ex.runs_per_worker  # one worker: its runs at once
            out.append(run_all(ex, specs))
        finally:
            ex.shutdown()
    return out[0], out[1]


def test_runs_sharing_a_worker_get_the_results_they_get_alone():
    specs = [recall_spec(0, "AGAG", seed=0), recall_spec(1, "AGAG", seed=1), recall_spec(2, "GGAA", seed=0)]
    solo, together = alone_and_shared(specs, runs_per_worker=2)
    for n in solo:
        assert together[n].ok and solo[n].ok, together[n].error
        a, b = solo[n].metrics, together[n].metrics
        # float32 on CPU: the same weights, batches and curve, so the same numbers exactly
        assert b["mqar"]["runs"][0]["curve"] == a["mqar"]["runs"][0]["curve"]
        assert (b["mqar_acc"], b["mqar_auc"]) == (a["mqar_acc"], a["mqar_auc"])
    assert solo[0].metrics["mqar"]["runs"][0]["curve"] != solo[1].metrics["mqar"]["runs"][0]["curve"]  # seeds differ
    pids = {r.metrics["worker_pid"] for r in together.values()}
    assert len(pids) == 1  # one process ran all three, two at a time
    spans = sorted((r.metrics["started_at"], r.metrics["finished_at"]) for r in together.values())
    assert spans[0][1] > spans[1][0], f"the first two runs did not overlap: {spans}"


def test_a_worker_that_dies_fails_every_run_it_held_and_is_replaced():
    ex = ProcessExecutor(1, runs_per_worker=2)
    try:
        ex.submit(recall_spec(0, "AGAG", 0, steps=100000))
        ex.submit(recall_spec(1, "AGAG", 1, steps=100000))
        with pytest.raises(Exception, match="no idle worker process"):
            ex.submit(recall_spec(2, "AGAG", 2))
        os.kill(ex._slots[0][0].pid, signal.SIGKILL)
        results = ex.wait(timeout=60)
        assert sorted(r.number for r in results) == [0, 1]
        assert all(r.error_kind == "worker_died" and "worker died while running trial" in r.error for r in results)
        assert ex.in_flight() == 0
        after = run_all(ex, [recall_spec(3, "AG", 0, steps=10)])  # the replacement serves the next run
        assert after[3].ok
    finally:
        ex.shutdown()


def test_bad_runs_per_worker_is_named():
    with pytest.raises(ConfigError, match="runs_per_worker must be an integer >= 1, got 0"):
        ProcessExecutor(1, runs_per_worker=0)


@pytest.mark.gpu
def test_runs_sharing_a_gpu_worker_each_capture_their_graph_and_match_their_run_alone():
    """On a GPU, 4 runs in one worker capture their CUDA-graph steps while the others train (on the H200 on
    2026-12-01 such captures collided: 'operation not permitted when stream is capturing') and each curve stays
    the one it gets alone, within bf16 noise."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    solo, together = alone_and_shared([recall_spec(n, "AAAA", seed=n, steps=60) for n in range(4)], runs_per_worker=4)
    for n in solo:
        assert together[n].ok, together[n].error
        assert together[n].metrics["mqar"]["mode"] == "graph" == solo[n].metrics["mqar"]["mode"]
        a = [c[2] for c in solo[n].metrics["mqar"]["runs"][0]["curve"]]  # the loss at each check
        b = [c[2] for c in together[n].metrics["mqar"]["runs"][0]["curve"]]
        assert b == pytest.approx(a, rel=0.05, abs=0.05)

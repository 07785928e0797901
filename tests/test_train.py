"""Trainer: determinism, exact resume, failure capture, schedule, config errors."""

from __future__ import annotations

import math

import pytest
import torch

from hlnas.model.config import preset
from hlnas.data.sources import DataConfig
from hlnas.errors import ConfigError
from hlnas.model.layout import build_layout
from hlnas.lm.trainer import TrainConfig, load_checkpoint, lr_at, train

CFG = preset("proxy-tiny")
LAYOUT = build_layout("transformer", None, 2)
TCFG = TrainConfig(tokens=8 * 4 * 64, batch_size=4, seq_len=64, log_every=1, val_batches=2, lr=3e-3)
DATA = DataConfig(val_docs=8)


def test_two_runs_give_identical_losses():
    a = train(LAYOUT, CFG, TCFG, DATA, progress=False)
    b = train(LAYOUT, CFG, TCFG, DATA, progress=False)
    assert a.status == b.status == "ok"
    assert a.losses == b.losses and a.final_loss == b.final_loss and a.val_loss == b.val_loss
    assert a.steps == 8 and a.tokens == 8 * 4 * 64 and len(a.losses) == 8
    assert a.losses[-1][1] < a.losses[0][1]  # it learns


def test_interrupted_run_resumes_to_the_same_final_loss(tmp_path):
    full = train(LAYOUT, CFG, TCFG, DATA, progress=False)
    part = train(LAYOUT, CFG, TCFG, DATA, out_dir=tmp_path, progress=False, stop_after=3)
    assert part.status == "interrupted" and part.steps == 3
    rest = train(LAYOUT, CFG, TCFG, DATA, out_dir=tmp_path, progress=False)
    assert rest.status == "ok" and rest.steps == 8
    assert rest.final_loss == full.final_loss and rest.losses == full.losses
    model, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 8 and meta["layout"] == str(LAYOUT)
    assert sum(p.numel() for p in model.parameters()) == full.params


def test_steady_throughput_leaves_out_the_compile_steps(monkeypatch):
    import time

    import hlnas.lm.trainer as T

    calls, ce = [0], T.F.cross_entropy

    def slow_first_steps(*a, **k):  # stands in for a first call that compiles kernels
        calls[0] += 1
        if calls[0] <= T.STEADY_AFTER:
            time.sleep(0.5)
        return ce(*a, **k)

    monkeypatch.setattr(T.F, "cross_entropy", slow_first_steps)
    r = train(LAYOUT, CFG, TCFG, DATA, progress=False)
    assert r.status == "ok" and r.steps == 8
    # overall: 8 steps over >= 1.5 s; steady: the last 5 steps only, none of them slowed
    assert r.tokens_per_s <= 8 * TCFG.tokens_per_step / (0.5 * T.STEADY_AFTER)
    assert r.steady_tokens_per_s > 3 * r.tokens_per_s
    short = train(LAYOUT, CFG, TrainConfig(**{**TCFG.to_dict(), "tokens": T.STEADY_AFTER * TCFG.tokens_per_step}), DATA,
                  progress=False)
    assert short.status == "ok" and short.tokens_per_s and short.steady_tokens_per_s is None  # no step after the warm-up


def test_nan_loss_is_a_failed_result_not_a_crash():
    r = train(LAYOUT, CFG, TrainConfig(**{**TCFG.to_dict(), "lr": 1e30, "grad_clip": 1e30}), DATA, progress=False)
    assert r.status == "failed" and r.error_kind == "nan"
    assert "loss became" in r.error and "lower the learning rate" in r.error


def test_oom_is_infeasible(monkeypatch):
    import hlnas.lm.trainer as T

    def boom(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.50 GiB. GPU 0 has ...")

    monkeypatch.setattr(T.F, "cross_entropy", boom)
    r = train(LAYOUT, CFG, TCFG, DATA, progress=False)
    assert r.status == "infeasible" and r.error_kind == "oom" and "12.50 GiB" in r.error


def test_schedule_warms_up_then_decays_to_min():
    cfg = TrainConfig(tokens=100 * 64, batch_size=1, seq_len=64, lr=1.0, warmup_frac=0.1, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(cfg.steps)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.1, abs=0.01) and math.isclose(max(lrs), 1.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokens": 10}, "less than one step"),
        ({"lr": -1.0}, "train.lr must be a positive number"),
        ({"autocast": "fp8"}, "autocast 'fp8' is not allowed; allowed: auto, bf16, off"),
        ({"batch_size": 0}, "train.batch_size must be >= 1"),
        ({"recall_format": "niah"}, "recall_format 'niah' is not allowed; allowed: ruler, mqar"),
        ({"recall_count": 0}, "train.recall_count must be >= 1, got 0"),
        ({"recall_every": -1}, "recall_every and train.recall_length must be >= 0"),
        ({"recall_every": 1, "recall_format": "mqar", "recall_length": 30, "recall_kv_pairs": 8},
         "even recall length L .recall_length, or seq_len. and 1 <= recall_kv_pairs <= L/4; got L=30"),
        ({"recall_every": 1, "recall_format": "mqar", "recall_kv_pairs": 8, "recall_vocab": 16},
         "recall_vocab=16 holds 7 distinct keys; recall_kv_pairs=8 needs recall_vocab >= 18"),
    ],
)
def test_bad_config(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**kwargs)


def test_unknown_key_names_the_allowed_ones():
    with pytest.raises(ConfigError, match="unknown train key 'lrr'. Did you mean: lr?"):
        TrainConfig.from_dict({"lrr": 1})

"""The fresh-model MQAR recall proxy: recall model config, learning-rate sweep, early stop, baselines."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.config import ModelConfig, preset
from hlnas.errors import ConfigError
from hlnas.training.step import make_optimizer, make_step
from hlnas.model.layout import Layout
from hlnas.score.objectives import MqarConfig, ScoreConfig
from hlnas.recall.proxy import recall_model_config, train_mqar

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models


def test_recall_model_never_solves_the_mlp_for_a_parameter_count():
    cand = ModelConfig(d_model=256, vocab_size=256, n_heads=4, target_params=21_000_000)
    r = recall_model_config(cand, {}, vocab=64)
    assert r.target_params is None and r.mlp_hidden is None and r.vocab_size == 64  # fla's width at build time
    fixed = preset("proxy-tiny")
    assert recall_model_config(fixed, {}, 32).mlp_hidden == fixed.mlp_hidden  # a fixed width is kept
    assert recall_model_config(fixed, {"d_model": 32, "n_heads": 2}, 32).d_model == 32


@pytest.mark.parametrize(("over", "message"), [
    ({"target_params": 10}, "score.mqar.model: key 'target_params' is not allowed"),
    ({"vocab_size": 10}, "key 'vocab_size' is not allowed"),
    ({"d_model": 30, "n_heads": 4}, "score.mqar.model: d_model=30 must be divisible by n_heads=4"),
])
def test_bad_recall_model_settings_are_named(over, message):
    with pytest.raises(ConfigError, match=message):
        recall_model_config(preset("proxy-tiny"), over, 32)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("lrs", [1e-3, -1], "score.mqar.lr and score.mqar.lrs must be positive numbers, got -1"),
    ("target", 1.5, r"score.mqar.target must be an accuracy in \(0, 1\] or null, got 1.5"),
    ("model", {"d_modle": 3}, "score.mqar.model: key 'd_modle' is not allowed. Did you mean: d_model?"),
    ("eval_every", 0, "score.mqar.eval_every must be >= 1, got 0"),
    ("steps", 0, "score.mqar.steps must be >= 1, got 0"),
])
def test_bad_score_settings_are_named(field, value, message):
    with pytest.raises(ConfigError, match=message):
        ScoreConfig.from_dict({"mqar": {field: value}})
    with pytest.raises(ConfigError, match=message):  # the old flat key: the same check, the new name
        ScoreConfig.from_dict({f"mqar_{field}": value})


def _cfg(**kw) -> MqarConfig:
    base = dict(seq_len=16, kv_pairs=2, vocab=16, batch=8, steps=60, eval_every=20, test=32, val=32,
                model={"d_model": 32, "n_heads": 2, "mlp_hidden": 32})
    return MqarConfig(**{**base, **kw})


def test_train_mqar_reports_accuracy_beside_its_baselines():
    out = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), _cfg(), seed=0, device="cpu")
    assert 0 <= out["mqar_acc"] <= 1 and out["mqar_baseline"] == pytest.approx(0.5)  # copy any of 2 values
    assert out["mqar_baselines"]["uniform"] == pytest.approx(1 / 8) and out["mqar_baseline_name"] == "copy_any"
    run = out["mqar"]["runs"][0]
    assert run["steps"] == 60 and [c[0] for c in run["curve"]] == [20, 40, 60] and run["mode"] == "eager"
    # when each check's steps were done (benchmarks' steady-state windows): the checks' steps, in time order
    assert [c[0] for c in run["clock"]] == [20, 40, 60] and run["clock"] == sorted(run["clock"], key=lambda c: c[1])
    assert out["mqar"]["model"]["vocab_size"] == 16 and out["mqar"]["model"]["d_model"] == 32
    assert out["mqar_device_name"] == "cpu"  # the recall model's card (a trial may take it from another run)


def test_a_reached_target_stops_training_and_the_sweep():
    """A target of a tiny accuracy is reached at the first check: one check of the first rate, no second rate."""
    out = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), _cfg(target=0.01, lrs=(1e-3, 3e-3)), device="cpu")
    runs = out["mqar"]["runs"]
    assert len(runs) == 1 and runs[0]["steps"] == 20 and out["mqar_lr"] == 1e-3


def test_the_sweep_keeps_the_rate_with_the_best_validation_accuracy(monkeypatch):
    import hlnas.recall.proxy as rp

    real = rp._one_rate

    def fake_val(setup, lr, seed, device, val):
        r = real(setup, lr, seed, device, val)
        r["val_acc"] = {1e-4: 0.2, 1e-3: 0.9, 1e-2: 0.5}[lr]
        return r

    monkeypatch.setattr(rp, "_one_rate", fake_val)
    out = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), _cfg(steps=20, lrs=(1e-4, 1e-3, 1e-2)), device="cpu")
    assert out["mqar_lr"] == 1e-3 and len(out["mqar"]["runs"]) == 3


def test_test_instances_do_not_depend_on_the_training_seed():
    a = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), _cfg(steps=20), seed=0, device="cpu")
    b = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), _cfg(steps=20), seed=1, device="cpu")
    assert a["mqar_baselines"] == b["mqar_baselines"]  # same instances; the models differ
    assert a["mqar"]["runs"][0]["curve"] != b["mqar"]["runs"][0]["curve"]


def test_make_step_is_eager_on_cpu_and_trains():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(8, 16), torch.nn.Linear(16, 8))
    opt = make_optimizer(model, 1e-2, graph=True)
    x = torch.randint(8, (4, 5))
    loss_fn = lambda logits, y: torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())  # noqa: E731
    step, mode = make_step(model, opt, loss_fn, (x, x), graph=True)
    first = float(step(x, x))
    for _ in range(50):
        last = float(step(x, x))
    assert mode == "eager" and last < first / 2


def _first_batches(device, start=0, n=3):
    from itertools import islice

    from hlnas.recall.mqar import MqarTask
    from hlnas.recall.proxy import mqar_train_batches

    task = MqarTask(seq_len=32, num_kv_pairs=4, vocab_size=64)
    return [tuple(t.cpu() for t in b) for b in islice(mqar_train_batches(task, 8, seed=3, start=start, device=device), n)]


def test_training_batches_are_the_same_instances_on_any_device_and_from_any_start():
    # the batches move to the device a block at a time; the instances must not depend on that, nor on a resume
    plain, moved = _first_batches(None, n=70), _first_batches("cpu", n=70)  # across a block boundary (64 steps)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(plain, moved))
    resumed = _first_batches("cpu", start=63, n=3)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(plain[63:66], resumed))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_batches_reach_the_gpu_unchanged_through_pinned_memory():
    cpu, gpu = _first_batches(None, n=66), _first_batches("cuda", n=66)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(cpu, gpu))

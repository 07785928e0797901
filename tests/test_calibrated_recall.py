"""A calibration run's fresh-model recall stands in for a search trial's of the same layout, protocol and seed: the
paper grid's second seed (``--set train.seed=1 --calibrated-by``) trains only the LM half of the layouts the
calibration covered (hlnas.search.calibration.calibrated_recall)."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from hlnas.model.layout import Layout
from hlnas.recall.result import RESULT_KEYS, finished_result
from hlnas.search import executors
from hlnas.search.calibration import RECALL_ATTR, calibrated_recall
from hlnas.search.records import layout_spec
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.model.cost import layout_metrics
from hlnas.search.trial import TrialResult, run_trial
from hlnas.space import space_from_dict
from tests.searches import raw_space, tiny_space

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models


def test_every_key_train_mqar_returns_is_a_result_key_and_a_finished_result_is_all_of_them(tmp_path):
    """RESULT_KEYS is what a stored result carries: a key train_mqar added later and RESULT_KEYS missed would be lost
    from every trial that took its recall from a calibration run."""
    from hlnas.model.config import preset
    from hlnas.score.objectives import MqarConfig
    from hlnas.recall.proxy import paused_at, train_mqar

    cfg = MqarConfig(seq_len=16, kv_pairs=2, vocab=16, batch=8, steps=20, eval_every=10, test=16, val=16,
                     model={"d_model": 16, "n_heads": 2, "mlp_hidden": 16})
    out = train_mqar(Layout.parse("AG"), preset("proxy-tiny"), cfg, seed=1, device="cpu")
    assert set(out) <= set(RESULT_KEYS)
    assert finished_result({**out, "val_loss": 3.0}) == out  # the LM's metrics are not part of it
    with paused_at(str(tmp_path), None, until=0.0):  # paused at its first check: not finished, nothing to stand in
        paused = train_mqar(Layout.parse("AG"), preset("proxy-tiny"), cfg, seed=1, device="cpu")
    assert set(paused) <= set(RESULT_KEYS) and paused["mqar_finished"] is False
    assert finished_result(paused) is None
    assert finished_result({**out, "mqar_error": "NaN loss"}) is None and finished_result({"val_loss": 3.0}) is None


def test_a_trial_given_its_recall_trains_only_the_lm_half_and_reports_that_recall(monkeypatch):
    """Real tiny training: the LM half trains, the recall model does not, and the trial's recall columns (raw, baseline,
    corrected) are those of the given result, with recall_from naming where it came from."""
    import hlnas.recall.proxy as proxy

    space = tiny_space()
    spec = layout_spec(space, 0, "GGAG")
    own = run_trial(spec)  # trains its own recall
    assert own.ok and "recall_from" not in own.metrics
    given = finished_result(own.metrics)

    def no_training(*a, **k):
        raise AssertionError("the recall model was trained although its result was given")

    monkeypatch.setattr(proxy, "train_mqar", no_training)
    taken = run_trial(dataclasses.replace(spec, number=1, recall=given, recall_from="grid:hybrid:gla:s1"))
    assert taken.ok, taken.error
    assert taken.metrics["recall_from"] == "grid:hybrid:gla:s1"
    for k in ("mqar_acc", "mqar_baseline", "mqar_auc", "recall", "recall_raw", "recall_baseline", "recall_auc"):
        assert taken.metrics[k] == own.metrics[k], k
    assert taken.metrics["val_loss"] == pytest.approx(own.metrics["val_loss"], rel=1e-5)  # the LM half trained again
    alone = run_trial(dataclasses.replace(spec, number=2))  # the same spec without its recall: trains it, here refused
    assert not alone.ok and "was trained although its result was given" in alone.error


def test_a_trial_names_its_own_card_and_keeps_the_card_of_the_recall_it_took():
    """device_name is where the run trained (the LM half, or a recall-only run's recall model); mqar_device_name travels
    with a recall result, so a trial that took another run's recall still says where that recall was trained."""
    space = tiny_space()
    spec = layout_spec(space, 0, "GGAG", recall_only=True)
    alone = run_trial(spec)
    assert alone.ok and alone.metrics["device_name"] == alone.metrics["mqar_device_name"] == "cpu"
    given = {**finished_result(alone.metrics), "mqar_device_name": "NVIDIA H200"}
    taken = run_trial(dataclasses.replace(layout_spec(space, 1, "GGAG"), recall=given, recall_from="grid:hybrid:gla:s1"))
    assert taken.ok and taken.metrics["device_name"] == "cpu" and taken.metrics["mqar_device_name"] == "NVIDIA H200"


def fake_with_results(calls: list):
    """A run_trial that returns a whole fresh-model result (recall by attention count, seed in the result) and records
    (number, layout, seed, recall_only, recall_from) of each spec; a given recall is returned as it is."""
    def run(spec):
        calls.append((spec.number, spec.layout, spec.recipe.train.seed, spec.recall_only, spec.recall_from))
        m = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
        n_attn = len(Layout.parse(spec.layout).attention_layers)
        mqar = spec.recall or {"mqar_acc": min(0.99, 0.28 + 0.35 * n_attn), "mqar_baseline": 0.25,
                               "mqar_baseline_name": "copy_any", "mqar_baselines": {"copy_any": 0.25},
                               "mqar_auc": 0.1 * n_attn, "mqar": {"seed": spec.recipe.train.seed}}
        m.update(status="ok", val_loss=3.0 + spec.recipe.train.seed, **mqar)
        if spec.recall_from:
            m["recall_from"] = spec.recall_from
        from hlnas.recall.baselines import recall_metrics

        m.update(recall_metrics(m, ["mqar_acc"]))
        return TrialResult(spec.number, "ok", m)

    return run


def test_the_second_seed_of_a_grid_takes_the_calibration_s_seed_1_recall_for_the_layouts_it_covered(monkeypatch, tmp_path):
    """The grid study calibrates (seeds 0 and 1 of control, pure and 3:1); its second seed borrows that calibration: the
    trials of the calibrated layouts get the seed-1 run's result (stored as a study attr per run), the others (6:1)
    train their own; a study at seed 0 borrowing it takes the seed-0 runs'; a third seed takes none."""
    calls = []
    monkeypatch.setattr(executors, "run_trial", fake_with_results(calls))
    url = f"sqlite:///{tmp_path}/c.db"
    grid = run_search(space_from_dict(raw_space()), SearchOptions(storage=url, study_name="grid", n_trials=7))
    stored = {k[len(RECALL_ATTR):]: v for k, v in grid.user_attrs.items() if k.startswith(RECALL_ATTR)}
    assert len(stored) == 10 and stored["pure:gla:s1"]["layout"] == "GGGGGG" and stored["pure:gla:s1"]["seed"] == 1
    assert stored["pure:gla:s1"]["result"]["mqar"] == {"seed": 1}

    calls.clear()
    s1_space = space_from_dict(raw_space()).with_sets(["train.seed=1"])
    s1 = run_search(s1_space, SearchOptions(storage=url, study_name="grid_s1", n_trials=7, calibrated_by="grid"))
    given = {c[1]: c[4] for c in calls}
    assert len(calls) == 7 and all(c[2] == 1 for c in calls)
    assert given == {"AAAAAA": "grid:control:transformer:s1", "GGGGGG": "grid:pure:gla:s1",
                     "GGAGGA": "grid:hybrid:gla:s1", "HHHHHH": "grid:pure:hgrn:s1", "HHAHHA": "grid:hybrid:hgrn:s1",
                     "GGGGGA": None, "HHHHHA": None}
    by_layout = {t.user_attrs["layout"]: t for t in s1.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    assert by_layout["GGGGGG"].user_attrs["mqar"] == {"seed": 1} and by_layout["GGGGGG"].user_attrs["val_loss"] == 4.0
    assert by_layout["GGGGGA"].user_attrs["mqar"] == {"seed": 1} and "recall_from" not in by_layout["GGGGGA"].user_attrs
    assert set(calibrated_recall(s1, s1_space)) == {"AAAAAA", "GGGGGG", "GGAGGA", "HHHHHH", "HHAHHA"}
    assert calibrated_recall(grid, s1_space.with_sets(["train.seed=2"])) == {}  # no calibration run at seed 2
    # runs stored before results were kept (a summary, no result attr) are trained again, not taken
    old = optuna.create_study()
    old.set_user_attr("hlnas_calibration", {"status": "running", "runs": {"pure:gla:s1": grid.user_attrs[
        "hlnas_calibration"]["runs"]["pure:gla:s1"]}})
    assert calibrated_recall(old, s1_space) == {}


def test_layouts_with_a_measured_recall_start_last_when_every_candidate_trains(monkeypatch, tmp_path):
    """Where the target covers every candidate and trials run two at a time (longest expected first), the layouts that
    train only their LM half start after those that train their recall too, so the workers finish together."""
    from hlnas.search.executors import InlineExecutor
    from hlnas.search.order import longest_first

    class TwoAtOnce(InlineExecutor):
        capacity = 2

    calls = []
    monkeypatch.setattr(executors, "run_trial", fake_with_results(calls))
    url = f"sqlite:///{tmp_path}/c.db"
    run_search(space_from_dict(raw_space()), SearchOptions(storage=url, study_name="grid", n_trials=7))
    calls.clear()
    s1_space = space_from_dict(raw_space()).with_sets(["train.seed=1"])
    events = []
    run_search(s1_space, SearchOptions(
        storage=url, study_name="grid_s1", n_trials=7, calibrated_by="grid",
        executor=TwoAtOnce(fake_with_results(calls)), on_event=lambda k, d: events.append((k, d))))
    started = [d for k, d in events if k == "started"]
    assert [d.get("recall_from") is None for d in started] == [True, True] + [False] * 5
    layouts = [str(s1_space.layout(p)) for p in s1_space.grid()]
    measured = {"AAAAAA", "GGGGGG", "GGAGGA", "HHHHHH", "HHAHHA"}
    assert [d["layout"] for d in started] == longest_first(s1_space, layouts, measured=measured)
    assert longest_first(s1_space, layouts)[:2] != [d["layout"] for d in started][:2]  # without: pure models first


def test_a_grid_after_its_calibration_queues_only_the_layouts_the_calibration_did_not_train(monkeypatch, tmp_path):
    """The calibration's seed-0 runs are the grid's trials of their layouts: the grid queues the other candidates
    only, so the study ends with one trial per candidate, none WAITING and no reused copies (the H200 grid had queued
    all 31 and kept 19 copies WAITING after its target was met)."""
    calls = []
    monkeypatch.setattr(executors, "run_trial", fake_with_results(calls))
    space = space_from_dict(raw_space())
    study = run_search(space, SearchOptions(storage=f"sqlite:///{tmp_path}/c.db", study_name="grid", n_trials=7))
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 7
    assert not [t for t in trials if "reused_from" in t.user_attrs]
    assert sorted(t.user_attrs["layout"] for t in trials) == sorted(str(space.layout(p)) for p in space.grid())
    # 10 calibration runs (5 layouts x 2 seeds), then the two 6:1 layouts, the only ones the calibration left
    assert len(calls) == 12 and sorted(c[1] for c in calls[10:]) == ["GGGGGA", "HHHHHA"]

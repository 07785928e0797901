"""The rung scheduler (hlnas.search.rungs): asynchronous successive halving over the recall model's training steps with
multi-objective promotion, inside the search loop; its storage, resume and the recall model's pause/continue."""

from __future__ import annotations

import dataclasses
import math

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.space import SpaceError
from hlnas.search.executors import InlineExecutor
from hlnas.search.rungs import RUNG_ATTR, checks, crowding, ladder, nondominated_ranks, rank_peers, RungConfig
from hlnas.space import load_space
from hlnas.search.study import run_search, study_summary
from hlnas.search.options import SearchOptions
from hlnas.model.cost import layout_metrics
from hlnas.search.trial import TrialResult

MAX_STEPS = 1200


def rung_space(min_steps=100, eta=3, **changes):
    sp = load_space("tiny")
    return sp.with_overrides(rungs={"min_steps": min_steps, "eta": eta}, **changes)


def quality(layout: str) -> float:
    """A fake layout's final recall: more attention layers, more recall; pure layouts none."""
    n_att = layout.count("A")
    return 0.0 if n_att == 0 else min(1.0, 0.35 + 0.2 * n_att + 0.01 * layout.count("N"))


class FakeRuns:
    """A stand-in for run_trial: the recall at a step budget follows a fixed curve per layout; records every call."""

    def __init__(self, fail: set[str] = ()):
        self.calls: list[tuple[str, int | None]] = []
        self.fail = set(fail)

    def __call__(self, spec) -> TrialResult:
        steps = spec.rung_steps or MAX_STEPS
        self.calls.append((spec.layout, spec.rung_steps))
        if spec.layout in self.fail:
            return TrialResult(spec.number, "failed", {"status": "failed", "error_kind": "nan", "error": "nan"}, "nan", "nan")
        q = quality(spec.layout)
        curve = [[s, round(0.25 + 0.75 * q * min(1.0, s / 600), 4), 1.0] for s in range(100, steps + 1, 100)]
        rec = max(0.0, (curve[-1][1] - 0.25) / 0.75)
        m = {**layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement), "recall": rec,
             "recall_auc": rec / 2, "mqar_lr": 1e-3, "mqar_val_baseline": 0.25,
             "mqar": {"runs": [{"lr": 1e-3, "curve": curve}]}, "status": "ok"}
        if spec.rung_steps is not None:
            m["rung_steps"] = spec.rung_steps
        else:
            m["val_loss"] = 3.0 - 0.1 * spec.layout.count("A")
        return TrialResult(spec.number, "ok", m)


def search(tmp_path, sp, runs, n_trials, name="s", **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    events = []
    study = run_search(sp, SearchOptions(
        storage=f"sqlite:///{tmp_path}/s.db", study_name=name, n_trials=n_trials, executor=InlineExecutor(runs),
        skip_calibration=True, out_root=str(tmp_path / "out"), on_event=lambda k, d: events.append((k, d)), **kw))
    return study, events


# -- the space section and the ranking ------------------------------------------------------------------------


def test_rungs_are_off_by_default_and_a_space_turns_them_on():
    assert load_space("tiny").rungs is None
    assert "rungs" not in load_space("tiny").to_dict()  # stored studies without rungs keep their fingerprint
    sp = rung_space(100, 3)
    assert ladder(sp.rungs, sp.score.mqar.steps) == [100, 300, 900, 1200]
    assert ladder(RungConfig(min_steps=50, eta=2), 400) == [50, 100, 200, 400]


@pytest.mark.parametrize("raw,words", [
    ({"min_steps": 1200}, "below score.mqar.steps"),
    ({"min_steps": 150}, "multiple of score.mqar.eval_every"),
    ({"min_steps": 100, "eta": 1}, "rungs.eta=1"),
    ({"eta": 3}, "rungs.min_steps is required"),
    ({"min_steps": 100, "etta": 3}, "rungs.etta is not allowed"),
])
def test_bad_rungs_are_one_line_errors(raw, words):
    with pytest.raises(SpaceError) as e:
        load_space("tiny").with_overrides(rungs=raw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_rungs_need_the_fresh_recall_model():
    sp = load_space("tiny")
    score = dataclasses.replace(sp.score, objectives=("val_loss",))
    with pytest.raises(SpaceError, match="no 'mqar'"):
        sp.with_overrides(score=score.to_dict(), objectives=[{"name": "loss", "metric": "val_loss"}],
                          rungs={"min_steps": 100})


def test_nondominated_sorting_and_crowding():
    pts = [(0, 3), (1, 1), (3, 0), (2, 2), (3, 3), (1.5, 1.5)]
    assert nondominated_ranks(pts) == [0, 0, 0, 2, 3, 1]  # (1.5, 1.5) dominates (2, 2)
    c = crowding([(0, 3), (1, 1), (3, 0)])
    assert c[0] == c[2] == math.inf and c[1] == pytest.approx(2.0)  # (3-0)/3 + (3-0)/3
    # the front first; within it the boundary points, then the less crowded; then the next front
    # front {7, 8, 9, 10}: 8's crowding 2.1/3 + 1.2/3 = 1.1 beats 10's 1/3 + 2/3 = 1.0
    assert rank_peers({7: (0, 3), 8: (1, 1), 9: (3, 0), 10: (0.9, 1.2), 11: (2, 2)}) == [7, 9, 8, 10, 11]
    assert rank_peers({1: (1, 1), 2: (2, 2), 3: (3, 3)}) == [1, 2, 3]


def test_checks_report_each_check():
    m = {"mqar_lr": 1e-3, "mqar_val_baseline": 0.25,
         "mqar": {"runs": [{"lr": 1e-3, "curve": [[100, 0.25, 2.0], [200, 1.0, 0.5]]}]}}
    assert checks(m) == [{"step": 100, "val_acc": 0.25, "recall": 0.0, "recall_auc": 0.0, "loss": 2.0},
                         {"step": 200, "val_acc": 1.0, "recall": 1.0, "recall_auc": 0.25, "loss": 0.5}]


# -- the search loop ----------------------------------------------------------------------------------------------


def _replay_promotions(events, eta):
    """Check every promotion against the rung values known when it was made (asynchronous successive halving)."""
    values: dict[int, dict[int, tuple]] = {}
    for kind, d in events:
        if kind == "rung":
            m = d["metrics"]
            values.setdefault(d["rung"], {})[d["number"]] = (-m["recall"], m["kv_cache_bytes"])
        elif kind == "promoted":
            k = d["to"] - 1
            peers = values[k]
            assert d["number"] in peers
            ranked = rank_peers(peers)
            drain = math.ceil(len(peers) / eta)
            front = nondominated_ranks(list(peers.values())).count(0)
            assert ranked.index(d["number"]) < max(len(peers) // eta, drain, front)


def test_the_rung_scheduler_stops_hopeless_trials_and_marks_them(tmp_path):
    sp = rung_space(100, 3)
    runs = FakeRuns()
    study, events = search(tmp_path, sp, runs, n_trials=11)
    lad = [100, 300, 900, None]
    by_layout: dict[str, list] = {}
    for lay, steps in runs.calls:
        by_layout.setdefault(lay, []).append(steps)
    assert len(by_layout) == 11  # every layout decided, none trained twice at a rung
    for steps in by_layout.values():
        assert steps == lad[: len(steps)]  # each went up the ladder, one rung at a time
    stopped = [t for t in study.get_trials() if t.state == TrialState.PRUNED and "reused_from" not in t.user_attrs]
    complete = [t for t in study.get_trials() if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs]
    assert stopped and complete and len(stopped) + len(complete) == 11
    assert sum(s is None for s in runs.calls for s in [s[1]]) == len(complete)  # only complete ones ran whole
    for t in stopped:
        rec = t.user_attrs[RUNG_ATTR]
        assert rec["state"] == "stopped" and t.user_attrs["status"] == "stopped"
        assert t.user_attrs["stopped_at_steps"] == rec["ladder"][rec["at"]] < MAX_STEPS
        assert t.user_attrs["rung_steps"] == t.user_attrs["stopped_at_steps"]  # its partial results are kept
        assert "recall" in t.user_attrs and "val_loss" not in t.user_attrs
        assert t.values is None  # never a complete value for samplers or the front
    assert {t.user_attrs["layout"] for t in study.best_trials} <= {t.user_attrs["layout"] for t in complete}
    for t in complete:
        assert t.user_attrs[RUNG_ATTR]["state"] == "complete" and t.user_attrs["hlnas_checks"][-1]["step"] == MAX_STEPS
    counts = study_summary(study)["trials"]
    assert counts["stopped"] == len(stopped) and counts["paused"] == 0 and counts["running"] == 0
    _replay_promotions(events, 3)
    assert any(k == "promoted" for k, _ in events) and any(k == "stopped" for k, _ in events)
    # the hopeless pure layouts with a KV cache (none here) aside: the best recall layouts reached the top
    assert "AAAAAA" in {t.user_attrs["layout"] for t in complete}


def test_without_rungs_every_trial_runs_whole_and_reports_its_checks(tmp_path):
    runs = FakeRuns()
    study, _ = search(tmp_path, load_space("tiny"), runs, n_trials=3)
    assert [s for _, s in runs.calls] == [None, None, None]
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        assert RUNG_ATTR not in t.user_attrs and len(t.user_attrs["hlnas_checks"]) == 12


def test_a_failing_rung_trial_does_not_kill_the_study(tmp_path):
    runs = FakeRuns(fail={"AAAAAA"})
    study, _ = search(tmp_path, rung_space(), runs, n_trials=11)
    failed = [t for t in study.get_trials(states=(TrialState.FAIL,)) if "reused_from" not in t.user_attrs]
    assert [t.user_attrs["layout"] for t in failed] == ["AAAAAA"]
    assert study_summary(study)["trials"]["paused"] == 0


class Interrupt(FakeRuns):
    """Ctrl-C during the ``at``-th run (inline: the signal raises inside the trial)."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def __call__(self, spec):
        if len(self.calls) == self.at:
            self.calls.append((spec.layout, "interrupted"))
            raise KeyboardInterrupt
        return super().__call__(spec)


def _rung_state(study):
    return {t.user_attrs["layout"]: (t.state.name, t.user_attrs[RUNG_ATTR]["state"], t.user_attrs[RUNG_ATTR]["values"])
            for t in study.get_trials() if RUNG_ATTR in t.user_attrs and t.state != TrialState.FAIL}


# Ctrl-C during (grid order): a new trial's first rung, a promotion to rung 1, to rung 2, to the top, and one while
# draining
@pytest.mark.parametrize("at", [2, 7, 12, 16, 22])
def test_a_resume_continues_the_rung_bookkeeping_exactly(tmp_path, at):
    sp = rung_space(100, 3, sampler="grid")
    whole = FakeRuns()
    ref, _ = search(tmp_path / "a", sp, whole, n_trials=11, sampler="grid")
    first = Interrupt(at)
    with pytest.raises(KeyboardInterrupt):
        search(tmp_path / "b", sp, first, n_trials=11, sampler="grid")
    interrupted = first.calls[-1][0]
    mid = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/b/s.db")
    paused = [t for t in mid.get_trials() if t.state == TrialState.RUNNING]
    assert all(t.user_attrs[RUNG_ATTR]["state"] in ("paused", "running") for t in paused)
    second = FakeRuns()
    resumed, _ = search(tmp_path / "b", None, second, n_trials=11, resume=True, sampler="grid")
    assert second.calls[0][0] == interrupted  # the interrupted rung runs first
    assert first.calls[:-1] + second.calls == whole.calls  # the same runs in the same order
    assert _rung_state(resumed) == _rung_state(ref)


def test_calibration_runs_are_never_stopped_early(tmp_path):
    runs = FakeRuns()
    with pytest.raises(Exception):  # the fake recall cannot pass the controls: the verdict is beside the point
        run_search(rung_space(), SearchOptions(
            storage=f"sqlite:///{tmp_path}/s.db", study_name="s", n_trials=3, executor=InlineExecutor(runs),
            out_root=str(tmp_path)))
    assert len(runs.calls) >= 10 and all(steps is None for _, steps in runs.calls)


def test_a_paused_recall_model_continues_as_one_straight_run(tmp_path):
    from hlnas.model.layout import Layout
    from hlnas.recall.proxy import paused_at, train_mqar

    sp = load_space("tiny")
    cfg = dataclasses.replace(sp.score.mqar, steps=30, eval_every=10, lrs=(1e-3, 3e-3), batch=8, val=32, test=32,
                              target=0.99, model={"d_model": 16, "n_heads": 1, "n_layers": 2})
    lay = Layout.parse("HA")
    straight = train_mqar(lay, sp.model, cfg, seed=0)
    with paused_at(str(tmp_path), 10):
        first = train_mqar(lay, sp.model, cfg, seed=0)
    with paused_at(str(tmp_path), 20):
        second = train_mqar(lay, sp.model, cfg, seed=0)
    with paused_at(str(tmp_path), None):
        last = train_mqar(lay, sp.model, cfg, seed=0)
    assert first["mqar_budget"] == 10 and not first["mqar_finished"] and last["mqar_finished"]
    assert [len(r["curve"]) for r in first["mqar"]["runs"]] == [1, 1]  # both rates paused at the rung
    assert [r["curve"] for r in last["mqar"]["runs"]] == [r["curve"] for r in straight["mqar"]["runs"]]
    assert (last["mqar_acc"], last["mqar_auc"], last["mqar_lr"]) == (straight["mqar_acc"], straight["mqar_auc"], straight["mqar_lr"])
    assert second["mqar"]["runs"][0]["curve"] == straight["mqar"]["runs"][0]["curve"][:2]


def test_a_recall_model_paused_by_the_clock_continues_as_one_straight_run(tmp_path):
    """paused_at(..., until): a rate pauses at its first check past the moment and the next rates wait; continued
    without a clock, the curves, scores and summed wall time are those of one run."""
    import time

    from hlnas.model.layout import Layout
    from hlnas.recall.proxy import paused_at, train_mqar

    sp = load_space("tiny")
    cfg = dataclasses.replace(sp.score.mqar, steps=30, eval_every=10, lrs=(1e-3, 3e-3), batch=8, val=32, test=32,
                              target=0.99, model={"d_model": 16, "n_heads": 1, "n_layers": 2})
    lay = Layout.parse("HA")
    straight = train_mqar(lay, sp.model, cfg, seed=0)
    with paused_at(str(tmp_path), None, until=time.time()):
        first = train_mqar(lay, sp.model, cfg, seed=0)
    assert not first["mqar_finished"] and [len(r["curve"]) for r in first["mqar"]["runs"]] == [1]  # rate 2 waits
    with paused_at(str(tmp_path), None):
        last = train_mqar(lay, sp.model, cfg, seed=0)
    assert last["mqar_finished"] and last["mqar_steps_done"] == straight["mqar_steps_done"]
    assert [r["curve"] for r in last["mqar"]["runs"]] == [r["curve"] for r in straight["mqar"]["runs"]]
    assert (last["mqar_acc"], last["mqar_auc"]) == (straight["mqar_acc"], straight["mqar_auc"])
    assert last["mqar"]["runs"][0]["wall_s"] >= first["mqar"]["runs"][0]["wall_s"]  # the paused part counts

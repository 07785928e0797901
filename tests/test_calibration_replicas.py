"""Calibration with --replicas: each layout's seeds trained as replicas of one recall model (issue #21), storing the
runs, verdict and trials a calibration without replicas stores (fake units, and real training on CPU in float32)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.errors import ConfigError
from hlnas.search import executors
from hlnas.search.study import run_search
from hlnas.space import space_from_dict
from tests.searches import fake_trial, raw_space


def fake_unit_trial(scores: dict):
    """fake_trial's runs, a unit's (TrialSpec.replicas) coming back in TrialResult.replicas."""
    import dataclasses

    run, calls = fake_trial(scores)

    def unit(spec):
        own = run(dataclasses.replace(spec, replicas=()))
        return dataclasses.replace(own, replicas=tuple(run(s) for s in spec.replicas))

    return unit, calls


def test_replicas_submit_each_layout_once_with_its_other_seeds_and_store_the_same_runs(monkeypatch, tmp_path):
    specs = []
    unit, calls = fake_unit_trial({})
    monkeypatch.setattr(executors, "run_trial", lambda spec: (specs.append(spec), unit(spec))[1])
    url = f"sqlite:///{tmp_path}/c.db"
    plain = run_search(space_from_dict(raw_space()), storage=url, study_name="plain", n_trials=5, calibrate_only=True)
    n_plain = len(specs)
    specs.clear()
    rep = run_search(space_from_dict(raw_space()), storage=url, study_name="rep", n_trials=5, calibrate_only=True,
                     replicas=True)
    assert n_plain == 10 and len(specs) == 5  # one spec per layout, carrying its seed-1 run
    assert [s.layout for s in specs[:1]] == ["AAAAAA"]  # the controls first, as without
    for s in specs:
        assert s.recipe.train.seed == 0 and [(r.recipe.train.seed, r.recall_only, r.layout) for r in s.replicas] == [
            (1, True, s.layout)]
        assert not s.recall_only  # seed 0 of a layout in the space: a whole trial
    a, b = plain.user_attrs["hlnas_calibration"], rep.user_attrs["hlnas_calibration"]
    assert a["runs"] == b["runs"] and a["verdict"] == b["verdict"] and b["status"] == "valid"
    assert len(rep.get_trials(states=(TrialState.COMPLETE,))) == 5


def test_bad_replicas_options_are_one_line_errors(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    with pytest.raises(ConfigError, match=r"^replicas is False, True \(--replicas: each layout's seeds\) or 'family' "
                                          r"\(--mixed-replicas: a mixer's layouts and seeds together\), got 'yes'$"):
        run_search(space_from_dict(raw_space()), storage=url, study_name="c", n_trials=1, replicas="yes")
    ruler = raw_space(scale={"preset": "proxy-tiny", "score": {"objectives": ["val_loss", "ruler"]}})
    with pytest.raises(ConfigError, match=r"^--replicas trains each calibration layout's seeds as replicas of one fresh "
                                          r"recall model \(objective mqar\); space 'cal' takes its recall from ruler_avg, "
                                          r"which needs each seed's LM trained: drop --replicas$"):
        run_search(space_from_dict(ruler), storage=url, study_name="c", n_trials=1, replicas=True)
    from hlnas.search.storage import study_names, open_storage

    assert "c" not in study_names(open_storage(url, create=True))  # refused before anything was written


def real_space(**top) -> dict:
    """A space the calibration trains for real in seconds: 3 layers, d=32, a 2-rate MQAR sweep to a target."""
    raw = {"name": "real", "mixers": ["hgrn"], "ratios": ["pure", "3:1"], "placements": ["paper"], "transformer": True,
           "layers": 3, "sampler": "grid",
           "scale": {"preset": "proxy-tiny",
                     "model": {"d_model": 32, "n_heads": 2, "mixer_hparams": {"hgrn": {"use_short_conv": True}}},
                     "train": {"tokens": 256, "seq_len": 32, "batch_size": 2, "val_batches": 1},
                     "data": {"source": "synthetic"},
                     "score": {"objectives": ["val_loss", "mqar"],
                               "mqar": {"seq_len": 16, "kv_pairs": 2, "vocab": 32, "batch": 4, "steps": 10,
                                        "eval_every": 2, "val": 16, "test": 16, "target": 0.09, "lrs": [3e-3, 1e-2]}}}}
    raw.update(top)
    return raw


#: what differs between two runs of the same work: when and where it ran, and how long it took
TIMING = {"worker_pid", "started_at", "finished_at", "wall_s", "train_wall_s", "mqar_s", "tokens_per_s",
          "steady_tokens_per_s", "timings_s", "resumed_s", "clock", "trial"}


def same_data(a, b, where: str = "", skip=frozenset()) -> None:
    """Equal JSON-like data, timings and ``skip`` aside, floats within float32 rounding of the batched matmuls."""
    if isinstance(a, dict):
        assert set(a) - skip == set(b) - skip, f"{where}: keys {set(a) ^ set(b)}"
        for k in set(a) - skip:
            if k not in TIMING:
                same_data(a[k], b[k], f"{where}.{k}", skip)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same_data(x, y, f"{where}[{i}]", skip)
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-4, abs=2e-4), where
    else:
        assert a == b, where


@pytest.mark.usefixtures("one_thread")
def test_a_real_calibration_with_replicas_stores_the_runs_verdict_and_trials_it_stores_without(monkeypatch, tmp_path):
    """Real training on CPU in float32: the same calibration with and without --replicas (each layout's two seeds as
    replicas of one recall model, then the seed-0 LM half), and with replicas paused by --timeout and continued,
    stores the same runs (recall, recall_auc, steps to the target), verdict and seed-0 trials (every key, the recall
    model's curves included)."""
    import hlnas.recall.replicas as rr
    from hlnas.search.study import calibrate_study

    monkeypatch.chdir(tmp_path)  # the default folder of paused runs is ./hlnas-rungs
    units, real = [], rr.train_mqar_layouts
    monkeypatch.setattr(rr, "train_mqar_layouts", lambda *a, **k: (units.append([(str(lay), s) for lay, s in a[0]]),
                                                                    real(*a, **k))[1])
    url = f"sqlite:///{tmp_path}/c.db"
    # control_min 0: a control this small fails 0.9, which would stop the calibration before the runs compared here
    space = space_from_dict(real_space(calibration={"control_min": 0.0}))
    out = {}
    for name, replicas in (("plain", False), ("rep", True), ("paused", True), ("family", "family")):
        if name == "paused":  # out of time at once: the first layout's replicas pause at their first check
            events = []
            assert calibrate_study(space, storage=url, study_name=name, workers=1, replicas=True, time_limit=0.05,
                                   on_event=lambda k, d: events.append((k, d)))[0] is None
            assert [d["key"] for k, d in events if k == "calibration_run_paused"] == ["control:transformer:s0",
                                                                                   "control:transformer:s1"]
            assert "hlnas_calibration" not in optuna.load_study(study_name=name, storage=url).user_attrs  # none stored
        calibrate_study(space, storage=url, study_name=name, workers=1, replicas=replicas)
        study = optuna.load_study(study_name=name, storage=url)
        trials = {t.user_attrs["calibration"]: t for t in study.get_trials(deepcopy=False)}
        out[name] = (study.user_attrs["hlnas_calibration"], trials)
    # one replica run per layout (both seeds), the paused one once more; with family the control, then HGRN's pure
    # and 3:1 layouts with both seeds each in one mixed model
    per_layout = [[("AAA", [0, 1])], [("HHH", [0, 1])], [("HHA", [0, 1])]]
    assert units[:3] == per_layout and units[3:7] == [per_layout[0]] + per_layout
    assert units[7:] == [[("AAA", [0, 1])], [("HHH", [0, 1]), ("HHA", [0, 1])]]
    cal_a, trials_a = out["plain"]
    for name in ("rep", "paused", "family"):
        cal_b, trials_b = out[name]
        assert cal_a["status"] == cal_b["status"] and len(cal_b["runs"]) == 6
        # a replica run also stores how many runs trained with it (collect.py shares its recall time out by it)
        assert {r.get("mqar_replicas") for r in cal_b["runs"].values()} == ({2, 4} if name == "family" else {2})
        same_data(cal_a["runs"], cal_b["runs"], f"{name} runs", skip={"mqar_replicas"})
        same_data(cal_a["verdict"], cal_b["verdict"], f"{name} verdict")
        assert all(r["status"] == "ok" and r.get("recall_auc") is not None for r in cal_b["runs"].values())
        assert sorted(trials_a) == sorted(trials_b) == ["control:transformer:s0", "hybrid:hgrn:s0", "pure:hgrn:s0"]
        for key, t in trials_a.items():
            u = trials_b[key]
            assert (t.state, t.params) == (u.state, u.params) and t.values == pytest.approx(u.values, abs=1e-6)
            # a run that may pause reports its budget and whether it finished (as without replicas)
            same_data(t.user_attrs, u.user_attrs, f"{name} {key}",
                      skip=({"mqar_budget", "mqar_finished"} & set(u.user_attrs)) | {"mqar_replicas"})
            assert u.user_attrs.get("mqar_finished", True)
    # the sweep ran as without: some layout's seed needed its second rate
    assert any(len(t.user_attrs["mqar"]["runs"]) == 2 for t in trials_b.values()) or any(
        r["mqar_lr"] == 1e-2 for r in cal_b["runs"].values())


@pytest.mark.usefixtures("one_thread")
def test_a_unit_whose_replicas_cannot_train_runs_each_seed_alone(monkeypatch):
    """Replicas that fail (out of memory where one run fits, a module with no replicated form) leave each run of the
    unit to train alone: the results are the solo runs', with replicas_error saying why."""
    import dataclasses

    import hlnas.recall.replicas as rr
    from hlnas.search.records import layout_spec
    from hlnas.search.trial import run_trial

    space = space_from_dict(real_space())
    specs = [layout_spec(space, -1 - s, "HHA", seed=s, recall_only=True) for s in (0, 1)]
    alone = [run_trial(s) for s in specs]

    def no_room(*a, **k):
        raise RuntimeError("no room for 2 replicas")

    monkeypatch.setattr(rr, "train_mqar_layouts", no_room)
    got = run_trial(dataclasses.replace(specs[0], replicas=(specs[1],)))
    for a, g in zip(alone, (got, *got.replicas)):
        assert (g.number, g.status) == (a.number, "ok") and g.metrics["replicas_error"] == "RuntimeError: no room for 2 replicas"
        same_data(a.metrics, {k: v for k, v in g.metrics.items() if k != "replicas_error"}, f"run {a.number}")


@pytest.mark.usefixtures("one_thread")
def test_a_replica_runs_wall_time_includes_the_recall_it_shared():
    """Runs trained as replicas get their recall before their LM halves; their stored wall_s (what the grid reports
    as a candidate's seconds, and what the tabular benchmark splits into recall and LM time) still holds both."""
    import dataclasses

    from hlnas.search.records import layout_spec
    from hlnas.search.trial import run_trial

    raw = real_space()
    raw["scale"]["score"]["mqar"].update(steps=60, eval_every=20, lrs=[3e-3])  # long enough to time: 0.3 s or more
    space = space_from_dict(raw)
    # as the calibration's units: seed 0 with its LM half (a trial of the search), seed 1 recall only
    specs = [layout_spec(space, -1 - s, "HHA", seed=s, recall_only=s == 1) for s in (0, 1)]
    got = run_trial(dataclasses.replace(specs[0], replicas=(specs[1],)))
    slack = 0.05  # mqar_s is rounded to 0.1 s
    for r in (got, *got.replicas):
        assert r.status == "ok" and r.metrics.get("replicas_error") is None
        assert r.metrics["mqar_s"] >= 0.2 and r.wall_s + slack >= r.metrics["mqar_s"]
    assert got.metrics["train_wall_s"] > 0
    assert got.wall_s + slack >= got.metrics["mqar_s"] + got.metrics["train_wall_s"]


@pytest.mark.usefixtures("one_thread")
def test_a_cuda_error_in_the_replicas_fails_every_run_of_the_unit_instead_of_training_them_alone(monkeypatch):
    """A CUDA error leaves the process's context unusable (the delta-rule probe's misaligned address on 2026-12-06:
    each seed then 'trained alone' in the dead context and failed with the error's tail). The unit's runs fail at once
    as cuda_error, so the executor replaces the worker, each with the replicas' own error."""
    import dataclasses

    import hlnas.recall.replicas as rr
    from hlnas.search.records import layout_spec
    from hlnas.search.trial import run_trial

    space = space_from_dict(real_space())
    specs = [layout_spec(space, -1 - s, "HHA", seed=s, recall_only=True) for s in (0, 1)]
    solo = []

    def misaligned(*a, **k):
        raise RuntimeError("CUDA error: misaligned address")

    monkeypatch.setattr(rr, "train_mqar_layouts", misaligned)
    monkeypatch.setattr("hlnas.search.trial._run_one", lambda *a, **k: solo.append(a) or pytest.fail("trained alone"))
    got = run_trial(dataclasses.replace(specs[0], replicas=(specs[1],)))
    assert not solo
    for s, g in zip(specs, (got, *got.replicas)):
        assert (g.number, g.status, g.error_kind) == (s.number, "failed", "cuda_error")
        assert g.metrics["replicas_error"] == "RuntimeError: CUDA error: misaligned address"
        assert g.error.startswith("RuntimeError: CUDA error: misaligned address")


def test_family_replicas_submit_each_mixers_layouts_as_one_unit_and_store_the_same_runs(monkeypatch, tmp_path):
    """--replicas family: the control's seeds are one unit, and each mixer's pure and 3:1 runs at both seeds
    another (one mixed recall model), the seed-0 runs whole trials; the stored runs, verdict and trials are as
    without replicas."""
    specs = []
    unit, calls = fake_unit_trial({})
    monkeypatch.setattr(executors, "run_trial", lambda spec: (specs.append(spec), unit(spec))[1])
    url = f"sqlite:///{tmp_path}/c.db"
    plain = run_search(space_from_dict(raw_space()), storage=url, study_name="plain", n_trials=5, calibrate_only=True)
    specs.clear()
    fam = run_search(space_from_dict(raw_space()), storage=url, study_name="fam", n_trials=5, calibrate_only=True,
                     replicas="family")
    runs = [sorted((s.layout, s.recipe.train.seed, s.recall_only) for s in (u, *u.replicas)) for u in specs]
    assert runs[0] == [("AAAAAA", 0, False), ("AAAAAA", 1, True)]
    assert sorted(len(r) for r in runs) == [2, 4, 4]  # each mixer pure and 3:1, two seeds each
    for r in runs[1:]:
        assert len({lay.replace("A", "")[:1] for lay, *_ in r}) == 1  # one linear mixer a unit
        assert sorted(seed for _, seed, _ in r) == [0, 0, 1, 1] and len({lay for lay, *_ in r}) == 2
        assert all(only == (seed == 1) for _, seed, only in r)
    a, b = plain.user_attrs["hlnas_calibration"], fam.user_attrs["hlnas_calibration"]
    strip = lambda runs: {k: {f: v for f, v in r.items() if f != "trial"} for k, r in runs.items()}  # noqa: E731
    assert strip(a["runs"]) == strip(b["runs"]) and a["verdict"] == b["verdict"]  # trial numbers follow the units' order
    assert len(fam.get_trials(states=(TrialState.COMPLETE,))) == 5


def test_a_calibration_with_extra_ratios_trains_the_whole_grid_in_family_units_and_the_search_adopts_it(monkeypatch,
                                                                                                     tmp_path):
    """calibration.extra_ratios covering the space's other ratio (6:1) with --mixed-replicas: each mixer's pure, 6:1
    and 3:1 at both seeds are one unit, and the search that follows trains nothing: every candidate is a calibration
    run's seed-0 trial."""
    import dataclasses

    from tests.test_calibrated_recall import fake_with_results

    specs, one = [], fake_with_results([])  # whole fresh-model results, so the calibration keeps them for seed 1

    def unit(spec):
        specs.append(spec)
        return dataclasses.replace(one(dataclasses.replace(spec, replicas=())), replicas=tuple(map(one, spec.replicas)))

    monkeypatch.setattr(executors, "run_trial", unit)
    url = f"sqlite:///{tmp_path}/c.db"
    space = space_from_dict(raw_space(calibration={"extra_ratios": ["6:1"]}))
    study = run_search(space, storage=url, study_name="grid", n_trials=7, replicas="family")
    assert sorted(1 + len(s.replicas) for s in specs) == [2, 6, 6]  # the control; each mixer's 3 layouts x 2 seeds
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 7 and all(t.user_attrs.get("calibration") for t in done)
    assert study.user_attrs["hlnas_calibration"]["status"] == "valid"
    # extra_ratios are no part of the space's identity: the plain space resumes the study (and has nothing to train)
    specs.clear()
    run_search(space_from_dict(raw_space()), storage=url, study_name="grid", n_trials=7, resume=True)
    assert specs == []
    # seed 1 borrows that calibration (extra_ratios are not part of the protocol: the plain space may borrow it) and
    # trains only the LM halves: every layout's seed-1 recall was trained beside the calibration
    specs.clear()
    seed1 = space_from_dict(raw_space()).with_sets(["train.seed=1"])
    s1 = run_search(seed1, storage=url, study_name="grid_s1", n_trials=7, calibrated_by="grid")
    assert len(specs) == 7 and all(s.recipe.train.seed == 1 and s.recall is not None for s in specs)
    assert len(s1.get_trials(states=(TrialState.COMPLETE,))) == 7


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("oom", ["allocator", "cuda_call"])
def test_a_unit_out_of_gpu_memory_trains_in_halves_and_its_runs_continue_under_another_split(monkeypatch, tmp_path, oom):
    """A unit that runs out of GPU memory trains as two halves, one after the other (each a replicated model; here each
    half is one layout's two seeds), instead of every run alone; paused there, its runs continue in the whole unit's
    mixed model on a later call (state files named by layout and seed, optimizer moments by parameter name) and end
    with the results train_mqar gives each alone. Out of memory is the caching allocator's error or a CUDA call's own
    (``AcceleratorError: CUDA error: out of memory``, as a bench unit of 2026-12-06 met), not a poisoned context."""
    import torch

    import hlnas.recall.replicas as rr
    from hlnas.model.layout import Layout
    from hlnas.recall.proxy import paused_at, train_mqar
    from hlnas.search.records import layout_spec
    from hlnas.search.trial import _in_halves
    from tests.test_replicas import assert_same_recall

    raw = real_space()
    raw["scale"]["score"]["mqar"].update(target=None, lrs=[3e-3])
    spec = layout_spec(space_from_dict(raw), 0, "HHH", seed=0)
    runs = [(Layout.parse(t), s) for t in ("HHH", "HHA") for s in (0, 1)]
    sizes, real, small = [], rr.train_mqar_layouts, [True]

    def small_gpu(units, *a, **k):
        sizes.append(sum(len(seeds) for _, seeds in units))
        if small[0] and sizes[-1] > 2:
            raise (torch.OutOfMemoryError("CUDA out of memory (test)") if oom == "allocator"
                   else torch.AcceleratorError("CUDA error: out of memory"))
        return real(units, *a, **k)

    monkeypatch.setattr(rr, "train_mqar_layouts", small_gpu)
    with paused_at(str(tmp_path), 4):
        part = _in_halves(spec, runs, tag_layouts=True)
    assert sizes == [4, 2, 2] and not any(p["mqar_finished"] for p in part)
    assert sorted(f.name for f in tmp_path.glob("*.pt")) == sorted(f"mqar_{lay}_seed{s}_rate0.pt" for lay, s in runs)
    small[0] = False
    sizes.clear()
    with paused_at(str(tmp_path), None):
        got = _in_halves(spec, runs, tag_layouts=True)
    assert sizes == [4]
    for (lay, seed), g in zip(runs, got):
        solo = train_mqar(lay, spec.recipe.model, spec.recipe.score.mqar, seed=seed, device="cpu")
        assert_same_recall({k: v for k, v in g.items() if k not in ("mqar_budget", "mqar_finished")}, solo, f"{lay} {seed}")


def test_a_cuda_calls_out_of_memory_is_oom_and_other_cuda_errors_stay_sticky():
    """How a trial's failure is classified: a CUDA call's out of memory is "oom" (the context stays usable: a unit
    splits in halves, the worker lives on); another CUDA error is "cuda_error" (sticky: the executor replaces the
    worker); anything else that is not out of memory never splits a unit."""
    import torch

    from hlnas.search.trial import _classify

    assert _classify(torch.AcceleratorError("CUDA error: out of memory")) == "oom"
    assert _classify(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "oom"
    assert _classify(torch.AcceleratorError("CUDA error: an illegal memory access was encountered")) == "cuda_error"
    assert _classify(RuntimeError("shapes do not match")) == "other"

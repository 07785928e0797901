"""experiments/paper_grid's collect.py (a study -> one CSV row per candidate and seed; its CSV read back by compare.py)
and the grid protocol's recall models, on synthetic studies whose answers are known. No training: trials are written
with optuna's create_trial. compare.py's own tests: test_grid_compare.py."""

from __future__ import annotations

import csv
import pathlib

import optuna
import pytest

from hlnas.model.cost import layout_metrics
from hlnas.errors import HlnasError
from hlnas.model.layout import build_layout
from hlnas.space import load_space
from tests.helpers import paper_grid_script

ROOT = pathlib.Path(__file__).parents[1]
SPACE = str(ROOT / "search_spaces" / "paper_grid_h200_lr.yaml")


collect = paper_grid_script("collect")
compare = paper_grid_script("compare")


# -- collect.py -------------------------------------------------------------------------------------

def _study(url: str, name: str, space, trials: dict[str, dict], calibration: dict | None = None) -> optuna.Study:
    """An hlnas-like study: the space stored as hlnas does, one finished trial per layout given."""
    study = optuna.create_study(storage=url, study_name=name, directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("hlnas_space", space.to_dict())
    if calibration is not None:
        study.set_user_attr("hlnas_calibration", calibration)
    for layout, attrs in trials.items():
        ok = attrs.get("status", "ok") == "ok"
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
            values=[attrs.get("recall_auc", 0.0), 1.0, attrs.get("val_loss", 2.0)] if ok else None,
            user_attrs={"layout": layout, "status": "ok", **attrs}))
    return study


def _attrs(raw: float, auc: float, val_loss: float, mqar_s: float, train_s: float) -> dict:
    base = 0.25
    return {"recall_raw": raw, "recall_baseline": base, "recall_baseline_name": "copy_any",
            "recall": max(0.0, (raw - base) / (1 - base)), "recall_auc": auc, "mqar_steps_to_target": 800,
            "val_loss": val_loss, "mqar_s": mqar_s, "train_wall_s": train_s}


GLA_PURE, GLA_31 = str(build_layout("gla", "pure")), str(build_layout("gla", "3:1"))
HGRN_31, T = str(build_layout("hgrn", "3:1")), str(build_layout("transformer", None))


@pytest.fixture()
def grid(tmp_path):
    """Seed 0: three trials (GLA 3:1, the Transformer ok; HGRN 3:1 failed). Calibration: seed-1 runs of GLA pure and
    GLA 3:1 (recall only). A seed-1 study: GLA 3:1 (LM and recall) and the Transformer (its LM, and the calibration
    control's seed-1 recall)."""
    url = f"sqlite:///{tmp_path}/g.db"
    space = load_space(SPACE)
    s0 = _study(url, "grid", space, {
        GLA_31: _attrs(0.85, 0.40, 1.61, 30.0, 12.5), T: _attrs(0.99, 0.30, 1.70, 40.0, 20.0),
        HGRN_31: {"status": "failed", "error_kind": "nan", "mqar_s": 5.0}},
        calibration={"status": "valid", "runs": {
            "pure:gla:s1": {"key": "pure:gla:s1", "layout": GLA_PURE, "seed": 1, "status": "ok", "recall_raw": 0.2,
                            "recall_baseline": 0.25, "recall": 0.0, "recall_auc": 0.0, "mqar_s": 55.0},
            "hybrid:gla:s1": {"key": "hybrid:gla:s1", "layout": GLA_31, "seed": 1, "status": "ok", "recall_raw": 0.80,
                              "recall_baseline": 0.25, "recall": 0.7333, "recall_auc": 0.35, "mqar_s": 20.0},
            "hybrid:gla:s0": {"key": "hybrid:gla:s0", "layout": GLA_31, "seed": 0, "status": "ok", "recall_raw": 0.85,
                              "recall_baseline": 0.25, "recall": 0.8, "mqar_s": 30.0, "trial": 0}}})
    s1 = _study(url, "grid_s1", space.with_sets(["train.seed=1"]), {
        GLA_31: _attrs(0.88, 0.45, 1.62, 25.0, 13.0),
        T: {**_attrs(0.97, 0.28, 1.71, 44.0, 21.0), "recall_from": "grid:control:transformer:s1"}})
    return url, space, s0, s1


def test_collect_gives_a_row_per_candidate_and_seed_from_trials_the_seed_study_and_calibration(grid):
    url, space, s0, s1 = grid
    rows = collect.rows(s0, s1, concurrency=4)
    assert len(rows) == 2 * 31 and [r["seed"] for r in rows] == [0] * 31 + [1] * 31
    by = {(r["seed"], r["layout"]): r for r in rows}
    r = by[(0, GLA_31)]
    assert (r["status"], r["recall_raw"], r["recall_baseline"], r["recall_auc"], r["val_loss"]) == ("ok", 0.85, 0.25, 0.40, 1.61)
    assert r["recall"] == pytest.approx(0.8) and r["mqar_steps_to_target"] == 800 and r["source"] == "grid#0"
    assert (r["gpu_s"], r["concurrency"], r["gpu_s_est"]) == (42.5, 4, 10.62)  # 30 + 12.5 wall s; / 4 rounded
    m4, m32 = layout_metrics(GLA_31, space.model, 4096), layout_metrics(GLA_31, space.model, 32768)
    assert (r["kv_cache_bytes_4k"], r["kv_cache_bytes_32k"], r["params"]) == (m4["kv_cache_bytes"], m32["kv_cache_bytes"], m4["params"])
    assert r["kv_cache_bytes_32k"] == 8 * r["kv_cache_bytes_4k"] > 0
    assert by[(0, HGRN_31)]["status"] == "failed" and by[(0, HGRN_31)]["error_kind"] == "nan"
    assert by[(0, GLA_PURE)]["status"] == "not run" and by[(0, GLA_PURE)]["recall"] is None
    # seed 1: the seed study's full trial wins over calibration's recall-only run of the same layout
    r1 = by[(1, GLA_31)]
    assert (r1["recall_raw"], r1["val_loss"], r1["gpu_s"], r1["source"]) == (0.88, 1.62, 38.0, "grid_s1#0")
    # a seed-1 trial that trained its LM and took the calibration's seed-1 recall names that run
    assert by[(1, T)]["source"] == "grid_s1#1 (recall of grid:control:transformer:s1)" and by[(1, T)]["gpu_s"] == 65.0
    # a layout only calibration ran at seed 1: recall only, no LM
    c = by[(1, GLA_PURE)]
    assert (c["status"], c["recall_raw"], c["recall_baseline"], c["val_loss"], c["train_wall_s"], c["gpu_s"]) == \
        ("ok", 0.2, 0.25, None, None, 55.0)
    assert c["source"] == "grid calibration pure:gla:s1 (recall only)"
    assert by[(1, HGRN_31)]["status"] == "not run"
    # without the seed study, seed 1 is calibration's alone
    alone = {(r["seed"], r["layout"]): r for r in collect.rows(s0)}
    assert alone[(1, GLA_31)]["source"] == "grid calibration hybrid:gla:s1 (recall only)" and alone[(1, T)]["status"] == "not run"
    assert alone[(0, GLA_31)]["gpu_s_est"] is None


def test_collect_names_the_card_each_run_trained_on(tmp_path):
    """device_name from the trial (LM and recall) or the calibration run (recall only); blank where not stored."""
    url, space = f"sqlite:///{tmp_path}/c.db", load_space(SPACE)
    s0 = _study(url, "grid", space, {GLA_31: {**_attrs(0.85, 0.4, 1.6, 30.0, 12.0), "device_name": "NVIDIA H100 80GB HBM3"},
                                     T: _attrs(0.99, 0.3, 1.7, 40.0, 20.0)},
                calibration={"status": "valid", "runs": {"pure:gla:s1": {
                    "key": "pure:gla:s1", "layout": GLA_PURE, "seed": 1, "status": "ok", "recall_raw": 0.2,
                    "recall_baseline": 0.25, "recall": 0.0, "mqar_s": 55.0, "device_name": "NVIDIA H200"}}})
    by = {(r["seed"], r["layout"]): r for r in collect.rows(s0)}
    assert by[(0, GLA_31)]["device_name"] == "NVIDIA H100 80GB HBM3" and by[(0, T)]["device_name"] is None
    assert by[(1, GLA_PURE)]["device_name"] == "NVIDIA H200"


def test_collect_measures_each_rows_gpu_seconds_from_the_utilisation_counting_each_job_once(tmp_path):
    """--util: the GPU's busy time at each sample is split among the jobs active then: trials (started_at to
    finished_at), calibration runs that are no trial (their recall clock); a seed-0 calibration run is its trial's job,
    not a second one; a seed-1 trial that took a calibration run's recall adds that run's share."""
    import datetime as dt

    url, space, t0 = f"sqlite:///{tmp_path}/u.db", load_space(SPACE), 1796413000.0
    span = lambda a, b: {"started_at": t0 + a, "finished_at": t0 + b}  # noqa: E731
    clock = lambda end, s: {"result": {"mqar_s": s, "mqar": {"runs": [{"clock": [[100, t0 + end]], "resumed_s": 0.0}]}}}  # noqa: E731
    s0 = _study(url, "grid", space, {GLA_31: {**_attrs(0.85, 0.4, 1.6, 20.0, 0.0), **span(0, 20), "calibration": "hybrid:gla:s0"},
                                     T: {**_attrs(0.99, 0.3, 1.7, 20.0, 0.0), **span(10, 30)}},
                calibration={"status": "valid", "runs": {
                    k: {"key": k, "layout": lay, "seed": seed, "status": "ok", "mqar_s": 10.0}
                    for k, lay, seed in [("hybrid:gla:s0", GLA_31, 0), ("pure:gla:s1", GLA_PURE, 1), ("control:transformer:s1", T, 1)]}})
    for key, end in [("hybrid:gla:s0", 20), ("pure:gla:s1", 30), ("control:transformer:s1", 40)]:
        s0.set_user_attr(f"hlnas_calibration_recall:{key}", clock(end, 10.0))
    s1 = _study(url, "grid_s1", space.with_sets(["train.seed=1"]),
                {T: {**_attrs(0.97, 0.28, 1.71, 0.0, 10.0), **span(40, 50), "recall_from": "grid:control:transformer:s1"}})
    util = tmp_path / "gpu_util.csv"
    util.write_text("".join(f"{dt.datetime.fromtimestamp(t0 + 2 * i, dt.timezone.utc):%Y/%m/%d %H:%M:%S}.000, 100 %, 1 MiB\n"
                            for i in range(26)))
    by = {(r["seed"], r["layout"]): r.get("gpu_s_util") for r in collect.rows(s0, s1, util_paths=[util])}
    # [0,10) GLA alone 10; [10,20) GLA and T 5 each; [20,30) T and pure:gla:s1 5 each; [30,40) control s1 10; [40,50) s1's T 10
    assert (by[(0, GLA_31)], by[(0, T)], by[(1, GLA_PURE)], by[(1, T)]) == (15.0, 10.0, 5.0, 20.0)
    assert by[(0, HGRN_31)] is None and all(r.get("gpu_s_util") is None for r in collect.rows(s0, s1))
    # without the file of the call that ran the control's seed-1 run ([30, 40) unsampled), seed 1's Transformer row
    # is unknown, not its LM half alone (10): the grid's RetNet pure seed 1 had read 11.2 that way
    util.write_text("".join(f"{dt.datetime.fromtimestamp(t0 + 2 * i, dt.timezone.utc):%Y/%m/%d %H:%M:%S}.000, 100 %, 1 MiB\n"
                            for i in [*range(15), *range(20, 26)]))
    by = {(r["seed"], r["layout"]): r.get("gpu_s_util") for r in collect.rows(s0, s1, util_paths=[util])}
    assert by[(1, T)] is None and by[(0, GLA_31)] == 15.0


def test_collect_refuses_a_seed_study_that_is_not_a_second_seed_of_the_same_grid(grid, tmp_path):
    url, space, s0, _ = grid
    same_seed = _study(url, "again", space, {})
    with pytest.raises(HlnasError, match="trained with train.seed=0, the same seed as study 'grid'"):
        collect.rows(s0, same_seed)
    other = _study(url, "other", space.with_sets(["train.seed=1", "score.mqar.steps=100"]), {})
    with pytest.raises(HlnasError, match=r"another space than 'grid' \(differs in scale.score\)"):
        collect.rows(s0, other)
    bare = optuna.create_study(storage=url, study_name="bare")
    with pytest.raises(HlnasError, match="study 'bare' has no stored hlnas space"):
        collect.rows(bare)


def test_collect_command_writes_the_csv_and_names_a_missing_study_in_one_line(grid, tmp_path, capsys):
    url = grid[0]
    out = tmp_path / "res" / "grid.csv"
    assert collect.main(["--storage", url, "--study", "grid", "--seed-study", "grid_s1", "--out", str(out)]) == 0
    with open(out, newline="") as f:
        got = list(csv.DictReader(f))
    assert len(got) == 62 and list(got[0]) == collect.COLUMNS
    assert "candidates x seeds 0, 1; ok per seed: 0: 2, 1: 3" in capsys.readouterr().out
    assert collect.main(["--storage", url, "--study", "gird", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("collect.py: no study named 'gird'") and "Available: grid, grid_s1" in err and "\n" not in err
    assert collect.main(["--storage", url, "--study", "grid", "--concurrency", "0", "--out", str(out)]) == 2
    assert "--concurrency must be >= 1" in capsys.readouterr().err
    # the collected CSV goes through compare.py: calibration's recall-only row reads as no recall, beside its baseline
    text = compare.compare(got)
    assert "| gla | pure | 1 | 0.200 | 0.250 | 0.000 |" in text and "no recall |" in text


def test_collect_command_falls_back_to_the_calibration_when_the_seed_study_was_not_started(grid, tmp_path, capsys):
    """Before (or without) the seed-1 grid the README's command names a seed study the storage lacks: seed 1 then
    comes from the calibration's runs (recall only), with a warning, not a failed command."""
    out = tmp_path / "grid.csv"
    assert collect.main(["--storage", grid[0], "--study", "grid", "--seed-study", "grid_s9", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: no study named 'grid_s9'" in err and "calibration's runs alone (recall only)" in err
    with open(out, newline="") as f:
        by = {(r["seed"], r["layout"]): r for r in csv.DictReader(f)}
    assert by[("1", GLA_31)]["source"] == "grid calibration hybrid:gla:s1 (recall only)" and by[("1", GLA_31)]["val_loss"] == ""
    assert by[("1", T)]["status"] == "not run"


# -- the grid's recall protocol ----------------------------------------------------------------------

def test_the_grid_protocol_builds_its_recall_models_and_task():
    """A GPU session calibrates the grid's space as it is: it loads, every candidate's recall setup builds, the task's
    instances fit its length, and the first hybrid's recall model builds (its attention-input conv start valid)."""
    from hlnas.model.build import seeded_model
    from hlnas.recall.proxy import make_task, recall_setup

    space = load_space(SPACE)
    setups = [recall_setup(layout, space.model, space.score.mqar) for layout in space.candidates()]
    assert len(setups) == 31 and all(s.task.seq_len == space.score.mqar.seq_len for s in setups)
    x, y = make_task(setups[0].task, 4, 0, split="train")
    assert x.shape == (4, space.score.mqar.seq_len) and (y != -100).any()
    hybrid = next(s for s in setups if "A" in str(s.layout) and len(set(str(s.layout))) > 1)
    model = seeded_model(hybrid.layout, hybrid.model, 0)
    assert model(x).shape[:2] == x.shape


def test_collect_shares_a_replica_runs_recall_time_among_the_runs_trained_with_it():
    """A run trained as one of R replicas stores the set's whole recall time as its mqar_s (and R as mqar_replicas):
    its gpu_s counts 1/R of it, plus its own LM half; a solo run's is unchanged."""
    from experiments.paper_grid.collect import gpu_seconds

    assert gpu_seconds({"mqar_s": 100.0, "train_wall_s": 10.0, "mqar_replicas": 10}, None)["gpu_s"] == 20.0
    assert gpu_seconds({"mqar_s": 100.0, "train_wall_s": 10.0}, 2) == {
        "mqar_s": 100.0, "train_wall_s": 10.0, "gpu_s": 110.0, "concurrency": 2, "gpu_s_est": 55.0}
    assert gpu_seconds({"mqar_s": 40.0, "mqar_replicas": 4}, None)["gpu_s"] == 10.0  # a recall-only run


# -- the committed grid: its database and CSV -------------------------------------------------------

def test_the_committed_grid_database_reads_back_and_gives_the_committed_csv(tmp_path):
    """docs/results.md reports the grid from experiments/paper_grid/results: every study its database holds reads back
    (the probe spaces' files are gone, their studies keep them), and collect.py on the grid's two studies gives the
    committed CSV's recall and val loss, row for row."""
    import shutil

    from hlnas.space import space_from_dict

    results = ROOT / "experiments" / "paper_grid" / "results"
    db = tmp_path / "h200.db"
    shutil.copy(results / "h200_2026-12-05f.db", db)  # loading may write; the committed one stays as it is
    url = f"sqlite:///{db}"
    names = [s.study_name for s in optuna.get_all_study_summaries(url)]
    assert {"paper_grid_h200_lr", "paper_grid_h200_lr_s1", "placement_h200_lr", "placement_h200_lr_s1"} <= set(names)
    for name in names:
        space_from_dict(optuna.load_study(study_name=name, storage=url).user_attrs["hlnas_space"], where=name)
    s0, s1 = (optuna.load_study(study_name=n, storage=url) for n in ("paper_grid_h200_lr", "paper_grid_h200_lr_s1"))
    got = {(str(r["seed"]), r["layout"]): r for r in collect.rows(s0, s1)}
    with open(results / "grid_h200_lr_2026-12-05.csv", newline="") as f:
        want = {(r["seed"], r["layout"]): r for r in csv.DictReader(f)}
    assert len(want) == 62 and set(got) == set(want)
    for key, row in want.items():
        assert got[key]["recall_raw"] == pytest.approx(float(row["recall_raw"])), key
        assert got[key]["val_loss"] == pytest.approx(float(row["val_loss"])), key

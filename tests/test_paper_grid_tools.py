"""experiments/paper_grid's collect.py (a study -> one CSV row per candidate and seed) on synthetic studies
whose answers are known. No training: trials are written with optuna's create_trial."""

from __future__ import annotations

import csv
import importlib.util
import pathlib

import optuna
import pytest

from hlnas.budget import layout_metrics
from hlnas.errors import HlnasError
from hlnas.layout import build_layout
from hlnas.space import load_space

ROOT = pathlib.Path(__file__).parents[1]
SPACE = str(ROOT / "search_spaces" / "paper_grid_h200.yaml")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"paper_grid_{name}", ROOT / "experiments" / "paper_grid" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


collect = _script("collect")


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
    GLA 3:1 (recall only). A seed-1 study: GLA 3:1 (LM and recall) and the Transformer."""
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
        GLA_31: _attrs(0.88, 0.45, 1.62, 25.0, 13.0), T: _attrs(0.97, 0.28, 1.71, 44.0, 21.0)})
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

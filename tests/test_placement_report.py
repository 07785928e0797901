"""Which placement a layout has (hlnas.model.layout.placement_of), the GPU placement extension's space against the
grid's, and collect.py's placement and ratio columns for a placement study. No training: trials are written with
optuna's create_trial."""

from __future__ import annotations


import optuna
import pytest

from hlnas.model.layout import PLACEMENTS, Layout, attention_indices, build_layout, placement_of
from hlnas.space import load_space
from tests.helpers import paper_grid_script
from tests.test_paper_grid_tools import ROOT

collect = paper_grid_script("collect")
# a placement study at CPU size: HGRN and HGRN-2 at 6:1 and 3:1 over 6 layers, every distinct placement and one
# explicit set each (22 candidates), on the default space's recall protocol
TWIN = """
name: placement_tiny
mixers: [hgrn, hgrn2]
ratios: ["6:1", "3:1"]
placements: [paper, front, back, middle, spread]
attention_sets:
  - [1]
  - [1, 4]
transformer: false
layers: 6
scale:
  preset: proxy-tiny
  train: {tokens: 32768, seq_len: 64, batch_size: 8, lr: 3.0e-3, val_batches: 4}
  data: {source: synthetic}
  score: {objectives: [val_loss, mqar], mqar: {seq_len: 32, kv_pairs: 4, vocab: 32, batch: 16, steps: 1200}}
objectives:
  - {name: recall, metric: recall}
  - {name: kv_cache, metric: kv_cache_bytes}
  - {name: val_loss, metric: val_loss}
sampler: grid
"""


def _twin(tmp_path):
    path = tmp_path / "placement_tiny.yaml"
    path.write_text(TWIN)
    return load_space(str(path))


# -- placement_of -----------------------------------------------------------------------------------

@pytest.mark.parametrize("n, ratio", [(24, "6:1"), (24, "3:1"), (24, "12:1"), (6, "3:1")])
def test_placement_of_names_every_strategy_that_built_the_layout(n, ratio):
    seen = {}
    # group counts r linear layers per attention layer, so its layouts are other ratios' (24 layers, group 3:1 is paper
    # 4:1): tests/test_layout.py::test_group_placement_is_r_linear_layers_then_attention
    for name in (p for p in PLACEMENTS if p != "group"):
        lay = build_layout("hgrn", ratio, n, name)
        seen.setdefault(lay.attention_layers, name)  # two strategies giving one set: the first listed names it
        assert placement_of(lay) == seen[lay.attention_layers]
    assert placement_of(build_layout("hgrn", ratio, n, "paper")) == "paper"


def test_placement_of_calls_the_rest_explicit_and_has_none_for_pure_or_all_attention():
    assert placement_of(build_layout("gla", None, 24, [1, 4, 7, 10, 13, 16, 19, 22])) == "explicit:1,4,7,10,13,16,19,22"
    assert placement_of(Layout.parse("HAAHHH")) == "explicit:1,2"  # 2 of 6: paper would be [2, 5]
    assert placement_of(Layout.parse("HAHHH")) == "explicit:1"  # 1 of 5: a ratio, but no strategy puts it there
    assert placement_of(build_layout("hgrn", "24:1", 24, "back")) == "paper"  # at 24:1 back is the paper placement
    assert placement_of(build_layout("hgrn", "pure", 24)) is None
    assert placement_of(build_layout("transformer", None, 24)) is None
    assert attention_indices(6, "6:1", "spread") == (3,)  # the CPU twin's layouts below rely on it


def test_the_placement_extension_runs_the_grids_recall_protocol_so_it_may_borrow_its_calibration():
    """experiments/paper_grid/placement_h200_lr.yaml takes paper_grid_h200_lr's calibration (--calibrated-by), which is
    honest only while the two spaces' depth, scale and calibration are the same: an edit to one alone fails here."""
    from hlnas.search.calibration import protocol_differences

    grid = load_space(str(ROOT / "search_spaces" / "paper_grid_h200_lr.yaml"))
    place = load_space(str(ROOT / "experiments" / "paper_grid" / "placement_h200_lr.yaml"))
    assert protocol_differences(grid, place) == [] and set(place.mixers) <= set(grid.mixers)
    assert set(place.mixers) == {"hgrn2", "gated_deltanet"} and set(place.ratios) == {"6:1", "3:1"}
    assert {"paper", "front", "back", "middle", "spread"} <= set(place.placements) and place.attention_sets
    changed = place.with_sets(["score.mqar.batch=32"])
    assert protocol_differences(grid, changed) == [f"scale.score.mqar.batch: {grid.score.mqar.batch} -> 32"]
    from hlnas.calibration.protocol import plan

    assert plan(place)  # its calibration section is valid for its own mixers (e.g. no mixer_order of the grid's)


# -- collect.py on a placement study ------------------------------------------------------------------

def test_collect_labels_each_placement_row_with_its_own_ratio_and_placement(tmp_path):
    """The explicit 3:1 set [1, 4] reaches the grid with ratio 6:1 in its params (the first listed): the row must say
    3:1, or the analysis would set a 2-attention-layer model among the 1-layer ones."""
    space = _twin(tmp_path)
    url = f"sqlite:///{tmp_path}/p.db"
    study = optuna.create_study(storage=url, study_name="placement_tiny", directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("hlnas_space", space.to_dict())
    rows = collect.rows(study)
    assert len(rows) == 22 and {r["status"] for r in rows} == {"not run"}
    by = {r["layout"]: r for r in rows}
    assert (by["HAHHAH"]["ratio"], by["HAHHAH"]["placement"]) == ("3:1", "explicit:1,4")
    assert (by["NANNNN"]["ratio"], by["NANNNN"]["placement"]) == ("6:1", "explicit:1")
    assert (by["HHAHHA"]["ratio"], by["HHAHHA"]["placement"]) == ("3:1", "paper")
    assert (by["AHHHHA"]["ratio"], by["AHHHHA"]["placement"]) == ("3:1", "spread")
    assert sorted(r["placement"] for r in rows if r["mixer"] == "hgrn" and r["ratio"] == "6:1") == \
        ["explicit:1", "front", "middle", "paper", "spread"]


def test_collect_gives_a_borrowing_study_the_lenders_calibration_runs_until_its_own_trial_ran(tmp_path, capsys):
    """A placement study borrowed the grid's calibration (--calibrated-by): its paper rows show the lender's calibration
    runs (recall only) at every seed until the study's own trial of that layout ran; collect.main finds the lender."""
    space = _twin(tmp_path)
    url = f"sqlite:///{tmp_path}/p.db"
    paper31, paper61 = str(build_layout("hgrn", "3:1", 6)), str(build_layout("hgrn", "6:1", 6))
    run = lambda key, lay, seed, raw: {"key": key, "layout": lay, "seed": seed, "status": "ok", "recall_raw": raw,  # noqa: E731
                                       "recall_baseline": 0.25, "recall": (raw - 0.25) / 0.75, "mqar_s": 9.0}
    lend = optuna.create_study(storage=url, study_name="tiny", directions=["maximize", "minimize", "minimize"])
    lend.set_user_attr("hlnas_calibration", {"status": "valid", "runs": {
        "hybrid:hgrn:s0": run("hybrid:hgrn:s0", paper31, 0, 0.97), "hybrid:hgrn:s1": run("hybrid:hgrn:s1", paper31, 1, 0.94),
        "ladder:hgrn:s0": run("ladder:hgrn:s0", paper61, 0, 0.91)}})
    study = optuna.create_study(storage=url, study_name="placement_tiny", directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("hlnas_space", space.to_dict())
    study.set_user_attr("hlnas_calibration", {"status": "valid", "verdict": {}, "borrowed_from": {"study": "tiny"}})
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, values=[0.5, 1.0, 2.0], user_attrs={
        "layout": paper61, "status": "ok", "recall_raw": 0.99, "recall_baseline": 0.25, "recall": 0.9867, "val_loss": 1.9}))
    assert collect.lender(study) == "tiny" and collect.lender(lend) is None
    by = {(r["seed"], r["layout"]): r for r in collect.rows(study, lent=lend)}
    assert (by[(0, paper31)]["recall_raw"], by[(0, paper31)]["val_loss"]) == (0.97, None)
    assert by[(0, paper31)]["source"] == "tiny calibration hybrid:hgrn:s0 (recall only)"
    assert by[(1, paper31)]["recall_raw"] == 0.94 and by[(1, paper31)]["placement"] == "paper"
    assert by[(0, paper61)]["source"] == "placement_tiny#0" and by[(0, paper61)]["val_loss"] == 1.9  # its own trial wins
    assert by[(0, str(build_layout("hgrn", "3:1", 6, placement="front")))]["status"] == "not run"
    assert {r["seed"] for r in by.values()} == {0, 1}
    assert {r["status"] for r in collect.rows(study) if r["layout"] == paper31} == {"not run"}  # without the lender
    out = tmp_path / "p.csv"
    assert collect.main(["--storage", url, "--study", "placement_tiny", "--out", str(out)]) == 0
    assert "tiny calibration hybrid:hgrn:s1 (recall only)" in out.read_text()
    # a lender the storage lacks (kept elsewhere) is a warning, and the rows it would have given are 'not run'
    optuna.delete_study(study_name="tiny", storage=url)
    capsys.readouterr()
    assert collect.main(["--storage", url, "--study", "placement_tiny", "--out", str(out)]) == 0
    assert "warning" in capsys.readouterr().err and "tiny calibration" not in out.read_text()

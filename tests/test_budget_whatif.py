"""experiments/paper_grid/budget_whatif.py: the grid replayed under shorter recall budgets from its stored curves."""

from __future__ import annotations

import pytest

from tests.helpers import paper_grid_script

bw = paper_grid_script("budget_whatif")

TOP = 4000


def _row(study, n, mixer, ratio, seed, recall, steps_to, gpu, mqar_s=90.0, train_s=10.0, base=0.016):
    return {"mixer": mixer, "ratio": ratio, "seed": str(seed), "status": "ok", "source": f"{study}#{n} (a note)",
            "recall": str(recall), "recall_raw": str(base + recall * (1 - base)), "recall_baseline": str(base),
            "recall_auc": "0.5", "val_loss": "2.0", "mqar_steps_to_target": str(steps_to or ""),
            "mqar_s": str(mqar_s), "train_wall_s": str(train_s), "gpu_s_util": str(gpu)}


def _curve(take_off, stop=None, top=TOP):
    """Checks every 100 steps: 0 until ``take_off``, then 0.99; a run with ``stop`` ends there (target reached)."""
    steps = tuple(range(100, (stop or top) + 1, 100))
    return steps, tuple(0.0 if take_off is None or s < take_off else 0.99 for s in steps)


def test_a_run_cut_before_its_take_off_loses_its_recall_and_most_of_its_cost():
    row = _row("g", 0, "hgrn", "12:1", 0, 0.99, None, gpu=100.0)  # learned late and never stopped (at 0.99 < target)
    out = bw.at_budget(row, _curve(2100), 2000)
    assert float(out["recall"]) == 0.0 and out["mqar_steps_to_target"] == ""
    assert float(out["recall_raw"]) == pytest.approx(0.016)
    assert float(out["gpu_s_util"]) == pytest.approx(10 + 90 * 2000 / 4000)  # the LM part whole, the recall part half
    assert float(out["recall_auc"]) == 0.0
    kept = bw.at_budget(row, _curve(2100), 3000)
    assert float(kept["recall"]) == pytest.approx(0.99) and float(kept["recall_auc"]) > 0


def test_a_run_that_stopped_at_its_target_before_the_budget_is_unchanged_but_for_its_graded_measure():
    row = _row("g", 1, "gla", "3:1", 0, 0.995, 500, gpu=20.0)
    curve = _curve(300, stop=500)
    out = bw.at_budget(row, curve, 1000)
    assert (out["recall"], out["mqar_steps_to_target"], float(out["gpu_s_util"])) == ("0.995", "500", 20.0)
    # held at its last value to the end of the budget: (0.99 * 800 - the ramp from 200 to 300) / 1000
    assert float(out["recall_auc"]) == pytest.approx((0.99 / 2 * 100 + 0.99 * 700) / 1000, abs=1e-4)


def test_the_report_counts_cells_that_stop_learning_and_keeps_the_full_budget_row_as_measured():
    rows, curves = [], {}
    for seed, study in ((0, "g"), (1, "g_s1")):
        for n, (mixer, ratio, take_off, stop) in enumerate([("retnet", "12:1", 2100, 3000), ("gla", "3:1", 300, 500),
                                                            ("hgrn", "pure", None, None)]):
            learned = take_off is not None
            rows.append(_row(study, n, mixer, ratio, seed, 0.99 if learned else 0.0, stop, gpu=50.0))
            curves[(study, n)] = _curve(take_off, stop)
    text = bw.report(rows, curves, [2000, 4000])
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in text.splitlines() if ln.startswith("| ") and ln[2].isdigit()}
    assert "retnet 12:1 (2/2 -> 0/2)" in lines["2000"]
    assert lines["4000"].endswith("| none |") and "| 50.0 |" in lines["4000"]
    assert float(lines["2000"].split(" | ")[1]) < 50.0


@pytest.mark.parametrize("budgets, words", [("x", "expected positive integers"), ("0,1000", "expected positive integers")])
def test_bad_budgets_are_one_line_errors_before_anything_is_read(tmp_path, capsys, budgets, words):
    args = ["--storage", f"sqlite:///{tmp_path / 'none.db'}", "--study", "g", "--table", str(tmp_path / "none.csv"),
            "--budgets", budgets, "--out", str(tmp_path / "o.md")]
    assert bw.main(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert not (tmp_path / "o.md").exists()

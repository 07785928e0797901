"""experiments/paper_grid's compare.py (a collected grid CSV against the paper: Spearman with Table 7, the paper's three
findings, the cells, cost), on synthetic tables whose answers are known."""

from __future__ import annotations


import pytest

from hlnas.analysis.paper import recall_by_ratio
from tests.helpers import paper_grid_script, write_csv

compare = paper_grid_script("compare")

# -- compare.py: Spearman with Table 7 ------------------------------------------------------------

def _row(mixer, ratio, seed, recall, auc=None, val_loss=None, base=0.34, **extra):
    raw = base - 0.04 if recall <= 0 else base + recall * (1 - base)
    return {"mixer": mixer, "ratio": ratio, "seed": str(seed), "status": "ok", "recall": str(recall),
            "recall_raw": f"{raw:.6f}", "recall_baseline": str(base), "recall_auc": "" if auc is None else str(auc),
            "val_loss": "" if val_loss is None else str(val_loss), **{k: str(v) for k, v in extra.items()}}


def test_spearman_against_table7_over_the_cells_both_have_with_a_bootstrap_interval():
    t7 = recall_by_ratio()
    mixers = [m for m in t7 if m != "average"]
    # recall in Table 7's order, recall_auc in its reverse; the second seed repeats the first
    rows = [_row(m, q, s, t7[m][q] / 2, auc=1 - t7[m][q]) for s in (0, 1) for m in mixers for q in compare.RATIOS]
    rows.append(_row("transformer", "full", 0, 0.9, auc=0.9))  # not a Table 7 cell
    rows = [r for r in rows if not (r["mixer"] == "gla" and r["ratio"] == "3:1")]  # a cell the grid lacks
    cs = compare.cells(rows)
    up, down = compare.table7_rho(cs, "recall"), compare.table7_rho(cs, "recall_auc")
    assert (up["n"], up["of"], up["rho"], up["lo"], up["hi"]) == (19, 20, pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0))
    assert (down["rho"], down["lo"], down["hi"]) == (pytest.approx(-1.0), pytest.approx(-1.0), pytest.approx(-1.0))
    # beside every rho, the attention share's alone and the partial rho with the share held fixed
    assert up["share"].rho == down["share"].rho < 0.9 and up["share"].n == 19
    assert (up["partial"].rho, down["partial"].rho) == (pytest.approx(1.0), pytest.approx(-1.0))
    text = compare.compare(rows)
    share = compare.rho_text(up["share"])
    assert f"| recall | 19 of 20 | +1.000 [+1.00, +1.00] | {share} | +1.000 [+1.00, +1.00] |" in text
    assert f"| recall_auc | 19 of 20 | -1.000 [-1.00, -1.00] | {share} | -1.000 [-1.00, -1.00] |" in text
    assert "Table 7 cells not scored here: gla 3:1." in text
    # hlnas validate's saturation and seed lines, per measure; the two seeds agree, so no cell is split
    assert "\nrecall:\n- saturation: " in text and "- split cells (a seed with corrected recall >= 0.5, another below): 0" in text
    # a noisy order: the interval holds rho, is not a point, and the same inputs give the same interval
    noisy = [dict(r) for r in rows]
    for i, r in enumerate(noisy):
        r["recall"] = str(float(r["recall"]) + (0.05 if i % 3 == 0 else -0.05))
    a, b = compare.table7_rho(compare.cells(noisy), "recall"), compare.table7_rho(compare.cells(noisy), "recall")
    assert a["lo"] < a["rho"] < a["hi"] and a["lo"] < a["hi"] and (a["lo"], a["hi"]) == (b["lo"], b["hi"])
    assert -1.0 <= a["lo"] and a["hi"] <= 1.0 and a["rho"] < 0.99


# -- compare.py: the three findings --------------------------------------------------------------

RECALL = {"hgrn": [0.10, 0.20, 0.30, 0.40, 0.50], "gla": [0.0] * 5, "hgrn2": [0.50, 0.52, 0.55, 0.58, 0.60],
          "deltanet": [0.20, 0.40, 0.60, 0.80, 0.95]}
AUC = {"hgrn": [0.30, 0.25, 0.20, 0.15, 0.10], "gla": [0.0] * 5, "hgrn2": [0.90, 0.80, 0.70, 0.60, 0.50],
       "deltanet": [0.30, 0.25, 0.20, 0.15, 0.10]}
LOSS = {"hgrn": [1.50, 1.505, 1.51, 1.505, 1.50], "gla": [2.0, 1.9, 1.8, 1.7, 1.6], "hgrn2": [1.40] * 5,
        "deltanet": [1.45, 1.46, 1.45, 1.46, 1.45]}


def findings_rows(recall=RECALL):
    rows = []
    for seed, d in ((0, -0.005), (1, 0.005)):
        for m, vals in recall.items():
            for i, q in enumerate(compare.RATIOS):
                rec = vals[i] + d if vals[i] > 0 else 0.0
                rows.append(_row(m, q, seed, round(rec, 4), auc=round(AUC[m][i] + d if AUC[m][i] else 0.0, 4),
                                 val_loss=round(LOSS[m][i] + 2 * d, 4)))
        rows.append(_row("transformer", "full", seed, 0.99, auc=0.99, val_loss=1.3))
    return rows


def test_the_three_findings_on_a_table_whose_answers_are_known():
    cs = compare.cells(findings_rows())
    lines, res = compare.findings_table(cs)
    # (i) 3 of 4 mixers flat: their val-loss range (<= 0.01) is inside 2x the seed spread (0.02); gla's 0.4 is not
    f = res["lm_flat"]
    assert f["verdict"] == "yes" and sorted(f["flat"]) == ["deltanet", "hgrn", "hgrn2"] and len(f["judged"]) == 4
    assert f["per_mixer"]["gla"]["range"] == pytest.approx(0.4) and f["between_mixers"] == pytest.approx(1.8 - 1.4)
    # (ii) recall rises for hgrn, hgrn2, deltanet (gla never leaves its baseline); recall_auc falls everywhere
    r = res["rises_recall"]
    assert r["verdict"] == "yes" and sorted(r["rising"]) == ["deltanet", "hgrn", "hgrn2"]
    assert r["per_mixer"]["deltanet"]["rho"] == pytest.approx(1.0) and r["per_mixer"]["hgrn2"]["gap"] == pytest.approx(0.10)
    assert res["rises_recall_auc"]["verdict"] == "no" and res["rises_recall_auc"]["rising"] == []
    # (iii) by recall the best pure (hgrn2 .50) is not the best 3:1 (deltanet .95 vs hgrn2's .60) nor on average
    b = res["best_recall_3:1"]
    assert (b["verdict"], b["pure"], b["hybrid"]) == ("yes", "hgrn2", "deltanet") and b["margin"] == pytest.approx(0.35)
    assert res["best_recall_average"]["verdict"] == "yes" and res["best_recall_average"]["margin"] == pytest.approx(0.6875 - 0.5625)
    # by recall_auc hgrn2 is best pure and best hybrid: the finding does not hold
    assert res["best_recall_auc_3:1"]["verdict"] == "no" and res["best_recall_auc_average"]["hybrid"] == "hgrn2"
    text = "\n".join(lines)
    assert "| (i) LM quality flat across ratios | yes | flat (val loss range over ratios within 2x its seed spread) for 3 of 4" in text
    assert "| (ii) recall rises with the attention share | yes | 3 of 4 mixers rise" in text
    assert "| (ii) recall_auc rises with the attention share | no | 0 of 4" in text
    # every recall printed has its no-recall baseline beside it; gla is marked
    assert "best pure: hgrn2 pure 0.500 (raw 0.670, no-recall 0.340)" in text
    assert "gla pure 0.000 (raw 0.300, no-recall 0.340) **no recall**" in text
    full = compare.compare(findings_rows())
    assert "| gla | pure | 2 | 0.300 | 0.340 | 0.000 | 0.000 |" in full and full.count("| no recall |") == 5


def test_a_gap_inside_the_seed_spread_is_undecided_not_yes():
    close = dict(RECALL, deltanet=[0.20, 0.40, 0.60, 0.80, 0.61])  # deltanet 3:1 .61 vs hgrn2 3:1 .60
    rows = findings_rows(close)
    for r in rows:  # widen the seed spread of the 3:1 cells to 0.02
        if r["ratio"] == "3:1" and r["mixer"] in ("deltanet", "hgrn2"):
            r["recall"] = str(float(r["recall"]) + (0.005 if r["seed"] == "1" else -0.005))
    b = compare.best_pure_vs_hybrid(compare.cells(rows), "recall", "3:1")
    assert (b["pure"], b["hybrid"], b["verdict"]) == ("hgrn2", "deltanet", "undecided") and b["margin"] == pytest.approx(0.01)
    # one seed of val loss: no seed spread, so flatness cannot be judged
    one = [r for r in findings_rows() if r["seed"] == "0"]
    assert compare.lm_flat(compare.cells(one))["verdict"] == "undecided"


def test_the_best_pure_mixer_leading_the_hybrids_inside_the_seed_spread_is_undecided_not_no():
    """(iii)'s 'no' (the best standalone mixer is also the best hybrid) needs its hybrid ahead of every other mixer's
    by more than twice the spread, as 'yes' does: on 2026-12-04's calibration rows deltanet led hgrn's recall_auc
    averaged over the hybrid ratios by 0.014 against 2x spread 0.024 and compare.py said 'no'."""
    auc = {"deltanet": [0.898, None, None, 0.907, 0.911], "hgrn": [0.0, None, None, 0.902, 0.880]}
    rows = []
    for seed, d in ((0, -0.006), (1, 0.006)):
        for m, vals in auc.items():
            rows += [_row(m, q, seed, 0.98, auc=round(v + d if v else 0.0, 4)) for q, v in zip(compare.RATIOS, vals) if v is not None]
    cs = compare.cells(rows)
    b = compare.best_pure_vs_hybrid(cs, "recall_auc", "average")
    assert (b["pure"], b["hybrid"], b["runner_up"], b["verdict"]) == ("deltanet", "deltanet", "hgrn", "undecided")
    assert b["margin"] == pytest.approx(0.909 - 0.891) and b["spread"] == pytest.approx(0.012)
    wide = compare.best_pure_vs_hybrid(cs, "recall_auc", "3:1")  # 0.911 vs 0.880: 0.031 > 2x 0.012
    assert (wide["verdict"], wide["runner_up"]) == ("no", "hgrn") and wide["margin"] == pytest.approx(0.031)
    lines, _ = compare.findings_table(cs)
    assert any("deltanet's own 0.909 leads hgrn's 0.891 by +0.018 vs 2x spread 0.024" in ln for ln in lines)


def test_a_tie_for_the_best_standalone_mixer_counts_every_tied_mixer_as_best():
    """(iii) when two pure models tie within twice the spread (2026-12-04: DeltaNet 0.984, GatedDeltaNet 0.983), the best
    hybrid being either is a 'no', and a third mixer's 'yes' must beat both of their hybrids, not only the argmax's."""
    def table(pure, hyb):
        rows = []
        for seed, d in ((0, -0.005), (1, 0.005)):
            for m in pure:
                rows += [_row(m, "pure", seed, 0.98, auc=pure[m] + d), _row(m, "3:1", seed, 0.98, auc=hyb[m] + d)]
        return compare.cells(rows)
    pure = {"deltanet": 0.912, "gated_deltanet": 0.905, "gla": 0.0}
    b = compare.best_pure_vs_hybrid(table(pure, {"deltanet": 0.80, "gated_deltanet": 0.95, "gla": 0.85}), "recall_auc", "3:1")
    assert (b["pure"], b["hybrid"], b["pure_tied"], b["verdict"]) == ("gated_deltanet", "gated_deltanet", ["deltanet"], "no")
    # gla's hybrid beats deltanet's (the argmax's) by far but gated_deltanet's, the tied one, only inside the spread
    b = compare.best_pure_vs_hybrid(table(pure, {"deltanet": 0.80, "gated_deltanet": 0.90, "gla": 0.91}), "recall_auc", "3:1")
    assert (b["hybrid"], b["pure"], b["verdict"]) == ("gla", "gated_deltanet", "undecided") and b["margin"] == pytest.approx(0.01)
    b = compare.best_pure_vs_hybrid(table(pure, {"deltanet": 0.80, "gated_deltanet": 0.85, "gla": 0.91}), "recall_auc", "3:1")
    assert (b["pure"], b["verdict"]) == ("gated_deltanet", "yes")
    lines, _ = compare.findings_table(table(pure, {"deltanet": 0.80, "gated_deltanet": 0.85, "gla": 0.91}))
    assert any("(tied within 2x spread with deltanet)" in ln for ln in lines)


def test_the_cell_table_says_how_many_seeds_reached_the_target():
    """Steps to target are a mean over the seeds that reached it; the cell says when a seed never did (RetNet 6:1 on
    2026-12-04 read '2900 over 2 seeds' while seed 1 never got there), and a table without steps says nothing."""
    rows = [_row("retnet", "6:1", 0, 0.98, auc=0.5, mqar_steps_to_target=2900), _row("retnet", "6:1", 1, 0.94, auc=0.4),
            _row("gla", "3:1", 0, 0.99, auc=0.9, mqar_steps_to_target=500), _row("gla", "3:1", 1, 0.99, auc=0.9,
                                                                                mqar_steps_to_target=400),
            _row("gla", "pure", 0, 0.0, auc=0.0), _row("gla", "pure", 1, 0.0, auc=0.0)]
    text = compare.compare(rows)
    assert "| 2900 (1 of 2 seeds; the rest never) |" in text and "| 450 |" in text and "| never |" in text
    old = [{k: v for k, v in r.items() if k != "mqar_steps_to_target"} for r in rows]
    assert "never" not in compare.compare(old)


def test_a_cell_whose_seeds_disagree_on_learning_is_marked_split():
    """GatedDeltaNet 24:1 on the H200 grid: seed 0 never left the plateau, seed 1 learned. The mean stands for neither
    seed, so the cell says which learned; cells whose seeds agree (both learned, neither) carry no such mark."""
    rows = [_row("gated_deltanet", "24:1", 0, 0.017, auc=0.01), _row("gated_deltanet", "24:1", 1, 0.950, auc=0.37),
            _row("retnet", "6:1", 0, 0.98, auc=0.5), _row("retnet", "6:1", 1, 0.94, auc=0.4),
            _row("gla", "24:1", 0, 0.0, auc=0.0), _row("gla", "24:1", 1, 0.46, auc=0.1)]
    lines = compare.compare(rows).splitlines()
    row = next(x for x in lines if x.startswith("| gated_deltanet | 24:1 |"))
    assert "**seeds split**: learned (recall >= 0.5) in seed 1 only" in row
    assert not any("seeds split" in x for x in lines if x.startswith(("| retnet | 6:1 |", "| gla | 24:1 |")))
    assert next(x for x in lines if x.startswith("| gla | 24:1 |")).rstrip().endswith("| no recall in seed 0 |")


# -- compare.py: cost and bad input ----------------------------------------------------------------

def test_cost_per_candidate_and_seed_against_the_target():
    rows = []
    for m in ("gla", "hgrn"):
        for q in compare.RATIOS:
            big = m == "hgrn" and q == "3:1"
            rows.append(_row(m, q, 0, 0.5, mqar_s=70 if big else 10, train_wall_s=20, gpu_s=90 if big else 30))
            rows.append(_row(m, q, 1, 0.5, mqar_s=10, gpu_s=10))  # recall only (calibration's seed 1)
    c = compare.cost(rows)
    assert c["column"] == "gpu_s" and c["n"] == 10 and c["mean"] == pytest.approx(36.0) and c["max"] == 90 and not c["meets"]
    assert c["per_seed"]["0"]["total"] == 360 and c["per_seed"]["0"]["max_of"] == "hgrn 3:1"
    assert c["per_seed"]["1"]["n"] == 0 and c["per_seed"]["1"]["recall_only_n"] == 10
    text = "\n".join(compare.cost_lines(c))
    assert "Mean 36.0, max 90.0 over 10 candidate runs: misses the target of <= 30 GPU-s" in text
    for r in rows:  # collect.py --concurrency 2
        r.update(concurrency="2", gpu_s_est=str(float(r["gpu_s"]) / 2))
    c2 = compare.cost(rows)
    assert c2["column"] == "gpu_s_est" and c2["mean"] == pytest.approx(18.0) and c2["meets"]
    assert "wall seconds / 2" in "\n".join(compare.cost_lines(c2))
    for r in rows:  # collect.py --util: the measured share wins over the estimate
        r.update(gpu_s_util=str(float(r["gpu_s"]) / 3))
    c3 = compare.cost(rows)
    assert c3["column"] == "gpu_s_util" and c3["mean"] == pytest.approx(12.0) and "measured" in "\n".join(compare.cost_lines(c3))
    # the cards: runs from before hlnas stored them are "unrecorded"; two known cards are flagged as mixed
    assert c3["cards"] == {"unrecorded": 20} and "Seconds of different cards" not in "\n".join(compare.cost_lines(c3))
    for i, r in enumerate(rows):
        r["device_name"] = "NVIDIA H200" if i % 4 else "NVIDIA H100 80GB HBM3"
    c4 = compare.cost(rows)
    assert c4["cards"] == {"NVIDIA H200": 15, "NVIDIA H100 80GB HBM3": 5}
    assert "Cards (runs counted above): NVIDIA H200 15, NVIDIA H100 80GB HBM3 5. **Seconds of different cards are mixed.**" \
        in "\n".join(compare.cost_lines(c4))
    # a run the utilisation files do not cover (collect.py leaves its gpu_s_util blank) is left out and named
    rows[0]["gpu_s_util"] = ""
    c5 = compare.cost(rows)
    assert c5["n"] == 9 and c5["unmeasured"] == ["gla pure seed 0"]
    assert "Not counted: 1 run(s) with wall seconds but no `gpu_s_util` (gla pure seed 0)" in "\n".join(compare.cost_lines(c5))


def test_compare_names_missing_columns_and_files_in_one_line(tmp_path, capsys):
    path = write_csv(tmp_path / "t.csv", [{k: v for k, v in r.items() if k != "recall_baseline"} for r in findings_rows()])
    assert compare.main(["--table", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "lacks column(s) recall_baseline (collect.py writes them)" in err and "\n" not in err
    assert compare.main(["--table", str(tmp_path / "none.csv")]) == 2
    assert "none.csv: no such file" in capsys.readouterr().err

"""experiments/paper_grid/delta_probe.py: pairs each setting's pure and 3:1 runs, judged by the calibration's rule."""

import json

import pytest

from experiments.paper_grid import delta_probe


def _row(tag, seed, acc, auc, baseline=0.0625, status="ok", **extra):
    return {"tag": tag, "seed": seed, "layout": "x", "acc": acc, "auc": auc, "baseline": baseline, "status": status,
            "steps_to_target": None, **extra}


def _write(tmp_path, rows, name="a.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_pairs_pure_with_its_hybrid_and_says_yes_only_beyond_the_spread(tmp_path):
    rows = [_row("gdn pure keys 1x8", 0, 0.10, 0.03), _row("gdn pure keys 1x8", 1, 0.20, 0.10),
            _row("gdn 3:1 keys 1x8", 0, 0.99, 0.83), _row("gdn 3:1 keys 1x8", 1, 0.99, 0.84),
            # the second setting: one pure seed learned, so the spread swallows the gap
            _row("dn pure keys 1x8", 0, 0.98, 0.80), _row("dn pure keys 1x8", 1, 0.11, 0.04),
            _row("dn 3:1 keys 1x8", 0, 0.99, 0.85), _row("dn 3:1 keys 1x8", 1, 0.99, 0.86)]
    groups = delta_probe.settings(delta_probe.read_rows([_write(tmp_path, rows)]))
    assert set(groups) == {"gdn keys 1x8", "dn keys 1x8"}
    assert delta_probe.verdict(groups["gdn keys 1x8"]["pure"], groups["gdn keys 1x8"]["3:1"], "recall")[0] == "yes"
    assert delta_probe.verdict(groups["dn keys 1x8"]["pure"], groups["dn keys 1x8"]["3:1"], "recall")[0] == "no"
    text = delta_probe.report(delta_probe.read_rows([_write(tmp_path, rows)]), "t")
    assert "learned 0/2" in text and "learned 1/2" in text and "learned 2/2" in text


def test_reversed_when_the_hybrid_sits_below_and_undecided_with_one_seed(tmp_path):
    rows = [_row("dn pure K32", s, 0.95 + 0.01 * s, 0.6) for s in (0, 1)] + \
           [_row("dn 3:1 K32", s, 0.04 + 0.01 * s, 0.01) for s in (0, 1)] + \
           [_row("g pure w", 0, 0.1, 0.1), _row("g 3:1 w", 0, 0.9, 0.8)]
    groups = delta_probe.settings(delta_probe.read_rows([_write(tmp_path, rows)]))
    assert delta_probe.verdict(groups["dn K32"]["pure"], groups["dn K32"]["3:1"], "recall")[0] == "reversed"
    assert delta_probe.verdict(groups["g w"]["pure"], groups["g w"]["3:1"], "auc")[0] == "undecided"


def test_a_failed_run_is_not_scored_and_a_later_row_replaces_an_earlier(tmp_path):
    first = _write(tmp_path, [_row("m pure a", 0, 0.9, 0.7)], "1.jsonl")
    later = _write(tmp_path, [_row("m pure a", 0, None, None, status="failed", error="tail\nmore",
                                   replicas_error="AcceleratorError: CUDA error: boom\nSearch for")], "2.jsonl")
    rows = delta_probe.read_rows([first, later])
    assert len(rows) == 1 and rows[0]["status"] == "failed"
    assert delta_probe.measures(rows[0]) == {"recall": None, "auc": None}
    text = delta_probe.report(rows, "t")
    assert "failed: AcceleratorError: CUDA error: boom |" in text and "Search for" not in text


def test_corrected_recall_is_the_share_of_the_room_above_the_baseline():
    assert delta_probe.corrected(0.25, 0.25) == 0.0 and delta_probe.corrected(0.1, 0.25) == 0.0
    assert delta_probe.corrected(0.625, 0.25) == pytest.approx(0.5)


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(SystemExit, match="line 1 is not JSON"):
        delta_probe.read_rows([bad])
    with pytest.raises(SystemExit, match="cannot read"):
        delta_probe.read_rows([tmp_path / "missing.jsonl"])


def test_a_pair_with_a_cut_run_compares_auc_over_the_steps_every_run_covers(tmp_path):
    """Final recall after different step counts says nothing; the area under the curve over the first 600 steps
    does: the hybrids reached the stop at 300 and hold it, the pure models crawl."""
    pure = [[100, 0.02], [200, 0.03], [300, 0.05], [400, 0.1], [500, 0.2], [600, 0.3]]
    hybrid = [[100, 0.3], [200, 0.9], [300, 0.99]]
    rows = [_row("d pure k", s, 0.3, 0.04, cut_at=600, curve=pure) for s in (0, 1)] + \
           [_row("d 3:1 k", s, 0.99, 0.9, curve=hybrid, steps_to_target=300) for s in (0, 1)]
    g = delta_probe.settings(delta_probe.read_rows([_write(tmp_path, rows)]))["d k"]
    answer, why = delta_probe.verdict(g["pure"], g["3:1"], "recall")
    assert answer == "undecided" and "the first at 600 steps" in why
    answer, why = delta_probe.verdict(g["pure"], g["3:1"], "auc")
    assert answer == "yes" and "over the first 600 steps" in why
    held = delta_probe.measures(rows[2], 600)["auc"]
    assert held > delta_probe.measures(rows[2], 300)["auc"] > delta_probe.measures(rows[0], 600)["auc"] > 0


def test_a_pair_whose_control_learned_in_no_seed_is_no_result(tmp_path):
    rows = [_row("control d64 K64 L256", s, 0.016, 0.0, baseline=0.016) for s in (0, 1)] + \
           [_row("dn pure d64 K64 L256", s, 0.02, 0.0, baseline=0.016) for s in (0, 1)] + \
           [_row("dn 3:1 d64 K64 L256", s, 0.99, 0.9, baseline=0.016) for s in (0, 1)] + \
           [_row("dn pure d128 K64 L256", s, 0.02, 0.0, baseline=0.016) for s in (0, 1)] + \
           [_row("dn 3:1 d128 K64 L256", s, 0.99, 0.9, baseline=0.016) for s in (0, 1)]
    text = delta_probe.report(delta_probe.read_rows([_write(tmp_path, rows)]), "t")
    line = next(x for x in text.splitlines() if x.startswith("| dn d64 K64 L256 |"))
    assert line.count("**no control** (its control learned in 0 of 2 seeds (0.016 / 0.016 raw))") == 2
    line = next(x for x in text.splitlines() if x.startswith("| dn d128 K64 L256 |"))
    assert "**yes**" in line and "no control" not in line  # no control in these rows: the grid's calibration holds


def test_a_paused_run_never_continued_counts_as_cut_at_its_steps(tmp_path):
    """A probe spread over device calls (recall_sweep --state) leaves a `paused` row where the machine went back before
    the next call: its numbers are shown and scored like a run the time budget cut at that many steps."""
    climbing = [[100, 0.02], [200, 0.05], [300, 0.1], [400, 0.2]]
    rows = [_row("d pure k", s, 0.2, 0.01, status="paused", steps=400, curve=climbing) for s in (0, 1)] + \
           [_row("d 3:1 k", s, 0.99, 0.9, curve=[[100, 0.5], [200, 0.99]], steps_to_target=200, steps=200)
            for s in (0, 1)] + [_row("d pure j", 0, None, None, status="unfinished")]
    g = delta_probe.settings(delta_probe.read_rows([_write(tmp_path, rows)]))["d k"]
    assert delta_probe.cut_at(rows[0]) == 400 and delta_probe.cut_at(rows[2]) is None
    answer, why = delta_probe.verdict(g["pure"], g["3:1"], "recall")
    assert answer == "undecided" and "the first at 400 steps" in why
    assert delta_probe.verdict(g["pure"], g["3:1"], "auc")[0] == "yes"
    text = delta_probe.report(delta_probe.read_rows([_write(tmp_path, rows)]), "t")
    assert "0.200 [0.062] -> 0.147, auc" in text and ", paused at 400" in text
    assert "unfinished: " in text  # a case that never started is listed, not scored

"""hlnas_recall_vs_placement: a panel per (mixer, ratio) trained at two placements or more, placements by their first
attention layer, raw recall beside the no-recall band."""

from __future__ import annotations

from hlnas.analysis.figures import FIGURE_IDS, build_figures
from hlnas.analysis.pareto import StudyData, TrialRecord
from hlnas.analysis.placement_figures import placement_info, plot_placement


def _rec(n, layout, raw, base=0.25, status="ok", state="complete"):
    corrected = max(0.0, (raw - base) / (1 - base))
    mixer = {"H": "hgrn", "N": "hgrn2"}[next(c for c in layout if c != "A")] if set(layout) != {"A"} else "attention"
    return TrialRecord(number=n, state=state, values=(corrected, 1.0),
                       attrs={"layout": layout, "recall": corrected, "recall_raw": raw, "recall_baseline": base,
                              "recall_baseline_name": "copy_any", "status": status,
                              "mixers": [("attention" if c == "A" else mixer) for c in layout]},
                       objective_names=("recall", "kv_cache"))


def _data(recs):
    return StudyData("t", ("maximize", "minimize"), ("recall", "kv_cache"), tuple(recs))


def test_placement_info_groups_by_mixer_and_ratio_and_orders_by_the_first_attention_layer():
    recs = [
        # hgrn 6:1 at four placements (the CPU twin's way: attention alone in layer 0 never learns)
        _rec(0, "HHHHHA", 0.99), _rec(1, "AHHHHH", 0.29), _rec(2, "HAHHHH", 0.98), _rec(3, "HHHAHH", 0.97),
        _rec(4, "HHHHHA", 0.5),  # the same layout again (a reused result): one point, the first trial's
        # hgrn 3:1: one placement only, no panel; hgrn2 3:1: two placements
        _rec(5, "HHAHHA", 0.99), _rec(6, "NNANNA", 0.99), _rec(7, "AANNNN", 0.97),
        # not placed: pure, all-attention, failed, pending
        _rec(8, "HHHHHH", 0.3), _rec(9, "AAAAAA", 1.0), _rec(10, "NNNNNA", 0.9, status="failed"),
        _rec(11, "NNNANN", 0.9, state="running"),
    ]
    info = placement_info(_data(recs))
    assert info.metric == "recall_raw" and info.baseline == 0.25
    assert [(m, r) for m, r, _ in info.groups] == [("hgrn", "6:1"), ("hgrn2", "3:1")]  # smaller attention share first
    hgrn = info.groups[0][2]
    assert [(p.placement, p.first, p.value, p.number) for p in hgrn] == [
        ("front", 0, 0.29, 1), ("explicit:1", 1, 0.98, 2), ("spread", 3, 0.97, 3), ("paper", 5, 0.99, 0)]
    assert [(p.placement, p.first) for p in info.groups[1][2]] == [("front", 0), ("paper", 2)]
    fig = plot_placement(info)
    assert [a.text for a in fig.layout.annotations][:2] == ["hgrn 6:1", "hgrn2 3:1"]
    assert list(fig.layout.xaxis.ticktext) == ["front · 0", "explicit · 1", "spread · 3", "paper · 5"]
    assert len(fig.layout.shapes) == 2 and fig.layout.shapes[0].y1 == 0.25  # the no-recall band in each panel


def test_a_study_without_two_placements_of_a_cell_gets_the_empty_figure_that_says_why():
    info = placement_info(_data([_rec(0, "HHHHHA", 0.99), _rec(1, "HHAHHA", 0.99), _rec(2, "HHHHHH", 0.3)]))
    assert info.groups == ()
    fig = plot_placement(info)
    assert "two placements" in fig.layout.annotations[0].text and not fig.data
    figs = build_figures(_data([_rec(0, "HHHHHA", 0.99), _rec(1, "AHHHHH", 0.29)]))
    assert tuple(figs) == FIGURE_IDS and len(figs["hlnas_recall_vs_placement"].data) == 1

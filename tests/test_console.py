"""What ``hlnas`` prints: number and byte formats, the front and status tables, the layout card, the live lines of a
search and a calibration, the sampler benchmark's lines (the text itself, asserted as a terminal shows it)."""

from __future__ import annotations

import json
import re

import pytest

from hlnas.cli.console import (SearchProgress, train_summary, bench_run_line, bench_summary, format_bytes, format_value, front_table,
                           layout_card, layout_record, recall_text, status_text)


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB (1,024 B)"), (64 << 20, "64.00 MiB (67,108,864 B)"),
    ((1 << 20) - 1, "1024.00 KiB (1,048,575 B)"),  # rounds up to 1024.00 below the MiB step: the exact count says so
    (3 << 30, "3.00 GiB (3,221,225,472 B)"),
])
def test_format_bytes_picks_the_largest_unit_reached_and_keeps_the_exact_count(n, text):
    assert format_bytes(n) == text


def test_format_value_and_recall_text_show_missing_parts_as_dashes():
    assert format_value(None) == "-" and format_value(0.12345) == "0.123" and format_value(1) == "1.000"
    assert recall_text({}) == "recall -"
    assert recall_text({"recall": 0.5}) == "recall 0.500"
    assert recall_text({"recall": 0.84, "recall_raw": 0.88, "recall_baseline": 0.25}) == \
        "recall 0.840 (raw 0.880, no-recall 0.250)"
    assert recall_text({"recall": 0.0, "recall_raw": 0.1}) == "recall 0.000 (raw 0.100, no-recall -)"


def row(number, layout, kv, recall=0.5, **extra) -> dict:
    return {"number": number, "layout": layout, "ratio": "6:1", "recall": recall, "recall_raw": None,
            "recall_baseline": None, "recall_baseline_name": None, "kv_cache_bytes": kv, "val_loss": 3.25,
            "params": 1234567, **extra}


def test_front_table_lines_up_every_column_and_names_the_baseline():
    rows = [row(2, "GGGG", 0, recall=0.0, recall_raw=0.1, recall_baseline=0.25, recall_baseline_name="copy_any"),
            row(11, "GGGA", 3 << 20, recall=None, val_loss=None, params=None), row(7, "GAGA", None)]
    lines = front_table(rows, {"status": "valid"}).split("\n")
    assert lines[0] == ""  # a blank line before the table, as printed after the live lines
    assert lines[1].endswith("no-recall baseline on the same test instances (b = 0.250, copy_any):")
    assert lines[2] == ("     #  layout                     ratio        recall     raw no-rec.     KV cache  val_loss       params")
    assert lines[3] == ("     2  GGGG                       6:1           0.000   0.100   0.250          0 B     3.250    1,234,567")
    assert lines[4] == ("    11  GGGA                       6:1               -       -       -     3.00 MiB         -            0")
    assert lines[5].split()[:2] == ["7", "GAGA"] and " 0 B " in lines[5]  # unknown KV bytes print as 0
    assert len(lines) == 6 and len({len(l) for l in lines[2:]}) == 1  # no calibration note: it was valid


@pytest.mark.parametrize("calibration, note", [
    (None, "(calibration not run: "), ({}, "(calibration not run: "), ({"status": "skipped"}, "(calibration skipped: "),
    ({"status": "disabled"}, "(calibration disabled: "), ({"status": "valid"}, None), ({"status": "not needed"}, None),
    ({"status": "running"}, "(calibration running: "), ({"status": "invalid"}, "(calibration invalid: "),
])
def test_front_table_says_when_the_recall_numbers_were_not_validated(calibration, note):
    last = front_table([row(0, "GGGA", 1024)], calibration).split("\n")[-1]
    if note is None:
        assert "calibration" not in last
    else:
        assert last.startswith("  " + note) and "validated by the protocol's controls" in last


def test_front_table_shows_the_graded_measure_where_the_study_optimises_it():
    lines = front_table([row(0, "GGGA", 1024, recall_auc=0.8631), row(1, "GGGG", 0, recall_auc=None)],
                        {"status": "valid"}).split("\n")
    assert lines[1].endswith("; recall_auc, the study's objective, the baseline-corrected area under its validation curve:")
    assert lines[2].endswith("recall_auc")
    assert lines[3].endswith("     0.863") and lines[4].endswith("         -") and len({len(l) for l in lines[2:]}) == 1
    assert "recall_auc" not in front_table([row(0, "GGGA", 1024)], {"status": "valid"})


def test_status_text_says_how_far_a_running_calibration_got():
    summary = {"study": "st", "trials": {"complete": 6}, "objectives": [],
               "calibration": {"status": "running", "runs": {f"k{i}": {} for i in range(6)}}, "front": []}
    assert "calibration: running, 6 runs stored (the next run of the study continues it)" in status_text(summary)


def test_status_text_says_which_mixers_can_still_pass_each_required_check():
    verdict = {"valid": False, "failures": [], "config": {"control_min": 0.9, "hybrid_ratio": "3:1"}, "rows": []}
    pr = {"stored": 8, "planned": 38, "verdict": verdict, "cannot_pass": None, "pure_below_min_mixers": 4,
          "pure_below_open": ["hgrn", "retnet"], "graded_min_mixers": 3, "graded_open": ["gla", "hgrn", "retnet"]}
    summary = {"study": "st", "trials": {"complete": 1}, "objectives": [],
               "calibration": {"status": "running", "runs": {}}, "calibration_progress": pr, "front": []}
    lines = status_text(summary).split("\n")
    assert "pure below its hybrid can still hold for 2 mixer(s) (hgrn, retnet); the space asks 4" in lines
    assert "the graded measure can still rise for 3 mixer(s) (gla, hgrn, retnet); the space asks 3" in lines
    assert "the graded measure" not in status_text({**summary, "calibration_progress": {**pr, "graded_min_mixers": 0}})


def test_front_table_without_rows_and_without_a_baseline():
    assert front_table([], None) == "no completed trials yet"
    head = front_table([row(0, "GGGA", 1024)], {"status": "valid"}).split("\n")[1]
    assert head.endswith("no-recall baseline on the same test instances:") and "b =" not in head


def test_status_text_counts_only_present_states_then_calibration_then_front():
    summary = {"study": "st", "trials": {"complete": 4, "fail": 0, "running": 1, "waiting": 0},
               "objectives": [{"name": "recall", "metric": "recall", "direction": "maximize"},
                              {"name": "kv", "metric": "kv_cache_bytes", "direction": "minimize"}],
               "calibration": {"status": "skipped"}, "front": [row(3, "GGGA", 2048)]}
    lines = status_text(summary).split("\n")
    assert lines[:3] == ["study 'st': 4 complete, 1 running", "objectives: maximize recall, minimize kv_cache_bytes",
                         "calibration: skipped"]
    assert lines[3] == "" and lines[4].startswith("Pareto front") and "(calibration skipped:" in lines[-1]
    assert "calibration:" not in status_text({**summary, "calibration": None})
    assert status_text({**summary, "front": []}).endswith("calibration: skipped\nno completed trials yet")
    # a study that stored its target (hlnas_trials) says it: what a resumed search runs to
    assert status_text({**summary, "target": 31}).startswith("study 'st': 4 complete, 1 running (target 31 trials)\n")


def test_status_text_prints_a_stored_verdict_as_the_calibration_table():
    verdict = {"valid": False, "failures": ["control below 0.9"], "config": {"control_min": 0.9, "hybrid_ratio": "3:1"},
               "rows": [{"role": "control", "mixer": "transformer", "layout": "AAAAAA", "recall": [0.5, 0.6], "mean": 0.55,
                         "spread": 0.1, "baseline": 0.25, "verdict": "FAIL"}]}
    text = status_text({"study": "c", "trials": {"complete": 1}, "objectives": [], "calibration":
                        {"status": "invalid", "verdict": verdict}, "front": []})
    lines = text.split("\n")
    assert lines[2] == "calibration:" and lines[3].startswith("role     mixer")
    assert re.match(r"control\s+transformer\s+AAAAAA\s+0\.500, 0\.600\s+0\.550\s+0\.100\s+0\.250\s+FAIL$", lines[4])
    assert lines[5].startswith("valid: NO") and lines[-1] == "no completed trials yet"


def test_layout_card_draws_the_layers_and_prints_the_cost():
    from hlnas.model.cost import layout_cost
    from hlnas.model.config import preset
    from hlnas.model.layout import build_layout

    layout = build_layout("gla", "6:1", 24, "paper")
    cost = layout_cost(layout, preset("paper-340m"))
    assert layout_card(layout, "paper-340m", cost).split("\n") == [
        "layout         GGGGGAGGGGGAGGGGGAGGGGGA   (gla 6:1, attention at [5, 11, 17, 23])",
        "layers         ·····█·····█·····█·····█   █ attention  · linear",
        "preset         paper-340m (MLP width 2368)",
        f"params         {cost.params:,}",
        "KV cache       64.00 MiB (67,108,864 B)  (context 4096, batch 1, bf16)",
        f"linear state   {format_bytes(cost.state_bytes)}  (constant in context)",
        f"inference mem  {format_bytes(cost.inference_bytes)}  (weights + KV + state)",
        f"FLOPs/token    {cost.flops_per_token:,}  (forward)",
    ]
    record = layout_record(layout, "paper-340m", cost)
    assert list(record)[:5] == ["layout", "mixers", "attention_layers", "ratio", "preset"]
    assert record["attention_layers"] == [5, 11, 17, 23] and record["kv_cache_bytes"] == cost.kv_cache_bytes
    assert "mlp_hidden" in record and record["mixers"].count("attention") == 4


def test_search_progress_prints_a_line_per_event_and_counts_failures(capsys):
    ui = SearchProgress(3, progress=False)
    ui.event("started", {"number": 0, "layout": "GGGA"})
    ui.event("finished", {"number": 0, "status": "ok", "layout": "GGGA", "metrics": {
        "recall": 0.84, "recall_raw": 0.88, "recall_baseline": 0.25, "kv_cache_bytes": 3 << 20, "val_loss": 2.5,
        "train_wall_s": 12.4}})
    ui.event("finished", {"number": 1, "status": "failed", "layout": "AAAA", "error": "\nCUDA error: boom\ntrace",
                          "metrics": {"error_kind": "cuda"}})
    ui.event("finished", {"number": 2, "status": "crashed", "layout": "GAGA", "metrics": None})
    ui.event("front", {"rows": [{"layout": f"G{i}", "recall": 0.1 * i if i else None, "kv_cache_bytes": i << 20 if i else None}
                                for i in range(6)]})
    ui.event("unknown kind", {})  # ignored
    ui.close()
    out = capsys.readouterr()
    assert out.out == "" and ui.failed == 2 and ui.bar is None
    assert out.err.split("\n") == [
        "  trial   0 started   GGGA",
        "  trial   0 done      GGGA  recall 0.840 (raw 0.880, no-recall 0.250)  KV 3.0 MiB  val_loss 2.500  (12s train)",
        "  trial   1 failed    AAAA  cuda: CUDA error: boom",
        "  trial   2 crashed   GAGA  None: ",
        "  front now 6: G0 (recall -, KV 0.0 MiB), G1 (recall 0.100, KV 1.0 MiB), G2 (recall 0.200, KV 2.0 MiB), "
        "G3 (recall 0.300, KV 3.0 MiB), G4 (recall 0.400, KV 4.0 MiB) ...",
        "",
    ]


def test_search_progress_lines_for_resumes_retries_and_calibration(capsys):
    ui = SearchProgress(0, progress=False)
    for kind, data in [
        ("reused", {"number": 4, "layout": "GGGA", "from": 1}), ("infeasible", {"number": 5, "layout": "AAAA", "error": "KV > 1 MiB"}),
        ("retry", {"number": 6, "layout": "GGGA", "error_kind": "oom"}), ("time_limit", {"seconds": 59.6, "trained": 3}),
        ("requeued", {"n": 2}), ("requeued", {"layout": "GGGA", "why": "its worker died"}),
        ("target_raised", {"retried": 2, "from": 4, "to": 6}), ("target_raised", {"requeued": 2, "from": 3, "to": 5}),
        ("calibration_kept", {"status": "skipped", "storage": "sqlite:///a.db", "study": "a"}),
        ("calibration_started", {"n": 10, "reused": 0}),
        ("calibration_started", {"n": 4, "reused": 6}), ("calibration_run_started", {"key": "pure:gla:s0", "layout": "GGGG"}),
        ("calibration_run", {"key": "pure:gla:s0", "layout": "GGGG", "status": "ok", "raw_train_length": 0.3,
                             "baseline_train_length": 0.25}),
        ("calibration_run", {"key": "pure:gla:s1", "layout": "GGGG", "status": "failed", "error_kind": "nan",
                             "error": "loss is nan\nat step 3"}),
        ("calibration_run", {"key": "pure:gla:s2", "layout": "GGGG", "status": "ok", "raw_train_length": None}),
    ]:
        ui.event(kind, data)
    assert capsys.readouterr().err.split("\n") == [
        "  trial   4 reused    GGGA (same layout as trial 1)",
        "  trial   5 skipped   AAAA: KV > 1 MiB",
        "  retrying GGGA (trial 6 failed: oom)",
        "  time limit of 60s reached with 3 trained; resume to continue",
        "  re-queued 2 trial(s) left running by an earlier process",
        "  re-queued GGGA: its worker died",
        "  retrying 2 failed layout(s): the trial target rises from 4 to 6",
        "  running the 2 re-queued layout(s): the trial target rises from 3 to 5",
        "calibration: skipped, as when study 'a' was started (--skip-calibration); its recall stays unvalidated. "
        "To calibrate it: hlnas search --resume --storage sqlite:///a.db --study a --calibrate",
        "calibration: 10 control runs (all-attention, each mixer pure and hybrid, per seed)",
        "calibration: 4 control runs (all-attention, each mixer pure and hybrid, per seed); 6 stored runs reused",
        "  control pure:gla:s0                  started   GGGG",
        "  control pure:gla:s0                  done      GGGG  recall 0.300 (no-recall baseline 0.250)",
        "  control pure:gla:s1                  failed    GGGG  nan: loss is nan",
        "  control pure:gla:s2                  ok        GGGG  None: ",
        "",
    ]


def test_search_progress_starts_its_bar_at_the_first_event_and_counts_trained_trials(capsys):
    ui = SearchProgress(2, progress=True)
    assert ui.bar is None  # an error before any event prints without a bar
    ui.event("started", {"number": 0, "layout": "GGGA"})
    assert ui.bar is not None and ui.bar.total == 2 and ui.bar.n == 0
    ui.event("finished", {"number": 0, "status": "ok", "layout": "GGGA", "metrics": {"recall": 0.5}})
    ui.event("finished", {"number": 1, "status": "failed", "layout": "AAAA", "metrics": {}})
    assert ui.bar.n == 1 and ui.failed == 1
    ui.close()
    err = capsys.readouterr().err
    assert "  trial   0 done      GGGA  recall 0.500  KV 0.0 MiB  val_loss nan  (0s train)" in err
    assert "failed=1" in err and "1/2" in err


def test_search_progress_counts_the_layouts_trained_before_the_loop(capsys):
    """The default search's calibration stores 5 of its 11 layouts as trials: the bar ended at 6/11 on a finished
    search before the loop said how many it found."""
    ui = SearchProgress(11, progress=True)
    ui.event("trained", {"n": 5, "of": 11})
    assert ui.bar.n == 5 and ui.bar.total == 11
    for i in range(6):
        ui.event("finished", {"number": i, "status": "ok", "layout": "GGGA", "metrics": {}})
    assert ui.bar.n == 11
    ui.close()
    assert "11/11" in capsys.readouterr().err


def test_search_loop_reports_what_was_trained_before_it_started(tmp_path):
    from hlnas.search.study import run_search
    from hlnas.search.options import SearchOptions
    from tests.searches import tiny_space

    url, events = f"sqlite:///{tmp_path}/s.db", []
    run_search(tiny_space(), SearchOptions(storage=url, study_name="s", n_trials=2))
    run_search(tiny_space(), SearchOptions(
        storage=url, study_name="s", n_trials=3, resume=True, on_event=lambda kind, data: events.append((kind, data))))
    assert events[0] == ("trained", {"n": 2, "of": 3})


def test_bench_lines():
    from hlnas.analysis.tabular import SamplerRun

    run = SamplerRun(sampler="random", seed=1, hv=(0.5, 1.0), layouts=("GGGA", "GAGA"), asked=3, repeats=1, infeasible=0,
                    exhausted=True)
    assert bench_run_line(run, 1.234) == "  random     seed 1: 2 evaluated (3 asked), 100% after 2  [1.2s]"
    never = SamplerRun(sampler="grid", seed=0, hv=(0.5,), layouts=("GGGA",), asked=1, repeats=0, infeasible=0, exhausted=False)
    assert bench_run_line(never, 0.0).endswith("100% after never  [0.0s]")

    class Comparison:
        seeds = (0, 1, 2)

        def to_markdown(self) -> str:
            return "| sampler |\n|---|"

    assert bench_summary(Comparison()) == ("\nhypervolume (fraction of the table's) after N distinct evaluations, "
                                           "mean ± std over 3 seeds:\n\n| sampler |\n|---|")


def test_train_summary_shows_the_headline_fields_and_scalar_scores_only():
    record = {"status": "ok", "layout": "AA", "steps": 32, "val_loss": 2.5, "loss_curve": [3.0, 2.5],
              "scores": {"mqar_acc": 0.75, "ruler": {"tasks": {}}}}
    shown = json.loads(train_summary(record))
    assert shown["status"] == "ok" and shown["steps"] == 32 and shown["error"] is None
    assert "loss_curve" not in shown and shown["scores"] == {"mqar_acc": 0.75}
    assert "scores" not in json.loads(train_summary({"status": "failed", "scores": {}}))


def test_front_table_lists_the_kernel_fallbacks_of_its_trials_before_the_calibration_note():
    """A trial whose process ran ops on the PyTorch kernels where fla was asked for (the compiled recall-only probe runs
    of 2026-12-06 did, unseen): the table says how many, and each distinct reason once."""
    why = "gla: using the PyTorch kernel instead of fla: key head dim 16 < 64"
    rows = [row(0, "GGGA", 1024, kernel_fallbacks=[why]), row(1, "GGGG", 0, kernel_fallbacks=[why]), row(2, "GAGA", 0)]
    lines = front_table(rows, {"status": "invalid"}).split("\n")
    assert lines[-3] == "  (2 of these trials ran ops on the PyTorch kernels instead of fla: their recall stands, their seconds are not fla's)"
    assert lines[-2] == f"    - {why}" and lines[-1].startswith("  (calibration invalid: ")
    assert not any("PyTorch kernels" in line for line in front_table([row(2, "GAGA", 0)], None).split("\n"))

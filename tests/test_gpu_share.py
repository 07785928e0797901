"""GPU-seconds per run from sampled utilisation (experiments/paper_grid/gpu_share.py, which collect.py's gpu_s_util
column reads): how the busy time is split and where the runs' intervals come from."""

from __future__ import annotations

import datetime as dt

import optuna
import pytest

from experiments.paper_grid.gpu_share import attribute, read_util, recall_interval, sample_period

T0 = dt.datetime(2026, 12, 4, 19, 43, 0, tzinfo=dt.timezone.utc).timestamp()


def _util_file(path, busy: list[int], start: float = T0, period: float = 2.0):
    lines = [f"{dt.datetime.fromtimestamp(start + i * period, dt.timezone.utc):%Y/%m/%d %H:%M:%S.%f}"[:-3] + f", {u} %, 10 MiB"
             for i, u in enumerate(busy)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_util_parses_nvidia_smi_lines_as_utc_and_names_a_bad_line(tmp_path):
    samples = read_util([_util_file(tmp_path / "u.csv", [0, 50, 100])])
    assert samples == [(T0, 0.0), (T0 + 2, 0.5), (T0 + 4, 1.0)]
    assert sample_period(samples) == 2.0
    (tmp_path / "bad.csv").write_text("2026/12/04 19:43:00.000, 10 %, 1 MiB\nnot a sample\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: not an nvidia-smi utilisation line"):
        read_util([tmp_path / "bad.csv"])


def test_busy_time_is_shared_equally_among_the_runs_active_at_each_sample():
    samples = [(T0 + 2 * i, u) for i, u in enumerate([1.0, 1.0, 0.5, 1.0, 0.2])]  # t = 0, 2, 4, 6, 8
    share, totals = attribute({"a": (T0, T0 + 6), "b": (T0 + 2, T0 + 8)}, samples, period=2.0)
    # t0: a alone 2.0; t2: a and b 1.0 each; t4: 0.5 each; t6: b alone 2.0; t8: nobody (0.4 unattributed)
    assert share == {"a": 3.5, "b": 3.5}
    assert totals == {"sampled": 7.4, "attributed": 7.0, "unattributed": 0.4}


def test_a_run_the_samples_do_not_cover_gets_none_not_the_sampled_part():
    """A run in a call whose utilisation file was not kept (no sample), or that began long before sampling did, would
    be charged only what was sampled: RetNet pure seed 1 of the grid counted 11.2 GPU-s against about 118 s of wall."""
    samples = [(T0 + 2 * i, 1.0) for i in range(10)]  # t = 0..18, busy
    share, _ = attribute({"in": (T0, T0 + 20), "edge": (T0 + 15, T0 + 21), "half": (T0 - 20, T0 + 20),
                          "before": (T0 - 100, T0 - 50)}, samples, period=2.0)
    # t 0..14: "in" and "half" split each 2 busy seconds; t 16, 18: "in", "edge" and "half" split them three ways
    assert share["in"] == pytest.approx(8 * 1.0 + 2 * 2 / 3, abs=0.05) and share["edge"] == pytest.approx(4 / 3, abs=0.05)
    assert share["half"] is None  # sampled over 20 of its 40 s: its share would be half of what it took
    assert share["before"] is None  # no sample at all (its call's file missing): not 0.0


def _stored(clock, mqar_s=30.0, resumed=0.0):
    return {"mqar_s": mqar_s, "mqar": {"runs": [{"clock": clock, "resumed_s": resumed}]}}


def test_a_runs_interval_reaches_back_over_its_wall_time_and_lm_half_and_is_unknown_without_a_clock():
    assert recall_interval(_stored([[100, T0 + 20], [200, T0 + 40]])) == (T0 + 10, T0 + 40)
    assert recall_interval(_stored([[100, T0 + 40]]), lm_wall_s=5.0) == (T0 + 5, T0 + 40)
    assert recall_interval(_stored([])) is None                                 # stored before runs kept a clock
    assert recall_interval(_stored([[100, T0 + 40]], resumed=12.0)) is None     # paused and continued: spans calls


def _study_with_runs(tmp_path):
    study = optuna.create_study(study_name="cal", storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    runs = {}
    for key, role, mixer, end, steps in [("pure:gla:s0", "pure", "gla", T0 + 20, 4000),
                                         ("control:transformer:s0", "control", "transformer", T0 + 10, 700),
                                         ("hybrid:gla:s0", "hybrid", "gla", T0 + 20, 500)]:
        runs[key] = {"key": key, "role": role, "mixer": mixer, "seed": 0, "ratio": None, "layout": "G" * 4,
                     "recall_raw": 0.5, "recall_baseline": 0.016, "recall": 0.49, "recall_auc": 0.3, "mqar_s": 10.0,
                     "mqar_steps_done": steps}
        study.set_user_attr(f"hlnas_calibration_recall:{key}", {"result": _stored([[100, end]], mqar_s=10.0)})
    study.set_user_attr("hlnas_calibration", {"status": "running", "runs": runs})
    return study


def test_calibration_runs_are_charged_their_share_of_the_busy_time(tmp_path):
    """collect.py's gpu_s_util for a calibration run: its interval from its stored recall record, then the busy samples
    split among the runs active at each."""
    from experiments.paper_grid.gpu_share import calibration_spans

    util = _util_file(tmp_path / "u.csv", [100] * 11)  # t = 0..20, fully busy
    spans = calibration_spans(_study_with_runs(tmp_path))
    assert spans["control:transformer:s0"] == (T0, T0 + 10)
    share, totals = attribute(spans, read_util([util]), period=2.0)
    # control alone over [0, 10) (5 samples, 10 s); the two gla runs share [10, 20) (5 samples); t=20 is nobody's
    assert share == {"control:transformer:s0": 10.0, "pure:gla:s0": 5.0, "hybrid:gla:s0": 5.0}
    assert totals["unattributed"] == 2.0


def test_busy_seconds_sum_every_call_at_its_own_period_and_print_per_candidate(tmp_path, capsys):
    from experiments.paper_grid.gpu_share import busy_seconds, main

    a = _util_file(tmp_path / "a.csv", [100, 100, 50])           # 2 s period: 5.0 busy s
    b = _util_file(tmp_path / "b.csv", [100, 0, 100, 100], period=1.0, start=T0 + 3600)  # 1 s period: 3.0
    assert busy_seconds([a, b]) == (8.0, 2)
    assert main([str(a), str(b), "--candidates", "4"]) == 0
    assert capsys.readouterr().out.strip() == "8.0 busy GPU-s over 2 call(s); 2.0 per candidate (4)"
    with pytest.raises(SystemExit):
        main([str(a), "--candidates", "0"])

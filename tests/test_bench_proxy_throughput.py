"""experiments/bench/proxy_throughput.py on its tiny CPU path: the ``replicas`` mode (the N runs as replicas of one
model in this process) beside the N-processes baseline of the same call, with its ratio. No timing is asserted."""

from __future__ import annotations

import csv

import pytest

from experiments.bench import proxy_throughput

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:grad and param do not obey")]


def test_proxy_throughput_replicas_mode_cpu_smoke(tmp_path):
    args = ["--runs", "2", "--layouts", "gla:2:1", "--layers", "2", "--d-model", "16", "--seq-len", "16",
            "--kv-pairs", "2", "--vocab", "32", "--batch", "4", "--steps", "3", "--warmup-steps", "1",
            "--modes", "processes,replicas,replicas_compiled", "--compile-backend", "aot_eager", "--device-name", "cpu",
            "--out", str(tmp_path)]
    assert proxy_throughput.main(args) == 0
    (path,) = tmp_path.glob("proxy_throughput_cpu_*.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert [(r["mode"], r["n_runs"]) for r in rows] == [("processes", "2"), ("replicas", "2"), ("replicas_compiled", "2")]
    assert all(not r.get("error") for r in rows), rows
    base, *others = rows
    for rep in others:
        assert float(rep["steps_per_s"]) > 0 and float(rep["ratio"]) == pytest.approx(
            float(rep["steps_per_s"]) / float(base["steps_per_s"]), rel=0.01)
        # the steady rate from the runs' clocks (3 steps, a check each): beside the whole round's, its own ratio
        assert float(rep["steady_steps_per_s"]) > 0 and float(rep["steady_ratio"]) == pytest.approx(
            float(rep["steady_steps_per_s"]) / float(base["steady_steps_per_s"]), rel=0.01)
    assert all(0 < float(r["overlap"]) for r in rows)
    # the untimed warm-up round (where compiles land) has its wall beside the timed one, per mode
    assert all(float(r["warmup_s"]) > 0 for r in rows)
    md = path.with_suffix(".md").read_text()
    assert "--modes processes,replicas,replicas_compiled" in md and "ratio = each mode / processes" in md


def test_an_mps_mode_where_no_daemon_can_start_is_a_row_saying_why(tmp_path, monkeypatch):
    """mps_compiled (compiled workers under MPS) on a machine without nvidia-cuda-mps-control: the bench goes on and
    its row names the failure instead of a number, so a call's other rows are kept."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control (nor pgrep) on this PATH
    args = ["--runs", "1", "--layouts", "gla:2:1", "--layers", "2", "--d-model", "16", "--seq-len", "16",
            "--kv-pairs", "2", "--vocab", "32", "--batch", "4", "--steps", "2", "--warmup-steps", "1",
            "--modes", "mps_compiled", "--device-name", "cpu", "--out", str(tmp_path)]
    assert proxy_throughput.main(args) == 0
    (path,) = tmp_path.glob("proxy_throughput_cpu_*.csv")
    with open(path) as f:
        (row,) = list(csv.DictReader(f))
    assert row["mode"] == "mps_compiled" and row["steps_per_s"] == "" and "nvidia-cuda-mps-control" in row["error"]


def test_the_steady_rate_counts_only_the_window_every_run_trained_in():
    """Runs' clocks ([steps done, time] at their checks): side by side, the aggregate rate is the sum of theirs; staggered,
    only the shared window counts (a run alone early on ran faster than it would beside the others)."""
    together = [[[0, 0.0], [100, 10.0]], [[0, 0.0], [50, 10.0]]]
    assert proxy_throughput.steady_rate(together) == (pytest.approx(15.0), pytest.approx(1.0))
    staggered = [[[0, 0.0], [60, 4.0], [100, 10.0]], [[0, 5.0], [100, 15.0]]]
    rate, overlap = proxy_throughput.steady_rate(staggered)  # window 5..10: run 1 from 66.7 to 100, run 2 from 0 to 50
    assert rate == pytest.approx((100 - (60 + 40 / 6) + 50) / 5) and overlap == pytest.approx(0.5)
    assert proxy_throughput.steady_rate([[[0, 0.0], [10, 1.0]], [[0, 2.0], [10, 3.0]]]) == (None, 0.0)  # never at once
    assert proxy_throughput.steady_rate([[[10, 1.0]]]) == (None, 0.0)  # one check: no interval


def test_a_family_of_layouts_as_processes_per_layout_replicas_and_one_mixed_model_cpu_smoke(tmp_path):
    """``family:hgrn`` at 6 layers: pure, 6:1 and 3:1, 4 runs (run i of the (i mod 3)th layout). The same runs as 4
    processes, as a process per layout with its runs as replicas (the calibration's --replicas), and as one mixed
    model in this process: a row each with its ratio; a one-layout replica mode says it cannot take them."""
    args = ["--runs", "4", "--layouts", "family:hgrn", "--layers", "6", "--d-model", "16", "--seq-len", "16",
            "--kv-pairs", "2", "--vocab", "32", "--batch", "4", "--steps", "3", "--warmup-steps", "1",
            "--modes", "processes,layout_replicas,replicas_mixed,replicas_mixed_where,replicas", "--device-name", "cpu",
            "--out", str(tmp_path)]
    assert proxy_throughput._layouts("family:hgrn", 6) == ["HHHHHH", "HHHHHA", "HHAHHA"]
    assert len(proxy_throughput._layouts("family:gla", 24)) == 5
    assert proxy_throughput.main(args) == 0
    (path,) = tmp_path.glob("proxy_throughput_cpu_*.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert [(r["layout"], r["mode"], r["n_runs"]) for r in rows] == [("family:hgrn", m, "4") for m in
                                                                     ("processes", "layout_replicas", "replicas_mixed", "replicas_mixed_where",
                                                                      "replicas")]
    base, per_layout, mixed, where, one = rows
    for r in (per_layout, mixed, where):
        assert not r.get("error") and float(r["ratio"]) == pytest.approx(float(r["steps_per_s"]) / float(base["steps_per_s"]), rel=0.01)
    assert "replicas trains one layout; for several use replicas_mixed or layout_replicas" in one["error"]
    import hlnas.recall.replicas as rr

    assert rr.MIXED_RANGES is True  # the where mode put the switch back


def test_a_mode_that_fails_is_a_one_line_row_and_its_memory_is_released_before_the_next_mode(tmp_path, monkeypatch):
    """A CUDA out-of-memory error spans lines (its row broke the markdown table on the H100, 2026-12-06), and its
    traceback kept the failed model's memory, so the next mode ran out too: the row holds one line, and the memory
    is released before the next mode runs."""
    seen = []

    def measure(layouts, n, mode, args):
        seen.append(mode)
        if mode == "replicas_mixed":
            raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 MiB.\nSearch for `cudaErrorMemoryAllocation'")
        return proxy_throughput.Round(1.0, [], None, 2 if mode == "layout_replicas" else 0)

    monkeypatch.setattr(proxy_throughput, "measure", measure)
    monkeypatch.setattr(proxy_throughput, "release_memory", lambda: seen.append("release"))
    args = ["--runs", "2", "--layouts", "family:hgrn", "--layers", "6", "--steps", "3",
            "--modes", "processes,replicas_mixed,layout_replicas", "--device-name", "cpu", "--out", str(tmp_path)]
    assert proxy_throughput.main(args) == 0
    assert seen == ["processes", "replicas_mixed", "release", "layout_replicas"]
    (path,) = tmp_path.glob("proxy_throughput_cpu_*.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert rows[1]["error"] == "CUDA out of memory. Tried to allocate 80.00 MiB. Search for `cudaErrorMemoryAllocation'"
    # a round some of whose runs could not capture their step: its row says how many
    assert rows[0]["error"] == "" and rows[2]["error"] == "2 of 2 runs eager (their CUDA graph was not captured)"
    assert proxy_throughput._eager_on_cuda([{"mqar_device_name": "NVIDIA H100", "mqar": {"mode": "eager"}},
                                            {"mqar_device_name": "NVIDIA H100", "mqar": {"mode": "graph"}},
                                            {"mqar_device_name": "cpu", "mqar": {"mode": "eager"}}]) == 1
    table = [ln for ln in path.with_suffix(".md").read_text().splitlines() if ln.startswith("| family:hgrn")]
    assert len(table) == 3 and all(ln.endswith("|") for ln in table)

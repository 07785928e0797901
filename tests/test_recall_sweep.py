"""experiments/recall_sweep.py, the protocol sweep the H200 sessions run: a tiny sweep on CPU end to end (a
duplicated option once broke it before any case ran, and nothing noticed until a GPU session needed it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_sweep_reports_every_case_beside_its_no_recall_baseline(tmp_path):
    cmd = [sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--layouts", "AAAA,GGAG", "--layers", "4",
           "--d-model", "16", "--kv-pairs", "2", "--seq-len", "16", "--vocab", "16", "--steps", "20", "--eval-every",
           "10", "--test", "16", "--val", "16", "--jobs", "1", "--no-graph", "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "recall_sweep.jsonl").read_text().splitlines()]
    assert sorted(row["layout"] for row in rows) == ["AAAA", "GGAG"]
    for row in rows:
        assert row["status"] == "ok" and row["steps"] == 20 and [c[0] for c in row["curve"]] == [10, 20]
        assert row["baseline"] == 0.5  # copy-any at K=2
    table = (tmp_path / "recall_sweep.md").read_text()
    assert "no-recall" in table and "| AAAA |" in table and "| GGAG |" in table


def test_a_vt_case_reports_its_accuracy_per_hop_beside_each_hops_baseline(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"layout": "AA", "task": "vt", "vt": {"chains": 2, "hops": [0, 1]}, "tag": "vt"}]))
    cmd = [sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--cases", str(cases), "--layers", "2",
           "--d-model", "16", "--seq-len", "20", "--vocab", "32", "--steps", "10", "--eval-every", "10", "--test", "32",
           "--val", "16", "--jobs", "1", "--no-graph", "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = [json.loads(line) for line in (tmp_path / "recall_sweep.jsonl").read_text().splitlines()]
    assert row["status"] == "ok" and row["task"] == "vt" and row["vt"]["chains"] == 2
    assert set(row["by_hop"]) == {"0", "1"} and sum(v["n"] for v in row["by_hop"].values()) == 32 * 2
    assert row["baseline"] >= 0.5  # copy-any over 2 chains at least
    line = [x for x in (tmp_path / "recall_sweep.md").read_text().splitlines() if x.startswith("| AA |")][0]
    assert f"h0 {row['by_hop']['0']['acc']:.3f} [{row['by_hop']['0']['baseline']:.3f}]" in line


def test_replica_groups_are_the_cases_that_differ_only_in_seed_or_tag():
    import experiments.recall_sweep as sweep

    cases = [{"layout": "GA", "lr": 1e-3, "seed": s, "tag": f"s{s}"} for s in range(3)]
    cases += [{"layout": "GA", "lr": 2e-3, "seed": 0, "tag": "s0"}, {"layout": "AA", "lr": 1e-3, "seed": 0}]
    groups = sweep._groups(cases, True)
    assert [[i for i, _ in g] for g in groups] == [[0, 1, 2], [3], [4]]  # another rate or layout: its own model
    assert [[i for i, _ in g] for g in sweep._groups(cases, False)] == [[0], [1], [2], [3], [4]]


def test_replicas_give_each_seed_the_result_it_gets_alone(tmp_path):
    """--replicas trains the cases that differ only in seed as replicas of one model in one worker; each row is the
    run it is alone (float32 on the CPU), and a case with other settings still runs by itself."""
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"layout": "GA", "seed": 0}, {"layout": "GA", "seed": 1}, {"layout": "AA", "seed": 0}]))
    rows = {}
    for mode in ("solo", "replicas"):
        out = tmp_path / mode
        cmd = [sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--cases", str(cases), "--layers", "2",
               "--d-model", "16", "--kv-pairs", "2", "--seq-len", "16", "--vocab", "16", "--steps", "20",
               "--eval-every", "10", "--test", "16", "--val", "16", "--jobs", "2", "--no-graph", "--out", str(out),
               *(["--replicas"] if mode == "replicas" else [])]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        lines = [json.loads(x) for x in (out / "recall_sweep.jsonl").read_text().splitlines()]
        rows[mode] = {(x["layout"], x["seed"]): x for x in lines}
    assert set(rows["solo"]) == set(rows["replicas"]) == {("GA", 0), ("GA", 1), ("AA", 0)}
    for key, alone in rows["solo"].items():
        rep = rows["replicas"][key]
        assert rep["status"] == "ok" and rep["replicas_error"] is None and rep["steps"] == alone["steps"] == 20
        for (s1, a1, l1), (s2, a2, l2) in zip(alone["curve"], rep["curve"]):
            assert s1 == s2 and abs(a1 - a2) < 1e-3 and abs(l1 - l2) < 1e-3, (key, alone["curve"], rep["curve"])
    assert rows["solo"][("GA", 0)]["curve"] != rows["solo"][("GA", 1)]["curve"]  # the seeds are different runs


def test_a_case_cut_by_its_time_budget_says_so_and_gets_its_area_over_the_steps_it_had():
    """recall_auc counts the steps a run never had as 0: a seed the budget cut at step 1500 of 6000 while at 0.98 read
    0.07 beside 0.85-0.91 for seeds that finished (2026-12-03). Its row keeps that auc and adds the cut and the area
    over the steps it had; a run that reached its target or trained its whole schedule gets neither."""
    import experiments.recall_sweep as sweep
    from hlnas.search.trial import TrialResult

    curve = [[500, 0.02, 4.0], [1000, 0.90, 1.0], [1500, 0.979, 0.2]]
    m = {"mqar_acc": 0.98, "mqar_baseline": 0.016, "mqar_steps_done": 1500, "mqar_steps_to_target": None,
         "mqar_auc": 0.1, "mqar_val_baseline": 0.016, "mqar": {"steps": 6000, "runs": [{"curve": curve}]}}
    cut = sweep._row({"layout": "AA", "lr": 1e-3, "seed": 0}, TrialResult(0, "ok", m), 10.0)
    assert cut["cut_at"] == 1500 and cut["auc"] == 0.1 and cut["schedule"] == 6000
    assert 0.4 < cut["auc_steps_done"] < 0.7  # 0 -> 0.02 -> 0.90 -> 0.98 over 1500 steps, corrected
    done = sweep._row({"layout": "AA", "lr": 1e-3, "seed": 1}, TrialResult(1, "ok", {
        **m, "mqar_steps_to_target": 1500}), 10.0)
    full = sweep._row({"layout": "AA", "lr": 1e-3, "seed": 2}, TrialResult(2, "ok", {
        **m, "mqar_steps_done": 6000}), 10.0)
    assert "cut_at" not in done and "cut_at" not in full
    table = "\n".join(sweep._table([cut, done]))
    assert "1500 (cut by budget_s)" in table and f"{cut['auc_steps_done']:.3f} over 1500 steps" in table
    assert "| 0.100 |" in table  # the reached run's auc as stored
    # a paused case (--state): its area over the steps it had so far, not the schedule's with 0 for the rest
    paused = sweep._row({"layout": "AA", "lr": 1e-3, "seed": 3}, TrialResult(3, "paused", m), 10.0)
    assert "cut_at" not in paused and paused["auc_steps_done"] == cut["auc_steps_done"]
    row = sweep._table([paused])[-1]
    assert "| 1500 (paused) |" in row and f"| {cut['auc_steps_done']:.3f} over 1500 steps |" in row


def test_kernel_fallbacks_of_a_case_reach_its_row_and_a_list_under_the_table():
    """What ran on the PyTorch kernels where fla was asked for is a result, not only a log line: the compiled
    recall-only probe runs of 2026-12-06 ran there unnoticed. The run's stored fallbacks reach its row, and the table
    lists each fallback with the cases that gave it; a sweep without any adds nothing."""
    import experiments.recall_sweep as sweep
    from hlnas.search.trial import TrialResult

    why = "using the PyTorch kernels on CUDA: fla cannot be imported: ImportError: x"
    m = {"mqar_acc": 0.98, "mqar_baseline": 0.016, "mqar_steps_done": 100, "mqar_steps_to_target": 100,
         "mqar_auc": 0.9, "mqar": {"steps": 100, "runs": [{}], "kernel_fallbacks": [why]}}
    a = sweep._row({"layout": "AA", "lr": 1e-3, "seed": 0, "tag": "control"}, TrialResult(0, "ok", m), 1.0)
    b = sweep._row({"layout": "GA", "lr": 1e-3, "seed": 1}, TrialResult(1, "ok", {**m, "mqar": {"steps": 100}}), 1.0)
    assert a["kernel_fallbacks"] == [why] and b["kernel_fallbacks"] is None
    table = sweep._table([a, b])
    assert table[-1] == f"- {why}: control s0"
    assert not any("fallback" in line for line in sweep._table([b]))


def test_a_recall_run_records_the_kernel_fallbacks_of_its_process(monkeypatch):
    """train_mqar's result carries the fallbacks the process gave (backends.warn_once's), empty where there were none."""
    from hlnas.model.config import ModelConfig
    from hlnas.model.kernels import backends
    from hlnas.model.layout import Layout
    from hlnas.recall.proxy import MqarConfig, train_mqar

    monkeypatch.setattr(backends, "_logged", set())
    cfg = MqarConfig(seq_len=16, kv_pairs=2, vocab=32, batch=4, steps=2, eval_every=1, val=8, test=8, lr=1e-3)
    base = ModelConfig(d_model=16, n_layers=2, vocab_size=32, n_heads=2)
    first = train_mqar(Layout.parse("GA"), base, cfg, device="cpu")["mqar"]
    assert first["kernel_fallbacks"] == [] and first["peak_gib"] is None
    monkeypatch.setattr(backends, "_logged", {"gla: using the PyTorch kernel instead of fla: why"})
    got = train_mqar(Layout.parse("GA"), base, cfg, device="cpu")["mqar"]["kernel_fallbacks"]
    assert got == ["gla: using the PyTorch kernel instead of fla: why"]


def test_with_state_a_paused_sweep_continues_exactly_and_reads_back_what_finished(tmp_path):
    """--state: a case paused past --pause-by continues in the next run of the same command to the curve of one
    straight run; a finished case is read back from the state, not trained again; a changed case starts afresh."""
    base = [sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--layouts", "GGAG", "--layers", "4",
            "--d-model", "16", "--kv-pairs", "2", "--seq-len", "16", "--vocab", "16", "--steps", "30", "--eval-every",
            "10", "--test", "16", "--val", "16", "--jobs", "1", "--no-graph"]

    def sweep(out, *extra):
        r = subprocess.run([*base, "--out", str(tmp_path / out), *extra], capture_output=True, text=True, timeout=300,
                           cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        return [json.loads(line) for line in (tmp_path / out / "recall_sweep.jsonl").read_text().splitlines()]

    (straight,) = sweep("straight")
    state = str(tmp_path / "state")
    (paused,) = sweep("a", "--state", state, "--pause-by", "0")
    assert paused["status"] == "paused" and paused["steps"] == 10
    assert "(paused)" in (tmp_path / "a" / "recall_sweep.md").read_text()
    (resumed,) = sweep("b", "--state", state)
    assert resumed["status"] == "ok" and resumed["steps"] == 30
    assert resumed["curve"] == straight["curve"] and resumed["acc"] == straight["acc"]
    # its wall time counts both invocations, this one's beside it
    assert resumed["wall_s"] == round(paused["wall_s"] + resumed["wall_s_this_run"], 1) > resumed["wall_s_this_run"]
    (again,) = sweep("c", "--state", state)
    assert again["from_state"] and again["curve"] == resumed["curve"] and again["state_key"] == resumed["state_key"]
    (other,) = sweep("d", "--state", state, "--lrs", "3e-3")  # another case: its own state, trained afresh
    assert other["status"] == "ok" and "from_state" not in other and other["state_key"] != resumed["state_key"]


def test_pause_by_without_state_is_refused_with_a_one_line_reason(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--layouts", "AA",
                        "--pause-by", "10", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--pause-by needs --state" in r.stderr


CASE_FILES = sorted({*(ROOT / "experiments" / "paper_grid").glob("*_cases.json"),
                     *(ROOT / "experiments" / "paper_grid").glob("delta_capacity_*.json")})
assert len(CASE_FILES) >= 3


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.name)
def test_every_committed_case_file_builds_its_recall_models(path):
    """The case files a GPU session runs (h200.sh sweep_by): every case's spec, recall setup and recall model build
    here, so a misspelt layout, a bad key, a mixer setting the mixer refuses or an impossible task (K=128 pairs in a
    256-symbol vocabulary) is found on the CPU, not in a device call (on 2026-12-04 a pure layout spelt 'hgrn2', read
    as layout codes, cost one). Run a new case file through ``recall_sweep.py --check`` before its call."""
    from experiments import recall_sweep

    args = recall_sweep._parser().parse_args(["--cases", str(path), "--check"])
    cases = recall_sweep._cases(args)
    lines = recall_sweep.check(cases, args)
    assert len(lines) == len(json.loads(path.read_text())) and all(" parameters" in line for line in lines)
    for case, line in zip(cases, lines):  # the task each case trains has the case's length
        assert f"  L {case.get('seq_len', args.seq_len)}  " in line, (path.name, line)


def test_a_misspelt_layout_in_a_case_file_is_one_line_naming_it(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"layout": "hgrn2", "tag": "pure"}]))
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--cases", str(cases), "--check"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "layout string 'hgrn2': unknown layout code 'h'" in r.stderr and "H=hgrn, N=hgrn2" in r.stderr


def test_match_keeps_the_cases_whose_tag_contains_it_and_refuses_one_that_matches_none():
    from experiments import recall_sweep

    path = ROOT / "experiments" / "paper_grid" / "delta_capacity_keys.json"
    args = recall_sweep._parser().parse_args(["--cases", str(path), "--match", "gated_deltanet"])
    cases = recall_sweep._cases(args)
    assert len(cases) == 8 and all(c["tag"].startswith("gated_deltanet") for c in cases)
    args = recall_sweep._parser().parse_args(["--cases", str(path), "--match", "mamba"])
    with pytest.raises(SystemExit, match="no case of .* has a tag containing 'mamba'"):
        recall_sweep._cases(args)


def test_seeds_keeps_the_cases_of_those_seeds_and_refuses_a_bad_list():
    from experiments import recall_sweep

    path = ROOT / "experiments" / "paper_grid" / "delta_capacity_k128.json"
    args = recall_sweep._parser().parse_args(["--cases", str(path), "--seeds", "1", "--match", "deltanet pure"])
    cases = recall_sweep._cases(args)
    assert [(c["tag"], c["seed"]) for c in cases] == [("deltanet pure d128 K128 L512", 1),
                                                     ("gated_deltanet pure d128 K128 L512", 1)]
    assert len(recall_sweep._cases(recall_sweep._parser().parse_args(["--cases", str(path), "--seeds", "0"]))) == 5
    with pytest.raises(SystemExit, match="--seeds takes comma-separated integers, got 'a'"):
        recall_sweep._cases(recall_sweep._parser().parse_args(["--cases", str(path), "--seeds", "a"]))
    with pytest.raises(SystemExit, match=r"no case of .* has a seed in \[7\]"):
        recall_sweep._cases(recall_sweep._parser().parse_args(["--cases", str(path), "--seeds", "7"]))


def test_a_failed_cases_row_keeps_the_errors_first_line():
    from experiments import recall_sweep

    tail = "CUDA kernel errors might be asynchronously reported at some other API call\n" * 10
    text = recall_sweep._error_text("AcceleratorError: CUDA error: misaligned address\n" + tail)
    assert text.startswith("AcceleratorError: CUDA error: misaligned address [...] ") and len(text) < 400
    assert recall_sweep._error_text("ValueError: short\nline") == "ValueError: short\nline"
    assert recall_sweep._error_text(None) is None and recall_sweep._error_text("") is None


def test_a_recall_run_records_its_process_peak_gpu_memory_and_none_off_cuda():
    """The recall result's ``mqar.peak_gib`` (for sizing units of replicas): None on the CPU; on CUDA the process's peak
    allocation in GiB, read from torch.cuda.max_memory_allocated."""
    from unittest import mock

    from hlnas.training.loop import peak_gib

    assert peak_gib("cpu") is None
    with mock.patch("torch.cuda.max_memory_allocated", return_value=3 * 2**30 + 2**29) as seen:
        assert peak_gib("cuda:0") == 3.5
    assert seen.call_args.args[0] == __import__("torch").device("cuda:0")

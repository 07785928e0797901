"""``hlnas search`` and ``hlnas status``: the front printed, a refused resume, joining a Ray cluster,
and the no-argument default search (the main job) end to end."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from hlnas.cli.main import main
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from tests.helpers import torch_threads
from tests.searches import tiny_raw, tiny_space

pytestmark = pytest.mark.usefixtures("one_thread")

optuna.logging.set_verbosity(optuna.logging.WARNING)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def done_study(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('status')}/s.db"
    with torch_threads(1):  # module fixtures run before the one_thread fixture
        run_search(tiny_space(), SearchOptions(storage=url, study_name="st", n_trials=4))
    return url


def test_status_prints_the_front(done_study, capsys):
    assert main(["status", "--storage", done_study, "--study", "st"]) == 0
    out = capsys.readouterr().out
    assert "study 'st': 4 complete" in out and "objectives: maximize recall, minimize kv_cache_bytes" in out
    assert re.search(r"#\s+layout\s+ratio\s+recall\s+raw\s+no-rec.\s+KV cache\s+val_loss\s+params", out)
    front_lines = [l for l in out.splitlines() if re.match(r"\s+\d+\s+[GA]{4}\s", l)]
    assert front_lines and all(re.search(r"\d\.\d{3}\s+\S+ \w*B\s+\d\.\d{3}\s+[\d,]+$", l) for l in front_lines)

    assert main(["status", "--storage", done_study, "--study", "st", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["trials"]["complete"] == 4 and d["front"] and d["target"] == 4
    study = optuna.load_study(study_name="st", storage=done_study)
    best = {t.user_attrs["layout"] for t in study.best_trials}
    assert {r["layout"] for r in d["front"]} == best
    for r in d["front"]:
        assert {"layout", "recall", "kv_cache_bytes", "val_loss", "params"} <= set(r)
        assert r["kv_cache"] == r["kv_cache_bytes"] and 0 <= r["recall"] <= 1 and r["val_loss"] > 0
    assert [r["kv_cache_bytes"] for r in d["front"]] == sorted(r["kv_cache_bytes"] for r in d["front"])

    assert "GGGG" in {r["layout"] for r in d["front"]}  # no KV cache at all: always on the front


def test_status_without_study_reads_the_only_one_and_lists_several(done_study, capsys, tmp_path):
    assert main(["status", "--storage", done_study]) == 0
    assert "study 'st': 4 complete" in capsys.readouterr().out

    url = f"sqlite:///{tmp_path}/two.db"
    for name in ("b_study", "a_study"):
        optuna.create_study(study_name=name, storage=url)
    for cmd in (["status", "--storage", url], ["report", "--storage", url, "--out", str(tmp_path / "r")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith(f"{url} holds 2 studies; name one with --study: a_study, b_study")
    assert not (tmp_path / "r").exists()  # refused before anything was written

    empty = f"sqlite:///{tmp_path}/empty.db"
    optuna.storages.RDBStorage(empty)  # the schema, no study
    assert main(["status", "--storage", empty]) == 2
    assert "holds no study yet" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_search_joins_an_existing_ray_cluster(tmp_path):
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    # --block keeps the head's processes children of this one: stopped by its pid, not a machine-wide `ray stop`
    head = subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             f"--temp-dir={temp_dir}", "--block"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        space_file = tmp_path / "space.yaml"
        space_file.write_text(yaml.safe_dump(tiny_raw()))
        url = f"sqlite:///{tmp_path}/cluster.db"
        r = subprocess.run([sys.executable, "-m", "hlnas.cli.main", "search", "--space", str(space_file), "--storage", url,
                            "--study", "c", "--trials", "2", "--workers", "2", "--address", f"127.0.0.1:{port}",
                            "--no-progress"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "2 worker(s), ray executor" in r.stderr and "Pareto front" in r.stdout
        trials = optuna.load_study(study_name="c", storage=url).get_trials(states=(TrialState.COMPLETE,))
        pids = {t.user_attrs["worker_pid"] for t in trials}
        assert len(trials) == 2 and len(pids) == 2
        # the workers were processes of the cluster started above: its session logs name them
        logs = glob.glob(f"{temp_dir}/session_*/logs/worker-*")
        cluster_pids = {int(m.group(1)) for f in logs if (m := re.search(r"-(\d+)\.(?:out|err)$", f))}
        assert pids <= cluster_pids, (pids, sorted(cluster_pids))
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_plain_hlnas_search_is_the_main_job(tmp_path):
    """No arguments: the embedded tiny space calibrated then searched on this machine's CPU cores, SQLite in the
    current directory, front printed."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "hlnas.cli.main", "search", "--no-progress"], cwd=tmp_path,
                       env={k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"}, capture_output=True, text=True,
                       timeout=600)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "hlnas.db").exists()
    assert "study 'tiny' stored in sqlite:///hlnas.db" in r.stdout and "Pareto front" in r.stdout
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path}/hlnas.db")
    done = [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs]
    assert len(done) == 11 and len({t.user_attrs["layout"] for t in done}) == 11  # the whole 11-candidate space
    assert len(study.directions) == 3 and study.best_trials
    # the protocol's controls ran first and passed; their seed-0 runs are 5 of the 11 trials
    cal = study.user_attrs["hlnas_calibration"]
    assert cal["status"] == "valid" and len(cal["runs"]) == 10 and "calibration:" in r.stderr
    assert sum("calibration" in t.user_attrs for t in done) == 5
    rows = {r["role"] + ":" + r["mixer"]: r for r in cal["verdict"]["rows"]}
    assert min(rows["control:transformer"]["recall"]) >= 0.9
    assert all(rows[f"pure:{m}"]["mean"] < rows[f"hybrid:{m}"]["mean"] for m in ("hgrn", "hgrn2"))
    assert "no-rec." in r.stdout and "b = 0.250, copy_any" in r.stdout
    print(f"hlnas search (defaults): {wall:.0f} s wall, {len(study.trials)} trials")

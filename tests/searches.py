"""The small searches the tests run, shared: the tiny GLA space and its trained trials, a storage URL of each kind, and a
real ``hlnas search`` process with what it takes to stop it mid-trial (tests/test_resume.py and the tests of executors,
faults and the command line)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time

import optuna
import pytest
import sqlalchemy.exc
import yaml
from optuna.trial import TrialState

from hlnas.model.layout import Layout
from hlnas.search import executors
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.model.cost import layout_metrics
from hlnas.search.trial import TrialResult
from hlnas.space import space_from_dict

__all__ = ["tiny_raw", "tiny_space", "trained", "sampler_space", "raw_space", "fake_trial", "storage_url", "search_cli", "stored_trials", "stop_while_training",
           "stoppable_space"]


def tiny_raw(**top) -> dict:
    """A 4-layer GLA space: pure, 2:1, 4:1 and the Transformer (4 layouts), real tiny training."""
    raw = {
        "name": "tiny-test",
        "mixers": ["gla"],
        "ratios": ["pure", "2:1", "4:1"],
        "transformer": True,
        "layers": 4,
        "scale": {
            "preset": "proxy-tiny",
            "model": {"d_model": 32, "n_heads": 2, "mlp_hidden": 64},
            "train": {"tokens": 1024, "batch_size": 4, "seq_len": 32, "val_batches": 2, "log_every": 4, "lr": 3e-3},
            "score": {"objectives": ["val_loss", "mqar"], "mqar": {"steps": 5, "test": 16, "batch": 8, "seq_len": 32,
                                                                   "kv_pairs": 4}},
            "kv_context": 256,
        },
        "sampler": "grid",
        "calibration": {"enabled": False},  # these tests are about the search loop; tests/test_calibrate.py runs controls
    }
    raw.update(top)
    return raw


def tiny_space(**top):
    return space_from_dict(tiny_raw(**top))


def trained(study) -> list:
    """COMPLETE trials that trained (not copies of another trial's result)."""
    return [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs]


def sampler_space(sampler: str):
    """The samplers' space: GLA, DeltaNet and HGRN-2 at four ratios and two placements, and the Transformer (6 layers),
    which its KV bytes make infeasible; searched with ``sampler`` (tests/test_samplers.py, tests/test_search_loop.py)."""
    return space_from_dict({
        "name": f"s-{sampler}", "mixers": ["gla", "deltanet", "hgrn2"], "ratios": ["pure", "6:1", "3:1", "2:1"],
        "placements": ["paper", "front"], "transformer": True, "layers": 6,
        "scale": {"preset": "proxy-tiny", "train": {"tokens": 512, "seq_len": 32, "batch_size": 2},
                  "score": {"objectives": ["val_loss", "mqar"]}},
        "objectives": [{"name": "recall", "metric": "recall"}, {"name": "kv", "metric": "kv_cache_bytes"}],
        "constraints": {"max_kv_bytes": 5 * 2**20},  # excludes the Transformer (6 attention layers)
        "sampler": sampler, "calibration": {"enabled": False},
    })


def raw_space(**top) -> dict:
    """The calibration tests' space: GLA and HGRN at pure, 6:1 and 3:1, and the Transformer (6 layers), on a grid."""
    raw = {"name": "cal", "mixers": ["gla", "hgrn"], "ratios": ["pure", "6:1", "3:1"], "transformer": True, "layers": 6,
           "scale": {"preset": "proxy-tiny", "train": {"tokens": 512, "seq_len": 32, "batch_size": 2},
                     "score": {"objectives": ["val_loss", "mqar"]}},
           "sampler": "grid"}
    raw.update(top)
    return raw


def fake_trial(scores: dict):
    """A run_trial whose recall is scores[(layout, seed)] (default: by attention count), baseline 0.25."""
    calls = []

    def run(spec):
        calls.append((spec.number, spec.layout, spec.recipe.train.seed, spec.recall_only))
        m = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
        n_attn = len(Layout.parse(spec.layout).attention_layers)
        raw = scores.get((spec.layout, spec.recipe.train.seed), min(0.99, 0.28 + 0.35 * n_attn))
        m.update(status="ok", val_loss=3.0, mqar_acc=raw, mqar_baseline=0.25, mqar_baseline_name="copy_any",
                 mqar_baselines={"copy_any": 0.25, "uniform": 0.03})
        from hlnas.recall.baselines import recall_metrics

        m.update(recall_metrics(m, ["mqar_acc"]))
        return TrialResult(spec.number, "ok", m)

    return run, calls


def interrupted_calibration(monkeypatch, tmp_path) -> tuple[str, list]:
    """A study 'c' (raw_space) whose calibration was interrupted (Ctrl-C) after 3 of its 10 runs, stored as running;
    its storage URL and fake_trial's calls. ``executors.run_trial`` is fake_trial's again afterwards."""
    run, calls = fake_trial({})

    def interrupt_at_the_4th(spec):
        if len(calls) == 3:
            raise KeyboardInterrupt
        return run(spec)

    monkeypatch.setattr(executors, "run_trial", interrupt_at_the_4th)
    url = f"sqlite:///{tmp_path}/c.db"
    with pytest.raises(KeyboardInterrupt):
        run_search(space_from_dict(raw_space()), SearchOptions(storage=url, study_name="c", n_trials=7))
    monkeypatch.setattr(executors, "run_trial", run)
    return url, calls


def storage_url(kind: str, tmp_path, request) -> str:
    """A fresh storage of ``kind`` (sqlite, journal, or postgresql: the throw-away server of the pg_url fixture)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/study.db"
    if kind == "journal":
        return f"journal:///{tmp_path}/study.log"
    return request.getfixturevalue("pg_url")


def search_cli(args: list[str], cwd, own_group: bool = False) -> subprocess.Popen:
    """``own_group``: the search leads its own process group, so a signal can go to all of it, workers included."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # 1 thread: tiny models, busy 2-core CI
    if "--workers" not in args:  # one inline trial at a time (the CLI's default on a 2-core CPU is 2 processes)
        args = [*args, "--workers", "1"]
    return subprocess.Popen([sys.executable, "-m", "hlnas.cli.main", "search", *args, "--no-progress"], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=own_group)


def stored_trials(url: str, name: str) -> list:
    """The study's trials as another process sees them; [] while it does not exist yet or the search holds
    SQLite's lock (a poll must stay quick and never fail the test: the next poll reads again)."""
    try:
        return optuna.load_study(study_name=name, storage=url).get_trials()
    except (KeyError, sqlalchemy.exc.OperationalError):
        return []


def stop_while_training(proc: subprocess.Popen, url: str, name: str, sig: int, min_complete: int,
                         group: bool = False) -> None:
    """Send ``sig`` once the storage shows >= min_complete COMPLETE trials and one RUNNING that is training, with
    most of its training still ahead; ``group``: to the search's whole process group (as Slurm at a time limit,
    ``timeout`` or a terminal's Ctrl-C do).

    Training: its layout attr (written right after it is asked) is one no COMPLETE trial has, and no RUNNING trial
    asked before it (a duplicate that waits on that one). A re-proposed layout is told a stored result at once and
    never trains, yet on a loaded 2-core runner it stays RUNNING for up to 0.3 s (0.08 s idle): the former check,
    "RUNNING for 0.2 s", let it through, the stop landed after it was told and no trial was left to mark
    interrupted. Ahead: the trial is younger than a quarter of the quickest trial this study trained (the storage's
    own start and end times), so a poll that comes late (the poller starved by load) waits for the next trial
    instead of signalling one about to finish."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"search ended before it could be stopped:\n{proc.communicate()[1][-3000:]}"
        ts = stored_trials(url, name)
        complete = [t for t in ts if t.state == TrialState.COMPLETE]
        done = {t.user_attrs.get("layout") for t in complete}
        quickest = min(((t.datetime_complete - t.datetime_start).total_seconds() for t in complete
                        if "reused_from" not in t.user_attrs), default=None)
        training: dict = {}  # layout -> the first RUNNING trial of it
        for t in ts:
            if t.state == TrialState.RUNNING and t.user_attrs.get("layout") not in (None, *done):
                training.setdefault(t.user_attrs["layout"], t)
        if len(complete) >= min_complete and training and quickest is not None:
            age = min((datetime.datetime.now() - t.datetime_start).total_seconds() for t in training.values())
            if age < quickest / 4:
                if group:
                    os.killpg(proc.pid, sig)
                else:
                    proc.send_signal(sig)
                return
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("no trial was seen training early enough within 120 s")


def stoppable_space(tmp_path):
    """A space file of 7 layouts whose trials take 1-2.5 s each on an idle core: a wide window to stop a search in.
    Their LM half (256 steps) is what sets the window: the recall half stops at its target, so with 32 LM steps an
    all-attention trial ended within 0.35 s, too soon to catch mid-trial (stop_while_training)."""
    raw = tiny_raw(mixers=["gla", "hgrn"], sampler="random")
    raw["scale"]["train"]["tokens"] = 32768
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(raw))
    return space_file

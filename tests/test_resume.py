"""Crash and resume of a REAL ``hlnas search`` process: Ctrl-C, then ``kill -9``, then a plain
``hlnas search --resume --storage URL --study NAME`` that needs nothing else and finishes the study. Then, in this
process: what a Ctrl-C at each point of a new search says, re-queued trials run first, and a resume keeping the
study's calibration choice."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
import sqlalchemy.exc
import yaml
from optuna.trial import TrialState

from tests.test_study import tiny_raw

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_TRIALS = 5


def _cli(args: list[str], cwd, own_group: bool = False) -> subprocess.Popen:
    """``own_group``: the search leads its own process group, so a signal can go to all of it, workers included."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # 1 thread: tiny models, busy 2-core CI
    if "--workers" not in args:  # one inline trial at a time (the CLI's default on a 2-core CPU is 2 processes)
        args = [*args, "--workers", "1"]
    return subprocess.Popen([sys.executable, "-m", "hlnas.cli", "search", *args, "--no-progress"], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=own_group)


def _trials(url: str, name: str) -> list:
    """The study's trials as another process sees them; [] while it does not exist yet or the search holds
    SQLite's lock (a poll must stay quick and never fail the test: the next poll reads again)."""
    try:
        return optuna.load_study(study_name=name, storage=url).get_trials()
    except (KeyError, sqlalchemy.exc.OperationalError):
        return []


def _stop_while_training(proc: subprocess.Popen, url: str, name: str, sig: int, min_complete: int,
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
        ts = _trials(url, name)
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
    all-attention trial ended within 0.35 s, too soon to catch mid-trial (_stop_while_training)."""
    raw = tiny_raw(mixers=["gla", "hgrn"], sampler="random")
    raw["scale"]["train"]["tokens"] = 32768
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(raw))
    return space_file


def test_interrupt_then_kill_9_then_resume_finishes_without_duplicates(tmp_path):
    space_file = stoppable_space(tmp_path)
    url, name = f"sqlite:///{tmp_path}/crash.db", "crash"

    # 1. Ctrl-C while a trial trains: exits 130, says how to resume, leaves nothing RUNNING
    p = _cli(["--space", str(space_file), "--storage", url, "--study", name, "--trials", str(N_TRIALS)], tmp_path)
    _stop_while_training(p, url, name, signal.SIGINT, min_complete=1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    assert f"hlnas search --resume --storage {url} --study {name}" in err
    ts = _trials(url, name)
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    (interrupted,) = [t.number for t in ts if t.user_attrs.get("error_kind") == "interrupted"]
    assert ts[interrupted].state == TrialState.FAIL
    assert [t.state for t in ts if t.user_attrs.get("requeued_from") == interrupted] == [TrialState.WAITING]

    # 2. resume (storage + study only), then kill -9 mid-trial: the trial stays RUNNING in storage
    p = _cli(["--resume", "--storage", url, "--study", name], tmp_path)
    complete_before = sum(t.state == TrialState.COMPLETE for t in _trials(url, name))
    _stop_while_training(p, url, name, signal.SIGKILL, min_complete=complete_before + 1)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    ts = _trials(url, name)
    (killed,) = [t.number for t in ts if t.state == TrialState.RUNNING]  # what a crash leaves behind
    kept = {t.number: t.values for t in ts if t.state == TrialState.COMPLETE}

    # 3. resume again: the orphan is failed and re-queued, the study reaches N_TRIALS trained layouts
    p = _cli(["--resume", "--storage", url, "--study", name], tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    assert "re-queued 1 trial(s) left running by an earlier process" in err
    assert "Pareto front" in out and f"study '{name}' stored in {url}" in out

    ts = _trials(url, name)
    assert not [t for t in ts if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for n, values in kept.items():  # completed results are never lost or changed
        assert ts[n].state == TrialState.COMPLETE and ts[n].values == values
    assert ts[killed].state == TrialState.FAIL and ts[killed].user_attrs["error_kind"] == "interrupted"
    trained = [t for t in ts if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs]
    layouts = [t.user_attrs["layout"] for t in trained]
    assert len(layouts) == N_TRIALS and len(set(layouts)) == N_TRIALS  # reached the target, no layout twice
    for n in (interrupted, killed):  # each stopped trial's layout was trained by its re-queued copy
        (retry,) = [t for t in ts if t.user_attrs.get("requeued_from") == n]
        assert retry.state == TrialState.COMPLETE and retry.params == ts[n].params


# -- an interrupt names a study to resume only when one is stored (issue 25) -------------------------------------------
def _raises_sigint(fn):
    """``fn`` that receives a real SIGINT (Ctrl-C) after doing its work."""
    def wrapped(*a, **k):
        out = fn(*a, **k)
        signal.raise_signal(signal.SIGINT)
        return out
    return wrapped


@pytest.mark.parametrize("where", ["storage_opened", "creating", "executor_starting", "searching"])
def test_an_interrupt_names_a_study_to_resume_only_when_it_is_stored(where, tmp_path, monkeypatch, capsys):
    """Ctrl-C at four points of a new search: before the study is created (its storage just opened), while it is
    created (the signal lands once it is whole), while the executor starts (the new empty study is removed again),
    and in the search. The message names the resume command only where that command works; elsewhere the same
    command starts afresh."""
    import hlnas.search.study
    from hlnas.cli import main
    from hlnas.search.study import resumable

    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(tiny_raw()))
    url = f"sqlite:///{tmp_path}/c.db"
    argv = ["search", "--space", str(space_file), "--storage", url, "--study", "c", "--trials", "1", "--workers", "1",
            "--no-progress"]
    target = {"storage_opened": (hlnas.search.study, "open_or_create_storage"), "creating": (optuna, "create_study"),
              "executor_starting": (hlnas.search.study, "_executor"), "searching": (hlnas.search.study, "search_loop")}[where]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own Ctrl-C, whatever runs the tests
    try:
        with monkeypatch.context() as m:
            m.setattr(*target, _raises_sigint(getattr(*target)))
            assert main(argv) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    stored = where in ("creating", "searching")
    assert resumable(url, "c") is stored
    if stored:
        assert f"interrupted; completed trials are stored. Resume with:\n  hlnas search --resume --storage {url} --study c" in err
        again = ["search", "--resume", "--storage", url, "--study", "c", "--workers", "1", "--no-progress"]
    else:
        assert f"interrupted before study 'c' was stored in {url}: nothing was kept. The same command starts it afresh" in err
        assert "--resume" not in err
        again = argv
    assert main(again) == 0  # the command the message gives works
    assert "Pareto front" in capsys.readouterr().out


def test_resumable_says_unknown_when_the_storage_cannot_be_read(tmp_path):
    from hlnas.search.study import resumable

    assert resumable(f"sqlite:///{tmp_path}/none.db", "c") is False and not (tmp_path / "none.db").exists()
    assert resumable(f"journal:///{tmp_path}/none.log", "c") is False and not (tmp_path / "none.log").exists()
    assert resumable("postgresql://x@127.0.0.1:1/x", "c") is None


# -- re-queued trials run first (issue 25) -----------------------------------------------------------------------------
def test_requeued_trials_run_before_candidates_queued_earlier(tmp_path):
    """The grid sampler queues every candidate first; a trial re-queued after them is still the next one run, and
    the target is met with it rather than with a candidate that happened to be queued earlier."""
    from hlnas.search.study import load_hlnas_study, run_search
    from tests.test_study import tiny_space

    url = f"sqlite:///{tmp_path}/g.db"
    space = tiny_space()  # grid: 4 candidates queued, then one trained
    run_search(space, storage=url, study_name="g", n_trials=1)
    study = optuna.load_study(study_name="g", storage=url)
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 3
    orphan = study.ask({k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()})
    orphan.set_user_attr("layout", str(space.layout(orphan.params)))  # the next grid candidate, left RUNNING
    run_search(None, storage=url, study_name="g", n_trials=2, resume=True)
    study = load_hlnas_study(url, "g")
    (copy,) = [t for t in study.trials if t.user_attrs.get("requeued_from") == orphan.number]
    assert copy.state == TrialState.COMPLETE and copy.params == orphan.params and "reused_from" not in copy.user_attrs
    trained = [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs]
    assert [t.number for t in trained] == [0, copy.number]  # the grid's later candidates wait for a larger target
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 2


# -- a resume keeps the study's calibration choice (issue 25) ----------------------------------------------------------
CALIBRATION_LAYOUTS = {"AAAAAA", "GGGGGG", "GGAGGA", "HHHHHH", "HHAHHA"}  # tests.test_calibrate.raw_space's seed-0 controls


def _killed_skipped_study(kind: str, tmp_path, monkeypatch):
    """``hlnas search --trials 3 --skip-calibration`` on a space that calibrates by default, killed (-9) once one trial
    is done and two run: what it leaves in the storage. Trials are fake (tests.test_calibrate.fake_trial)."""
    from hlnas.search import executors
    from hlnas.space import space_from_dict
    from hlnas.search.storage import load_study
    from hlnas.search.study import run_search
    from tests.test_calibrate import fake_trial, raw_space
    from tests.test_study import _url

    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = _url(kind, tmp_path, None)
    space = space_from_dict(raw_space(sampler="random"))
    run_search(space, storage=url, study_name="a", n_trials=1, skip_calibration=True)
    study = load_study(url, "a")
    study.set_user_attr("hlnas_trials", 3)  # the target the killed search was started with
    first = study.trials[0].user_attrs["layout"]
    # the orphans: layouts no control trains first, where the space has them
    others = sorted((p for p in space.grid() if str(space.layout(p)) != first),
                    key=lambda p: str(space.layout(p)) in CALIBRATION_LAYOUTS)
    dists = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()}
    orphans = []
    for params in others[:2]:
        study.enqueue_trial(params)
        orphan = study.ask(dists)  # RUNNING, its layout chosen, its process gone
        orphan.set_user_attr("layout", str(space.layout(params)))
        orphans.append(orphan.number)
    calls.clear()
    return url, calls, orphans


def _requeued_copies(study, orphans: list[int]) -> list:
    return [t for n in orphans for t in study.trials if t.user_attrs.get("requeued_from") == n]


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_resume_keeps_skip_calibration_and_trains_the_requeued_trials(kind, tmp_path, monkeypatch, capsys):
    from hlnas.cli import main
    from hlnas.search.study import load_hlnas_study

    url, calls, orphans = _killed_skipped_study(kind, tmp_path, monkeypatch)
    assert main(["search", "--resume", "--storage", url, "--study", "a", "--workers", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert [c for c in calls if c[0] < 0] == []  # no control ran: the study was started with --skip-calibration
    assert (f"calibration: skipped, as when study 'a' was started (--skip-calibration); its recall stays unvalidated. "
            f"To calibrate it: hlnas search --resume --storage {url} --study a --calibrate") in err
    study = load_hlnas_study(url, "a")
    assert study.user_attrs["hlnas_calibration"] == {"status": "skipped"}
    copies = _requeued_copies(study, orphans)
    assert [t.state for t in copies] == [TrialState.COMPLETE] * 2 and "reused_from" not in copies[0].user_attrs
    assert [t.params for t in copies] == [study.trials[n].params for n in orphans]
    layouts = [t.user_attrs["layout"] for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs]
    assert len(layouts) == 3 == len(set(layouts)) and len([c for c in calls if c[0] >= 0]) == 2  # the two orphans only
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_resume_calibrate_runs_the_controls_and_still_trains_the_requeued_trials(kind, tmp_path, monkeypatch, capsys):
    """Calibration's seed-0 runs alone meet the target of 3: the re-queued trials run anyway, the target rising."""
    from hlnas.cli import main
    from hlnas.search.study import load_hlnas_study

    url, calls, orphans = _killed_skipped_study(kind, tmp_path, monkeypatch)
    assert main(["search", "--resume", "--storage", url, "--study", "a", "--workers", "1", "--no-progress",
                 "--calibrate"]) == 0
    err = capsys.readouterr().err
    assert len([c for c in calls if c[0] < 0]) == 10 and "--skip-calibration" not in err
    study = load_hlnas_study(url, "a")
    assert study.user_attrs["hlnas_calibration"]["status"] == "valid"
    copies = _requeued_copies(study, orphans)
    assert len(copies) == 2 and all(t.state == TrialState.COMPLETE for t in copies)
    done = {t.user_attrs["layout"] for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs}
    assert {study.trials[n].user_attrs["layout"] for n in orphans} <= done
    assert "re-queued layout(s): the trial target rises from 3 to" in err
    assert study.user_attrs["hlnas_trials"] == len(done) > 3
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))

"""Crash and resume of a REAL ``hlnas search`` process: Ctrl-C, then ``kill -9``, then a plain
``hlnas search --resume --storage URL --study NAME`` that needs nothing else and finishes the study. Then, in this
process: what a Ctrl-C at each point of a new search says, re-queued trials run first, and a resume keeping the
study's calibration choice."""

from __future__ import annotations

import signal

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.searches import search_cli, stop_while_training, stoppable_space, stored_trials, tiny_raw

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_TRIALS = 5


def test_interrupt_then_kill_9_then_resume_finishes_without_duplicates(tmp_path):
    space_file = stoppable_space(tmp_path)
    url, name = f"sqlite:///{tmp_path}/crash.db", "crash"

    # 1. Ctrl-C while a trial trains: exits 130, says how to resume, leaves nothing RUNNING
    p = search_cli(["--space", str(space_file), "--storage", url, "--study", name, "--trials", str(N_TRIALS)], tmp_path)
    stop_while_training(p, url, name, signal.SIGINT, min_complete=1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    assert f"hlnas search --resume --storage {url} --study {name}" in err
    ts = stored_trials(url, name)
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    (interrupted,) = [t.number for t in ts if t.user_attrs.get("error_kind") == "interrupted"]
    assert ts[interrupted].state == TrialState.FAIL
    assert [t.state for t in ts if t.user_attrs.get("requeued_from") == interrupted] == [TrialState.WAITING]

    # 2. resume (storage + study only), then kill -9 mid-trial: the trial stays RUNNING in storage
    p = search_cli(["--resume", "--storage", url, "--study", name], tmp_path)
    complete_before = sum(t.state == TrialState.COMPLETE for t in stored_trials(url, name))
    stop_while_training(p, url, name, signal.SIGKILL, min_complete=complete_before + 1)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    ts = stored_trials(url, name)
    (killed,) = [t.number for t in ts if t.state == TrialState.RUNNING]  # what a crash leaves behind
    kept = {t.number: t.values for t in ts if t.state == TrialState.COMPLETE}

    # 3. resume again: the orphan is failed and re-queued, the study reaches N_TRIALS trained layouts
    p = search_cli(["--resume", "--storage", url, "--study", name], tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    assert "re-queued 1 trial(s) left running by an earlier process" in err
    assert "Pareto front" in out and f"study '{name}' stored in {url}" in out

    ts = stored_trials(url, name)
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
    from hlnas.cli.main import main
    from hlnas.search.study import resumable

    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(tiny_raw()))
    url = f"sqlite:///{tmp_path}/c.db"
    argv = ["search", "--space", str(space_file), "--storage", url, "--study", "c", "--trials", "1", "--workers", "1",
            "--no-progress"]
    target = {"storage_opened": (hlnas.search.study, "open_or_create_storage"), "creating": (optuna, "create_study"),
              "executor_starting": (hlnas.search.study, "executor_from_options"), "searching": (hlnas.search.study, "search_loop")}[where]
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
    from hlnas.search.options import SearchOptions
    from hlnas.search.study import load_hlnas_study, run_search
    from tests.searches import tiny_space

    url = f"sqlite:///{tmp_path}/g.db"
    space = tiny_space()  # grid: 4 candidates queued, then one trained
    run_search(space, SearchOptions(storage=url, study_name="g", n_trials=1))
    study = optuna.load_study(study_name="g", storage=url)
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 3
    orphan = study.ask({k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()})
    orphan.set_user_attr("layout", str(space.layout(orphan.params)))  # the next grid candidate, left RUNNING
    run_search(None, SearchOptions(storage=url, study_name="g", n_trials=2, resume=True))
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
    from hlnas.search.options import SearchOptions
    from hlnas.search.study import run_search
    from tests.searches import fake_trial, raw_space
    from tests.searches import storage_url

    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = storage_url(kind, tmp_path, None)
    space = space_from_dict(raw_space(sampler="random"))
    run_search(space, SearchOptions(storage=url, study_name="a", n_trials=1, skip_calibration=True))
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
    from hlnas.cli.main import main
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
    from hlnas.cli.main import main
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

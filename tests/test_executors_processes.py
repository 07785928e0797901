"""The ``processes`` executor (long-lived local worker processes, no Ray) and the search's time limit.

This is how a GPU machine without Ray runs several small candidates at once (experiments/paper_grid)."""

from __future__ import annotations

import os
import signal
import time

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.errors import ConfigError
from hlnas.search.executors import ProcessExecutor, make_executor
from hlnas.search.records import trial_spec as _spec
from hlnas.search.study import load_hlnas_study, run_search
from hlnas.search.options import SearchOptions
from tests.helpers import kill_first_worker_at_next_start
from hlnas.space import space_from_dict
from tests.searches import search_cli, stop_while_training, stoppable_space, stored_trials, tiny_raw, tiny_space, trained

pytestmark = pytest.mark.usefixtures("one_thread")

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_worker_processes_run_trials_in_parallel_and_stay_alive_between_trials():
    space = tiny_space()
    ex = make_executor("processes", 2)
    try:
        assert isinstance(ex, ProcessExecutor) and ex.capacity == 2
        specs = [_spec(space, n, p, None) for n, p in enumerate(space.grid()[:4])]
        ex.submit(specs[0])
        ex.submit(specs[1])
        with pytest.raises(Exception, match="no idle worker process"):
            ex.submit(specs[2])
        results = []
        while len(results) < 4:
            for r in ex.wait(timeout=60):
                results.append(r)
                if len(results) + ex.in_flight() < 4:
                    ex.submit(specs[len(results) + ex.in_flight()])
        assert sorted(r.number for r in results) == [0, 1, 2, 3] and all(r.ok for r in results)
        pids = {r.metrics["worker_pid"] for r in results}
        assert len(pids) == 2 and os.getpid() not in pids  # two workers served all four trials
        spans = sorted((r.metrics["started_at"], r.metrics["finished_at"]) for r in results)
        assert any(a[1] > b[0] for a, b in zip(spans, spans[1:])), f"no two trials overlapped: {spans}"
        assert ex.wait(timeout=0.1) == []
    finally:
        ex.shutdown()
    with pytest.raises(ConfigError, match="workers must be >= 1, got 0"):
        ProcessExecutor(0)


def test_an_idle_worker_that_died_is_replaced_when_a_trial_is_submitted_to_it():
    """Between trials nothing watches a worker; the next submit found its pipe broken and crashed the search."""
    space = tiny_space()
    ex = ProcessExecutor(1)
    try:
        proc = ex._slots[0][0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        ex.submit(_spec(space, 0, space.grid()[0], None))
        (result,) = ex.wait(timeout=120)
        assert result.ok and result.metrics["worker_pid"] != proc.pid
    finally:
        ex.shutdown()


def test_workers_leave_sigterm_to_the_driver():
    ex = ProcessExecutor(1)
    try:
        proc = ex._slots[0][0]
        time.sleep(1.0)  # the worker has installed its handlers
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert proc.is_alive()
    finally:
        ex.shutdown()
    assert not proc.is_alive()  # shutdown still ends it


def test_a_killed_worker_process_fails_its_trial_and_the_study_goes_on(tmp_path):
    url, seen = f"sqlite:///{tmp_path}/die.db", {}
    run_search(tiny_space(), SearchOptions(
        storage=url, study_name="die", n_trials=4, executor="processes", workers=1,
        on_event=kill_first_worker_at_next_start(seen)))
    study = load_hlnas_study(url, "die")
    victim = study.trials[seen["killed"]]
    a = victim.user_attrs
    assert victim.state == TrialState.FAIL and (a["status"], a["error_kind"]) == ("failed", "worker_died")
    assert f"worker died while running trial {victim.number} (exit code -9); re-queued" == a["error"]
    done = trained(study)
    assert len(done) == 4  # on a replacement worker, the victim's layout among them (re-queued)
    (retry,) = [t for t in study.trials if t.user_attrs.get("requeued_from") == victim.number]
    assert retry.state == TrialState.COMPLETE
    assert {t.user_attrs["worker_pid"] for t in done if t.number > victim.number} - {seen["pid"]}


def test_time_limit_pauses_running_trials_and_resume_continues_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default folder of paused recall models is ./hlnas-rungs
    url, events = f"sqlite:///{tmp_path}/t.db", []
    raw = tiny_raw()
    raw["scale"]["score"]["mqar"].update(steps=40, eval_every=10)  # checks before the end, where a run can pause
    space = space_from_dict(raw)
    # a run's first recall check waits out the limit, so a trial started within it always pauses there, however fast
    # the machine; the limit leaves a loaded machine time to start one (0.5 s did not, once, on a 2-core CI runner)
    import hlnas.recall.proxy as rp

    real_check = rp.check_stop

    def check_after_the_limit(cfg, acc, elapsed_s, until, done, limit):
        if until is not None:
            time.sleep(max(0.0, until - time.time()) + 0.01)
        return real_check(cfg, acc, elapsed_s, until, done, limit)

    monkeypatch.setattr(rp, "check_stop", check_after_the_limit)
    run_search(space, SearchOptions(
        storage=url, study_name="t", n_trials=4, time_limit=4.0, on_event=lambda k, d: events.append((k, d))))
    study = load_hlnas_study(url, "t")
    # the trials started within the limit ran past it and paused at their first recall check: told FAIL as
    # "paused", re-queued, their recall models kept; none is left RUNNING and no other started
    paused = [t for t in study.trials if t.user_attrs.get("error_kind") == "paused"]
    assert paused and not trained(study) and not study.get_trials(states=(TrialState.RUNNING,))
    assert all(t.state == TrialState.FAIL and "a resume continues it" in t.user_attrs["error"] for t in paused)
    assert ("time_limit", {"seconds": 4.0, "trained": 0}) in events
    assert [k for k, _ in events].count("paused") == len(paused)
    root = study.user_attrs["hlnas_rung_root"]
    assert sorted(os.listdir(os.path.join(root, "trials"))) == sorted(t.user_attrs["layout"] for t in paused)
    run_search(None, SearchOptions(storage=url, study_name="t", n_trials=4, resume=True))
    done = trained(load_hlnas_study(url, "t"))
    assert len({t.user_attrs["layout"] for t in done}) == 4
    for t in paused:  # each paused layout went on from its kept recall model, which is removed once told
        (again,) = [d for d in done if d.user_attrs["layout"] == t.user_attrs["layout"]]
        assert again.user_attrs["mqar"]["runs"][0]["resumed_s"] > 0
    assert os.listdir(os.path.join(root, "trials")) == []


def test_sigterm_stops_a_search_like_ctrl_c(tmp_path):
    space_file = stoppable_space(tmp_path)
    url, name = f"sqlite:///{tmp_path}/term.db", "term"
    p = search_cli(["--space", str(space_file), "--storage", url, "--study", name, "--trials", "5",
              "--executor", "processes", "--workers", "2"], tmp_path)
    stop_while_training(p, url, name, signal.SIGTERM, min_complete=1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    assert f"hlnas search --resume --storage {url} --study {name}" in err
    ts = stored_trials(url, name)
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    stopped = [t.number for t in ts if t.user_attrs.get("error_kind") == "interrupted"]
    assert stopped and all(ts[n].state == TrialState.FAIL for n in stopped)
    time.sleep(0.5)  # the workers that trained are gone with their driver
    for pid in {t.user_attrs["worker_pid"] for t in ts if t.state == TrialState.COMPLETE}:
        assert pid != p.pid
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_whole_process_group_requeues_running_trials_instead_of_failing_them(tmp_path, sig):
    """Slurm's time limit, ``timeout`` and a terminal's Ctrl-C signal every process of the group, workers too.
    A worker must leave stopping to the driver: on the H200 a worker killed by that SIGTERM was recorded as
    ``worker_died`` and its layout as failed, so a resume skipped it (experiments/paper_grid, trial 20)."""
    space_file = stoppable_space(tmp_path)
    url, name = f"sqlite:///{tmp_path}/group.db", "group"
    p = search_cli(["--space", str(space_file), "--storage", url, "--study", name, "--trials", "5",
              "--executor", "processes", "--workers", "2"], tmp_path, own_group=True)
    stop_while_training(p, url, name, sig, min_complete=1, group=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    ts = stored_trials(url, name)
    kinds = [t.user_attrs.get("error_kind") for t in ts if t.state == TrialState.FAIL]
    assert "worker_died" not in kinds and "interrupted" in kinds, kinds
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    # every interrupted layout waits to run again (once: a duplicate that waited on it shares its queue entry)
    waiting = {tuple(sorted(t.system_attrs["fixed_params"].items())) for t in ts if t.state == TrialState.WAITING}
    stopped = {tuple(sorted(t.params.items())) for t in ts if t.user_attrs.get("error_kind") == "interrupted"}
    assert stopped and stopped <= waiting


def test_a_cuda_fault_replaces_the_worker_that_had_it():
    # an illegal memory access leaves a process's CUDA context unusable: the trial fails as cuda_error and
    # the executor starts a fresh worker instead of feeding it the next trial (seen on the H200)
    from hlnas.search.trial import _classify

    assert _classify(RuntimeError("CUDA error: an illegal memory access was encountered")) == "cuda_error"
    assert _classify(ValueError("bad")) == "other"
    space = tiny_space()
    ex = ProcessExecutor(1)
    try:
        ex.submit(_spec(space, 0, space.grid()[0], None))
        (first,) = ex.wait(timeout=60)
        ex._replace(0)
        ex.submit(_spec(space, 1, space.grid()[1], None))
        (second,) = ex.wait(timeout=60)
        assert first.ok and second.ok and first.metrics["worker_pid"] != second.metrics["worker_pid"]
    finally:
        ex.shutdown()

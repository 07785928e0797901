"""The fault suite: concurrent drivers, interrupted creation, options checked before any write, lost workers,
a journal path that is not a journal, plain postgresql:// URLs. (Crash/kill -9/resume of one driver:
tests/test_resume.py; a Ray node lost mid-trial: test_ray_node_loss below; bad command-line inputs:
tests/test_bad_inputs.py.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from hlnas.search import executors
from hlnas.errors import HlnasError
from hlnas.search.lease import ATTR, DriverLease, StudyBusy, holder_alive
from hlnas.search.storage import StorageError
from hlnas.search.study import MAX_REQUEUES, load_hlnas_study, run_search
from hlnas.search.options import SearchOptions
from hlnas.model.cost import layout_metrics
from hlnas.search.trial import TrialResult, run_trial
from tests.searches import search_cli, stop_while_training, stored_trials, tiny_raw, tiny_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def slow_space(tmp_path, tokens: int = 65536):
    """Trials of several seconds each: time for a second driver to start while the first trains."""
    raw = tiny_raw(mixers=["gla", "hgrn"], sampler="random")
    raw["scale"]["train"]["tokens"] = tokens
    f = tmp_path / "slow.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


def trained(study):
    return [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs]


# -- 1. one driver per study --------------------------------------------------------------------------------------------
def test_a_second_driver_refuses_at_once_while_the_first_lives(tmp_path):
    space_file = slow_space(tmp_path)
    url, name = f"sqlite:///{tmp_path}/two.db", "two"
    first = search_cli(["--space", str(space_file), "--storage", url, "--study", name, "--trials", "3"], tmp_path)
    try:
        stop_while_training(first, url, name, 0, min_complete=1)  # signal 0: only wait for a RUNNING trial
        t0 = time.monotonic()
        second = search_cli(["--resume", "--storage", url, "--study", name], tmp_path)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2, err[-2000:]
        assert f"is being searched by another driver: host {socket.gethostname()}, pid {first.pid}, last heartbeat" in err
        assert time.monotonic() - t0 < 30
        out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err[-3000:]  # the first never saw its live trial failed under it
    finally:
        if first.poll() is None:
            first.kill()
    ts = stored_trials(url, name)
    assert not [t for t in ts if t.user_attrs.get("error_kind") == "interrupted"]
    layouts = [t.user_attrs["layout"] for t in ts if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs]
    assert len(layouts) == 3 == len(set(layouts))
    claim = optuna.load_study(study_name=name, storage=url).user_attrs[ATTR]
    assert claim["pid"] == first.pid and claim["released_at"]  # released on exit: the next driver need not wait


def test_two_drivers_started_together_one_searches_the_other_refuses(tmp_path):
    space_file = slow_space(tmp_path, tokens=16384)
    url, name = f"sqlite:///{tmp_path}/pair.db", "pair"
    p = search_cli(["--space", str(space_file), "--storage", url, "--study", name, "--trials", "1"], tmp_path)
    assert p.wait(timeout=300) == 0
    a, b = (search_cli(["--resume", "--storage", url, "--study", name, "--trials", "3"], tmp_path) for _ in range(2))
    results = [(q.wait(timeout=300), q.communicate()[1]) for q in (a, b)]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], [e[-1500:] for _, e in results]
    assert "is being searched by another driver" in next(e for rc, e in results if rc == 2)
    layouts = [t.user_attrs["layout"] for t in stored_trials(url, name) if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs]
    assert len(layouts) == 3 == len(set(layouts))


def test_a_lease_is_taken_over_only_from_a_driver_that_is_gone(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/l.db", study_name="l")
    now = time.time()
    base = {"token": "x", "started_at": now - 100}
    assert holder_alive({**base, "host": "elsewhere", "pid": 1, "heartbeat_at": now - 5})
    assert not holder_alive({**base, "host": "elsewhere", "pid": 1, "heartbeat_at": now - 120})  # past the grace
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not holder_alive({**base, "host": socket.gethostname(), "pid": dead.pid, "heartbeat_at": now})  # gone at once
    assert not holder_alive({**base, "host": "elsewhere", "pid": 1, "heartbeat_at": now, "released_at": now})
    study.set_user_attr(ATTR, {**base, "host": "elsewhere", "pid": 4242, "heartbeat_at": now})
    with pytest.raises(StudyBusy, match=r"host elsewhere, pid 4242, last heartbeat \d+ s ago"):
        DriverLease(study, settle_s=0).acquire()
    study.set_user_attr(ATTR, {**base, "host": "elsewhere", "pid": 4242, "heartbeat_at": now - 3600})
    lease = DriverLease(study, settle_s=0, beat_s=0.05).acquire()
    try:
        first = study.user_attrs[ATTR]["heartbeat_at"]
        time.sleep(0.3)
        assert study.user_attrs[ATTR]["heartbeat_at"] > first and lease.previous["pid"] == 4242  # it beats
    finally:
        lease.release()


# -- 2. creation is atomic from the user's view --------------------------------------------------------------------------
def test_a_half_created_study_is_replaced_by_a_new_search_and_explained_to_resume(tmp_path):
    url = f"sqlite:///{tmp_path}/h.db"
    optuna.create_study(storage=url, study_name="h", directions=["maximize"])  # killed before any hlnas attribute
    with pytest.raises(HlnasError, match="left half-created by an interrupted start .* start it again without --resume"):
        run_search(None, SearchOptions(storage=url, study_name="h", n_trials=1, resume=True))
    run_search(tiny_space(), SearchOptions(storage=url, study_name="h", n_trials=1))
    assert len(trained(load_hlnas_study(url, "h"))) == 1


def test_a_study_missing_some_attributes_is_repaired_on_resume(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    space = tiny_space()
    study = optuna.create_study(storage=url, study_name="r", directions=[o.direction for o in space.objectives])
    study.set_user_attr("hlnas_space", space.to_dict())  # the first write; the kill came before the rest
    run_search(None, SearchOptions(storage=url, study_name="r", n_trials=1, resume=True))
    attrs = optuna.load_study(study_name="r", storage=url).user_attrs
    assert {"hlnas_space_hash", "hlnas_objectives", "hlnas_kv_context", "hlnas_preset"} <= set(attrs)
    assert attrs["hlnas_space_hash"] == space.fingerprint()


def test_a_stop_signal_during_creation_lands_after_it():
    from hlnas.search.study import _deferred_stop_signals

    got = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append("after"))
    try:
        with _deferred_stop_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            got.append("inside")
        time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert got == ["inside", "after"]


# -- 4. options are checked before any storage write ---------------------------------------------------------------------
@pytest.mark.parametrize(("kw", "message"), [
    ({"workers": 0}, "--workers must be a whole number >= 1, got 0"),
    ({"executor": "inline", "workers": 2}, "--executor inline runs one trial at a time; got --workers 2"),
    ({"cpus_per_trial": 0}, "--cpus-per-trial must be > 0"),
    ({"time_limit": -1}, "--timeout must be a positive number of seconds, got -1"),
    ({"executor": "ray", "address": "127.0.0.1:1"}, r"cannot reach the Ray cluster at --address 127.0.0.1:1: a TCP connection"),
    ({"executor": "processes", "address": "127.0.0.1:1"}, "--address 127.0.0.1:1 joins a Ray cluster, which needs --executor ray"),
])
def test_bad_options_fail_before_the_study_is_created(tmp_path, kw, message):
    url = f"sqlite:///{tmp_path}/o.db"
    t0 = time.monotonic()
    with pytest.raises(HlnasError, match=message):
        run_search(tiny_space(), SearchOptions(storage=url, study_name="o", n_trials=1, **kw))
    assert time.monotonic() - t0 < 15
    assert optuna.get_all_study_summaries(url) == []  # nothing written: the corrected command just works


# -- 5. lost workers are re-queued, within a bound ---------------------------------------------------------------------
def test_a_trial_stopped_before_its_layout_was_chosen_is_failed_not_requeued(tmp_path):
    """A driver killed between ask and the sampler's choice leaves a RUNNING trial without params (seen once in CI);
    the next driver fails it and queues nothing for it, while an orphan with a layout is queued again."""
    from hlnas.search.records import recover

    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    study.ask()  # no params: the process died before suggest
    chosen = study.ask()
    chosen.suggest_categorical("mixer", ["gla", "hgrn"])
    assert recover(study) == 2
    ts = study.get_trials(deepcopy=False)
    assert [t.state for t in ts[:2]] == [TrialState.FAIL, TrialState.FAIL]
    assert all(t.user_attrs["error_kind"] == "interrupted" for t in ts[:2])
    waiting = [t for t in ts if t.state == TrialState.WAITING]
    assert [(t.user_attrs["requeued_from"], t.system_attrs["fixed_params"]) for t in waiting] == [(1, chosen.params)]


def test_a_stop_signal_during_a_trial_interrupts_it_before_its_result_comes(tmp_path):
    """Ctrl-C 0.1 s into a 0.8-second trial: the driver looks at the stop signals every dispatch.POLL_S while it waits
    for results, so it fails the trial as interrupted (re-queued for a resume) instead of waiting out its result. At a
    1-second wait the trial was told complete first and the stop had nothing left to interrupt (a CI run of
    test_resume, 2026-12-06)."""
    from tests.searches import fake_trial

    run, _ = fake_trial({})
    fired = []

    class SlowOne:  # one trial at a time, each finishing 0.8 s after it was submitted
        capacity = 1

        def __init__(self):
            self.running = None

        def submit(self, spec):
            self.running = (spec, time.monotonic() + 0.8)
            if not fired:
                fired.append(threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)))
                fired[0].start()

        def in_flight(self):
            return int(self.running is not None)

        def wait(self, timeout=None):
            spec, done_at = self.running
            if timeout is not None and done_at - time.monotonic() > timeout:
                time.sleep(timeout)
                return []
            time.sleep(max(0.0, done_at - time.monotonic()))
            self.running = None
            return [run(spec)]

        def shutdown(self):
            pass

    url = f"sqlite:///{tmp_path}/i.db"
    with pytest.raises(KeyboardInterrupt):
        run_search(tiny_space(), SearchOptions(
            storage=url, study_name="i", n_trials=3, executor=SlowOne(), skip_calibration=True))
    ts = load_hlnas_study(url, "i").get_trials(deepcopy=False)
    assert [t.state for t in ts if t.state != TrialState.WAITING] == [TrialState.FAIL]
    assert ts[0].user_attrs["error_kind"] == "interrupted"
    assert [t.user_attrs["requeued_from"] for t in ts if "requeued_from" in t.user_attrs] == [0]


def test_a_lost_workers_trial_is_requeued_then_failed_at_the_bound(tmp_path, monkeypatch):
    space = tiny_space()
    victim = str(space.layout(space.grid()[0]))
    deaths = []

    def dies_on_the_victim(spec):
        if spec.layout == victim:
            deaths.append(spec.number)
            return TrialResult(spec.number, "failed", {**layout_metrics(spec.layout, spec.recipe.model, spec.kv_context),
                                                       "status": "failed", "error_kind": "worker_died", "error": "worker died"},
                               "worker_died", "worker died")
        return run_trial(spec)

    monkeypatch.setattr(executors, "run_trial", dies_on_the_victim)
    url = f"sqlite:///{tmp_path}/w.db"
    run_search(space, SearchOptions(storage=url, study_name="w", n_trials=4))
    study = load_hlnas_study(url, "w")
    assert len(deaths) == MAX_REQUEUES + 1  # tried, re-queued twice, then given up
    last = study.trials[deaths[-1]]
    assert last.user_attrs["error_kind"] == "requeue_limit" and "re-queued 2 times, not again" in last.user_attrs["error"]
    assert last.user_attrs["status"] == "failed"
    assert victim not in {t.user_attrs["layout"] for t in trained(study)} and len(trained(study)) == 3

    # the cause fixed, --retry-failed trains it even though the target of 4 could not rise above the space's size
    monkeypatch.setattr(executors, "run_trial", run_trial)
    events = []
    run_search(None, SearchOptions(
        storage=url, study_name="w", n_trials=3, resume=True, retry_failed=True,
        on_event=lambda k, d: events.append((k, d))))
    assert victim in {t.user_attrs["layout"] for t in trained(load_hlnas_study(url, "w"))}
    assert ("target_raised", {"from": 3, "to": 4, "retried": 1}) in events


# -- 3. postgresql:// as the README writes it ------------------------------------------------------------------------------
def test_a_plain_postgresql_url_opens(tmp_path, request):
    url = request.getfixturevalue("pg_url").replace("postgresql+psycopg2://", "postgresql://")
    run_search(tiny_space(), SearchOptions(storage=url, study_name="plainpg", n_trials=1))
    assert len(trained(load_hlnas_study(url, "plainpg"))) == 1


# -- 6. a storage file that is not one is left alone (every other bad input: tests/test_bad_inputs.py) ----------------
def test_a_journal_path_that_is_not_a_journal_is_refused_untouched(tmp_path):
    f = tmp_path / "notes.log"
    f.write_text("my notes\n")
    with pytest.raises(StorageError, match="exists and is not an Optuna journal .* left untouched"):
        run_search(tiny_space(), SearchOptions(storage=f"journal:///{f}", study_name="j", n_trials=1))
    assert f.read_text() == "my notes\n"


# -- 7. Ray beyond one machine: a node lost mid-trial --------------------------------------------------------------------
@pytest.mark.slow
def test_ray_node_loss_requeues_its_trial_and_the_study_reaches_its_budget(tmp_path):
    """A two-node Ray cluster on this machine: the first trial runs on the only worker node, which is removed
    while it trains (a second node having joined); the trial is re-queued and the study reaches its budget."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from hlnas.space import space_from_dict

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    first = cluster.add_node(num_cpus=1)  # the only place the first trial's actor can run
    cluster.wait_for_nodes()
    raw = tiny_raw()
    raw["scale"]["train"]["tokens"] = 262144  # several seconds of training: the node goes while the trial runs
    url, state = f"sqlite:///{tmp_path}/ray.db", {}

    def remove_later():
        time.sleep(3.0)  # the trial was submitted and trains on its actor by now
        try:
            cluster.remove_node(first)
            state["gone_at"] = time.time()
        except Exception as e:  # seen by the assertions below
            state["error"] = repr(e)

    def lose_the_first_node(kind, data):
        if kind == "started" and "removed" not in state:  # emitted just before the trial is submitted
            state["removed"] = data["number"]
            cluster.add_node(num_cpus=1)  # where the replacement worker will run (Ray starts nodes from the main thread)
            state["thread"] = threading.Thread(target=remove_later, daemon=True)
            state["thread"].start()

    try:
        ray.init(address=cluster.address, log_to_driver=False)
        run_search(space_from_dict(raw), SearchOptions(
            storage=url, study_name="ray", n_trials=4, executor="ray", workers=1, address=cluster.address,
            on_event=lose_the_first_node))
    finally:
        ray.shutdown()
        cluster.shutdown()
    study = load_hlnas_study(url, "ray")
    assert len(trained(study)) == 4  # the whole space: the budget was reached on the node that joined
    victim = study.trials[state["removed"]]
    assert "gone_at" in state, state
    assert victim.user_attrs.get("error_kind") == "worker_died", (state, victim.user_attrs.get("started_at"), victim.user_attrs.get("finished_at"))
    (retry,) = [t for t in study.trials if t.user_attrs.get("requeued_from") == victim.number]
    assert retry.state == TrialState.COMPLETE and retry.params == victim.params

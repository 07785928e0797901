"""Executors: inline, and Ray with long-lived actors, trials in parallel, worker death as a failed trial.

One local Ray per module (started by the first search, ~5 s); later tests reuse it; shut down at the end.
"""

from __future__ import annotations

import os

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.errors import ConfigError
from hlnas.search.executors import InlineExecutor, make_executor
from hlnas.search.records import trial_spec as _spec
from hlnas.search.study import load_hlnas_study, run_search
from hlnas.search.options import SearchOptions
from tests.helpers import kill_first_worker_at_next_start
from tests.searches import tiny_space, trained

pytestmark = pytest.mark.usefixtures("one_thread")

ray = pytest.importorskip("ray")
optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module", autouse=True)
def _ray_down_at_the_end():
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_inline_executor_runs_trials_in_this_process():
    space = tiny_space()
    ex = make_executor("inline")
    assert isinstance(ex, InlineExecutor) and ex.capacity == 1
    ex.submit(_spec(space, 7, space.grid()[1], None))
    (r,) = ex.wait()
    assert r.number == 7 and r.ok and r.metrics["layout"] == "GAGA" and r.metrics["worker_pid"] == os.getpid()
    assert ex.wait() == []
    with pytest.raises(ConfigError, match="inline executor runs one trial at a time; got workers=2"):
        make_executor("inline", 2)
    with pytest.raises(ConfigError, match="unknown executor 'slurm'; allowed: inline, processes, ray"):
        make_executor("slurm")


@pytest.mark.slow
def test_a_local_ray_is_the_searchs_own_even_beside_another_cluster(tmp_path):
    """A Ray started by someone else on the machine (``ray start --head``) made ``ray.init(num_cpus=...)`` join it
    and refuse: every ray search failed with 'could not start a local Ray'. The search starts its own instead."""
    import pathlib
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import time

    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable))
    if ray_cli is None:
        pytest.skip("no ray command beside this Python")
    if ray.is_initialized():
        ray.shutdown()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    other = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                              "--include-dashboard=false", "--disable-usage-stats"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not pathlib.Path("/tmp/ray/ray_current_cluster").is_file():  # where ray.init looks for a cluster
            assert time.time() < deadline and other.poll() is None, "the other Ray did not start"
            time.sleep(0.5)
        time.sleep(2)  # its GCS up
        url = f"sqlite:///{tmp_path}/ray.db"
        run_search(tiny_space(), SearchOptions(storage=url, study_name="ray", n_trials=2, executor="ray", workers=2))
        assert ray.cluster_resources()["CPU"] == 2  # its own size, not the other cluster's one CPU
        assert len(trained(load_hlnas_study(url, "ray"))) == 2
    finally:
        ray.shutdown()
        os.killpg(other.pid, signal.SIGTERM)
        other.wait(timeout=60)


def test_search_on_two_ray_workers_overlaps_trials_on_long_lived_actors(tmp_path):
    was_up = ray.is_initialized()
    url = f"sqlite:///{tmp_path}/ray.db"
    run_search(tiny_space(), SearchOptions(storage=url, study_name="ray", n_trials=4, executor="ray", workers=2))
    if not was_up:  # the search started one local Ray, sized for its workers
        assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2
    done = trained(load_hlnas_study(url, "ray"))
    assert len(done) == 4 and len({t.user_attrs["layout"] for t in done}) == 4
    pids = [t.user_attrs["worker_pid"] for t in done]
    # two actors served all four trials (long-lived: imports paid once), none ran in the driver
    assert len(set(pids)) == 2 and os.getpid() not in pids
    spans = sorted((t.user_attrs["started_at"], t.user_attrs["finished_at"]) for t in done)
    overlap = any(a[1] > b[0] for a, b in zip(spans, spans[1:]))
    assert overlap, f"no two trials ran at the same time: {spans}"


def test_a_killed_ray_worker_fails_its_trial_and_the_study_goes_on(tmp_path):
    url, seen = f"sqlite:///{tmp_path}/die.db", {}
    run_search(tiny_space(), SearchOptions(
        storage=url, study_name="die", n_trials=4, executor="ray", workers=1,
        on_event=kill_first_worker_at_next_start(seen)))
    study = load_hlnas_study(url, "die")
    victim = study.trials[seen["killed"]]
    assert victim.state == TrialState.FAIL
    a = victim.user_attrs
    assert (a["status"], a["error_kind"]) == ("failed", "worker_died") and "worker died while running trial" in a["error"]
    done = trained(study)
    assert len(done) == 4  # on a replacement worker, the victim's layout re-queued among them
    (retry,) = [t for t in study.trials if t.user_attrs.get("requeued_from") == victim.number]
    assert retry.state == TrialState.COMPLETE
    assert {t.user_attrs["worker_pid"] for t in done if t.number > victim.number} - {seen["pid"]}

"""Where trials run: ``inline`` (this process; tests and quick CPU searches), ``processes`` (long-lived
local worker processes: several small candidates share one machine's GPUs without a cluster) or ``ray``.

Ray is only a transport: the driver keeps the Optuna study (ask/tell); workers receive a
:class:`~hlnas.search.trial.TrialSpec` and return a :class:`~hlnas.search.trial.TrialResult`. Ray workers are
long-lived actors, so imports (importing fla takes about 17 s on a GPU machine) and Triton compiles are paid once per
worker, and every worker of a machine shares one Triton cache directory.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait as wait_any
from typing import Protocol

from hlnas.errors import ConfigError, HlnasError
from hlnas.search.trial import TrialResult, TrialSpec, run_trial

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "RayExecutor", "make_executor", "executor_from_options",
           "EXECUTORS"]

EXECUTORS = ("inline", "processes", "ray")


class Executor(Protocol):
    capacity: int  # trials that may run at once

    def submit(self, spec: TrialSpec) -> None: ...

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        """Block until at least one submitted trial finishes (or timeout); return those finished."""

    def in_flight(self) -> int: ...

    def shutdown(self) -> None: ...


class InlineExecutor:
    """Runs each trial in the calling process when submitted: with :func:`~hlnas.search.trial.run_trial`, or ``run``
    (any ``TrialSpec -> TrialResult``, e.g. a fast stand-in for training in tests)."""

    capacity = 1

    def __init__(self, run: Callable[[TrialSpec], TrialResult] | None = None) -> None:
        self._run = run
        self._done: deque[TrialResult] = deque()

    def submit(self, spec: TrialSpec) -> None:
        # run_trial looked up at call time: tests patch hlnas.search.executors.run_trial
        self._done.append((self._run or run_trial)(spec))

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        out = list(self._done)
        self._done.clear()
        return out

    def in_flight(self) -> int:
        return len(self._done)

    def shutdown(self) -> None:
        pass


class ProcessExecutor:
    """Trials on long-lived local worker processes (spawned, so CUDA is never forked).

    For one machine without a Ray cluster (e.g. a GPU box whose image lacks ray): small proxy
    candidates leave a GPU mostly idle, so ``workers`` of them share it. Each worker imports torch/fla
    and compiles Triton kernels once and reuses them for every trial it runs; all share one Triton
    cache directory. With several GPUs, worker ``i`` sees GPU ``i % n_gpus`` only. A worker that dies
    (segfault, OOM-kill) is reported as ``worker_died`` and replaced; the study goes on. Workers ignore
    SIGINT and SIGTERM: the driver stops them once it has re-queued their trials.
A trial whose CUDA context broke (a sticky CUDA error) leaves its worker unusable: the worker is replaced.
    """

    def __init__(self, workers: int, *, threads: int = 1, triton_cache: str | None = None, gpus: int | None = None):
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.capacity = workers
        self._ctx = mp.get_context("spawn")
        self._threads = max(1, int(threads))
        self._cache = triton_cache or os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")
        self._gpus = _visible_gpus() if gpus is None else gpus
        self._slots = [self._start(i) for i in range(workers)]
        self._busy: dict[int, dict[int, TrialSpec]] = {}  # slot index -> {trial number: spec} it runs

    def _start(self, i: int):
        env = {"TRITON_CACHE_DIR": self._cache, "PYTHONUNBUFFERED": "1"}
        if self._gpus > 1:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = visible.split(",") if visible else [str(g) for g in range(self._gpus)]
            env["CUDA_VISIBLE_DEVICES"] = ids[i % len(ids)]
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_serve, args=(child, env, self._threads),
                                 name=f"hlnas-worker-{i}", daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def submit(self, spec: TrialSpec) -> None:
        load = {i: len(self._busy.get(i, {})) for i in range(len(self._slots))}
        free = [i for i in load if not load[i]]
        if not free:
            raise HlnasError("no idle worker process; wait() for a result before submitting more")
        i = free[0]
        try:
            self._slots[i][1].send(spec)
        except (OSError, EOFError):  # a broken pipe: the worker died; if it held nothing, a fresh one takes the trial
            if load[i]:
                raise HlnasError(f"worker {i} died while running trials; wait() reports them before submitting more") from None
            self._replace(i)
            self._slots[i][1].send(spec)
        self._busy.setdefault(i, {})[spec.number] = spec

    def in_flight(self) -> int:
        return sum(len(v) for v in self._busy.values())

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        if not self.in_flight():
            return []
        watch = {}
        for i, held in self._busy.items():
            if held:
                proc, conn = self._slots[i]
                watch[conn] = i
                watch[proc.sentinel] = i
        ready = {watch[r] for r in wait_any(list(watch), timeout)}
        out = []
        for i in sorted(ready):
            proc, conn = self._slots[i]
            held = self._busy[i]
            results, dead = [], False
            try:
                while held and conn.poll():
                    results.append(conn.recv())
                    held.pop(results[-1].number, None)
            except (EOFError, OSError):
                dead = True
            if not results and not dead:  # woken by the sentinel: the process is ending without answering (its pipes
                proc.join(timeout=5)      # close before it can be reaped, so is_alive() may still say yes for a moment)
                dead = not proc.is_alive()
            poisoned = any(r.error_kind == "cuda_error" for r in results)
            out += results
            if dead or poisoned:  # every trial still held dies with the process
                if dead:  # its pipe can close before the process is reaped: wait for the exit code the message names
                    proc.join(timeout=5)
                why = f"(exit code {proc.exitcode})" if dead else "(a CUDA fault poisoned the process)"
                out += [_worker_died(spec, f"worker died while running trial {spec.number} {why}") for spec in held.values()]
                held.clear()
                self._replace(i)
            if not held:
                del self._busy[i]
        return out

    def _replace(self, i: int) -> None:
        proc, conn = self._slots[i]
        proc.kill()  # dead already, or poisoned by a CUDA fault (workers ignore SIGTERM)
        proc.join(timeout=10)
        conn.close()
        self._slots[i] = self._start(i)

    def shutdown(self) -> None:
        # idle workers are told to stop; busy ones (an interrupted search, whose trials are already
        # re-queued) are terminated rather than waited for
        for i, (proc, conn) in enumerate(self._slots):
            try:
                if self._busy.get(i):
                    proc.kill()  # workers ignore SIGTERM
                else:
                    conn.send(None)
            except (OSError, ValueError):
                pass
        for proc, conn in self._slots:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
            conn.close()
        self._slots, self._busy = [], {}


def _serve(conn, env: dict, threads: int) -> None:
    """A worker process: set its environment, import once, then run trials one at a time until told to stop."""
    os.environ.update(env)
    # Stopping is the driver's job: it re-queues the running trials, then ends the workers. A Ctrl-C, or a
    # SIGTERM sent to the whole process group (Slurm's time limit, `timeout`), reaches the workers too; a
    # worker that died of it would be recorded as a failed layout instead of an interrupted trial.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    import torch

    torch.set_num_threads(threads)
    while True:
        try:
            spec = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            return
        if spec is None:  # the driver sends None only to idle workers
            return
        conn.send(run_trial(spec))


def _die_with_parent() -> None:
    """Linux: a worker is killed with its driver (a ``kill -9`` of the search leaves no orphans on the GPU)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _worker_died(spec: TrialSpec, msg: str) -> TrialResult:
    """The result of a trial whose worker process ended under it (either executor)."""
    return TrialResult(spec.number, "failed", {"status": "failed", "error_kind": "worker_died", "error": msg}, "worker_died", msg)


class RayExecutor:
    """Trials on long-lived Ray actors; starts a local Ray unless ``address`` joins a cluster."""

    def __init__(self, workers: int, *, address: str | None = None, cpus_per_trial: float = 1.0,
                 gpus_per_trial: float = 0.0, triton_cache: str | None = None):
        try:
            import ray
        except ImportError as e:  # pragma: no cover - ray is a declared dependency
            raise HlnasError("the 'ray' executor needs ray[tune]; install it or use --executor inline") from e
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self._ray = ray
        if not ray.is_initialized():
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local clusters: no token file prompts
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    # "local": a Ray of this search's own size, even when another cluster runs on the machine (with
                    # no address, ray.init joins that one and refuses num_cpus: found with a stray `ray start --head`)
                    ray.init(address="local", num_cpus=max(1, int(workers * cpus_per_trial)),
                             num_gpus=_local_gpus(gpus_per_trial, workers), include_dashboard=False, log_to_driver=False)
            except Exception as e:
                raise HlnasError(f"could not {'join the Ray cluster at ' + address if address else 'start a local Ray'}: {e}") from e
        env = {"TRITON_CACHE_DIR": triton_cache or os.path.expanduser("~/.triton/cache"), "PYTHONUNBUFFERED": "1"}
        self._actor_cls = ray.remote(num_cpus=cpus_per_trial, num_gpus=gpus_per_trial,
                                     runtime_env={"env_vars": env})(_Worker)
        self.capacity = workers
        self._threads = max(1, int(cpus_per_trial))
        self._idle = [self._actor_cls.remote(self._threads) for _ in range(workers)]
        self._running: dict = {}  # object ref -> (actor, spec)

    def submit(self, spec: TrialSpec) -> None:
        if not self._idle:
            raise HlnasError("no idle Ray worker; wait() for a result before submitting more")
        actor = self._idle.pop()
        self._running[actor.run.remote(spec)] = (actor, spec)

    def in_flight(self) -> int:
        return len(self._running)

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        if not self._running:
            return []
        ready, _ = self._ray.wait(list(self._running), num_returns=1, timeout=timeout)
        if ready:  # collect everything else that is already done too
            more, _ = self._ray.wait([r for r in self._running if r not in ready], num_returns=len(self._running) - len(ready), timeout=0)
            ready = list(ready) + list(more)
        out = []
        for ref in ready:
            actor, spec = self._running.pop(ref)
            try:
                result = self._ray.get(ref)
                out.append(result)
                if result.error_kind == "cuda_error":  # the actor's CUDA context is poisoned: replace it
                    self._ray.kill(actor, no_restart=True)
                    actor = self._actor_cls.remote(self._threads)
                self._idle.append(actor)
            except Exception as e:  # the worker died (killed, OOM-killed, segfault): record it, replace it
                out.append(_worker_died(spec, f"worker died while running trial {spec.number}: {type(e).__name__}: {str(e)[:500]}"))
                self._ray.kill(actor, no_restart=True)
                self._idle.append(self._actor_cls.remote(self._threads))
        return out

    def shutdown(self) -> None:
        for actor in self._idle + [a for a, _ in self._running.values()]:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._idle, self._running = [], {}


class _Worker:
    """A Ray actor: imports once, then runs trials one after another."""

    def __init__(self, threads: int = 1) -> None:
        import torch  # pay the import once, here

        # one trial per reserved CPU: more torch threads than cores makes 2-core machines crawl
        torch.set_num_threads(max(1, threads))
        self.started = time.time()

    def run(self, spec: TrialSpec) -> TrialResult:
        return run_trial(spec)


def _local_gpus(gpus_per_trial: float, workers: int) -> int | None:
    return _visible_gpus() if gpus_per_trial > 0 else 0


def make_executor(kind: str, workers: int = 1, **kwargs) -> Executor:
    if kind == "inline":
        if workers != 1:
            raise ConfigError(f"the inline executor runs one trial at a time; got workers={workers} (use --executor processes or ray)")
        return InlineExecutor()
    if kind == "processes":
        return ProcessExecutor(workers, threads=int(kwargs.get("cpus_per_trial", 1.0)))
    if kind == "ray":
        return RayExecutor(workers, **kwargs)
    raise ConfigError(f"unknown executor '{kind}'; allowed: {', '.join(EXECUTORS)}")


def executor_from_options(executor, workers: int, *, address, cpus_per_trial: float, gpus_per_trial):
    """The executor named by :func:`hlnas.search.study.run_search`'s options (an :class:`Executor` object is used as given)."""
    if not isinstance(executor, str):
        return executor
    kwargs = {}
    if executor == "ray":
        # one GPU per trial when the driver sees CUDA, unless told otherwise
        gpus = gpus_per_trial if gpus_per_trial is not None else (1.0 if _cuda_available() else 0.0)
        kwargs = {"address": address, "cpus_per_trial": cpus_per_trial, "gpus_per_trial": gpus}
    elif executor == "processes":
        kwargs = {"cpus_per_trial": cpus_per_trial}
    return make_executor(executor, workers, **kwargs)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()

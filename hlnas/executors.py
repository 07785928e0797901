"""Where trials run: ``inline`` (this process; tests and quick CPU searches) or ``ray``.

Ray is only a transport: the driver keeps the Optuna study (ask/tell); workers receive a
:class:`~hlnas.trial.TrialSpec` and return a :class:`~hlnas.trial.TrialResult`. Ray workers are
long-lived actors, so imports (fla takes ~17 s on the H200) and Triton compiles are paid once per
worker, and every worker of a machine shares one Triton cache directory.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Protocol

from hlnas.errors import ConfigError, HlnasError
from hlnas.trial import TrialResult, TrialSpec, run_trial

__all__ = ["Executor", "InlineExecutor", "RayExecutor", "make_executor", "EXECUTORS"]

EXECUTORS = ("inline", "ray")


class Executor(Protocol):
    capacity: int  # trials that may run at once

    def submit(self, spec: TrialSpec) -> None: ...

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        """Block until at least one submitted trial finishes (or timeout); return those finished."""

    def in_flight(self) -> int: ...

    def shutdown(self) -> None: ...


class InlineExecutor:
    """Runs each trial in the calling process when submitted."""

    capacity = 1

    def __init__(self) -> None:
        self._done: deque[TrialResult] = deque()

    def submit(self, spec: TrialSpec) -> None:
        self._done.append(run_trial(spec))

    def wait(self, timeout: float | None = None) -> list[TrialResult]:
        out = list(self._done)
        self._done.clear()
        return out

    def in_flight(self) -> int:
        return len(self._done)

    def shutdown(self) -> None:
        pass


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
                    ray.init(num_cpus=max(1, int(workers * cpus_per_trial)), num_gpus=_local_gpus(gpus_per_trial, workers),
                             include_dashboard=False, log_to_driver=False)
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
                out.append(self._ray.get(ref))
                self._idle.append(actor)
            except Exception as e:  # the worker died (killed, OOM-killed, segfault): record it, replace it
                msg = f"worker died while running trial {spec.number}: {type(e).__name__}: {str(e)[:500]}"
                out.append(TrialResult(spec.number, "failed", {"status": "failed", "error_kind": "worker_died", "error": msg},
                                       "worker_died", msg))
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
    if gpus_per_trial <= 0:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def make_executor(kind: str, workers: int = 1, **kwargs) -> Executor:
    if kind == "inline":
        if workers != 1:
            raise ConfigError(f"the inline executor runs one trial at a time; got workers={workers} (use --executor ray)")
        return InlineExecutor()
    if kind == "ray":
        return RayExecutor(workers, **kwargs)
    raise ConfigError(f"unknown executor '{kind}'; allowed: {', '.join(EXECUTORS)}")

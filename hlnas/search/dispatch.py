"""Trials in flight on an executor, for every driver loop (the search's and the calibration's): the stop signals
(Ctrl-C, SIGTERM) checked between storage writes, and :class:`Dispatch`, which submits under their guard and hands
back each result with what it was submitted for.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

from hlnas.search.trial import TrialResult, TrialSpec

__all__ = ["StopSignals", "Dispatch", "POLL_S"]


class StopSignals:
    """Ctrl-C and SIGTERM while a driver holds a study (``with StopSignals(inline) as stops:``, main thread only).

    They only set a flag, checked between storage writes (:meth:`check`): a KeyboardInterrupt raised in the
    middle of a write can leave SQLite locked, and then the interrupted trials could not be re-queued. While
    an inline trial runs in this process (:meth:`submitting`; no storage writes then) they raise at once, so
    a stop during scoring does not wait for it to finish (the trainer installs its own checkpointing handler).
    """

    def __init__(self, inline: bool):
        self.inline = inline
        self.got: list[int] = []
        self._raise = False
        self._old: dict = {}

    def install(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def __enter__(self) -> "StopSignals":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        self.got.append(signum)
        if self._raise:
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if a stop signal came since the driver started."""
        if self.got:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def submitting(self):
        """Around ``executor.submit``: a signal since the last check stops before the trial starts, and one
        during an inline trial raises at once."""
        self._raise = self.inline
        try:
            self.check()
            yield
        finally:
            self._raise = False


#: how long a driver waits for results before it looks at the stop signals again: a Ctrl-C during a trial is seen
#: within this, before a trial that is about to finish is told complete (at 1 s, a 1-second trial signalled 0.25 s in
#: was often told complete first, and the stop then had nothing left to interrupt)
POLL_S = 0.2


class Dispatch:
    """What runs on ``executor`` now: ``pending`` maps a submitted spec's number to what the caller submitted it for
    (a trial and its layout, a calibration run)."""

    def __init__(self, executor, stops: StopSignals):
        self.ex, self.stops = executor, stops
        self.pending: dict[int, object] = {}

    def free(self) -> bool:
        """A worker is free for another spec."""
        return len(self.pending) < self.ex.capacity

    def submit(self, spec: TrialSpec, what, announce: Callable[[], None] | None = None) -> None:
        """Record ``spec`` as pending for ``what``, ``announce()`` it (before: an inline executor runs the trial inside
        ``submit``), and submit it; a stop signal now leaves it pending, so the caller's interrupt handling sees it."""
        self.pending[spec.number] = what
        if announce is not None:
            announce()
        with self.stops.submitting():
            self.ex.submit(spec)

    def finished(self, timeout: float = POLL_S) -> Iterator[tuple[object, TrialResult]]:
        """``(what, result)`` for each spec that finished within ``timeout`` seconds; a trial the trainer stopped on
        Ctrl-C/SIGTERM (inline: ``interrupted``) stops the driver."""
        for result in self.ex.wait(timeout=timeout):
            if result.status == "interrupted":
                raise KeyboardInterrupt
            yield self.pending.pop(result.number), result

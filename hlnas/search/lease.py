"""One driver per study at a time: a heartbeat stored with the study.

A search driver asks and tells trials; two at once on one study failed each other's live trials as
"interrupted", trained layouts twice and crashed with ``UpdateFinishedTrialError``. So a driver takes the
study's lease before it touches a trial: study attr ``hlnas_driver`` = ``{host, pid, token, started_at,
heartbeat_at}``, renewed every ``beat_s`` seconds by a background thread. A second driver refuses at once
(:class:`StudyBusy`, naming the live driver's host, pid and last heartbeat) while that heartbeat is younger
than ``grace_s``; a driver that died stops beating, and after ``grace_s`` (at once, when it ran on this
host and its pid is gone) the next driver takes over and re-queues what it left running.

Two drivers starting within the same moment both write their claim; each waits ``settle_s``, reads the
claim back, and only the one whose claim survived goes on (the storage keeps the last write).

To use several GPU machines on one study, run one driver with Ray (``--address`` of a cluster spanning
them), not one driver per machine.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

from hlnas.errors import HlnasError

__all__ = ["StudyBusy", "DriverLease", "ATTR", "GRACE_S", "BEAT_S"]

ATTR = "hlnas_driver"
BEAT_S = 10.0  # heartbeat period
GRACE_S = 60.0  # a heartbeat older than this means the driver is gone
SETTLE_S = 0.5  # wait before reading a fresh claim back


class StudyBusy(HlnasError):
    """Another live driver holds the study."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def holder_alive(claim: dict | None, *, grace_s: float = GRACE_S, now: float | None = None) -> bool:
    """Whether ``claim`` (a stored ``hlnas_driver``) belongs to a driver that still runs."""
    if not claim or claim.get("released_at"):
        return False
    now = time.time() if now is None else now
    if now - float(claim.get("heartbeat_at", 0)) > grace_s:
        return False
    if claim.get("host") == socket.gethostname():  # on this host we can ask the OS instead of waiting out the grace
        return _pid_alive(int(claim.get("pid", -1)))
    return True


def describe(claim: dict, now: float | None = None) -> str:
    now = time.time() if now is None else now
    return (f"host {claim.get('host')}, pid {claim.get('pid')}, last heartbeat {now - float(claim.get('heartbeat_at', 0)):.0f} s ago "
            f"(started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(float(claim.get('started_at', 0))))})")


class DriverLease:
    """Holds ``study``'s lease while a search drives it (``with DriverLease(study): ...``)."""

    def __init__(self, study, *, grace_s: float = GRACE_S, beat_s: float = BEAT_S, settle_s: float = SETTLE_S):
        self.study, self.grace_s, self.beat_s, self.settle_s = study, grace_s, beat_s, settle_s
        self.token = uuid.uuid4().hex
        self.claim = {"host": socket.gethostname(), "pid": os.getpid(), "token": self.token, "started_at": time.time()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.previous: dict | None = None  # the claim found, when a dead driver's was taken over

    def _stored(self) -> dict | None:
        return self.study.user_attrs.get(ATTR)

    def _write(self, **extra) -> None:
        self.study.set_user_attr(ATTR, {**self.claim, "heartbeat_at": time.time(), **extra})

    def acquire(self) -> "DriverLease":
        found = self._stored()
        if holder_alive(found, grace_s=self.grace_s):
            raise StudyBusy(self._busy_message(found))
        self.previous = found if found and not found.get("released_at") else None
        self._write()
        if self.settle_s:
            time.sleep(self.settle_s)
            now = self._stored()
            if not now or now.get("token") != self.token:  # another driver claimed it in the same moment
                raise StudyBusy(self._busy_message(now or {}))
        self._thread = threading.Thread(target=self._beat, name="hlnas-driver-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _busy_message(self, claim: dict) -> str:
        name = self.study.study_name
        return (f"study '{name}' is being searched by another driver: {describe(claim)}. One study has one driver at a "
                f"time: wait for it to finish or stop it (a driver that died is taken over {self.grace_s:.0f} s after its "
                "last heartbeat, at once on its own host); to use more machines, give that driver more workers "
                "(--workers, --address of a Ray cluster)")

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                self._write()
            except Exception:  # a storage hiccup: the next beat tries again (the grace covers several)
                pass

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            if (self._stored() or {}).get("token") == self.token:
                self._write(released_at=time.time())
        except Exception:
            pass  # a release that cannot be written expires with the heartbeat

    def __enter__(self) -> "DriverLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

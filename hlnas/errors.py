"""The hlnas error hierarchy.

Every error a user can cause derives from :class:`HlnasError` and says what was wrong,
where, what is allowed, and (where there is one) how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
from collections.abc import Iterable, Mapping

__all__ = [
    "HlnasError",
    "ConfigError",
    "LayoutError",
    "UnknownMixerError",
    "KernelUnavailable",
    "DataSourceError",
    "DiskFull",
    "no_room",
    "did_you_mean",
    "check_fields",
]


class HlnasError(Exception):
    """Base class of every error hlnas raises on bad input or an unusable environment."""


class ConfigError(HlnasError, ValueError):
    """A configuration value is out of its allowed range."""


class LayoutError(HlnasError, ValueError):
    """A hybrid layout cannot be built from the given description."""


class UnknownMixerError(HlnasError, ValueError):
    """A mixer name is not in the registry."""


class KernelUnavailable(HlnasError, RuntimeError):
    """A kernel backend was asked for explicitly but cannot run here."""

    def __init__(self, op: str, backend: str, reason: str):
        self.op, self.backend, self.reason = op, backend, reason
        super().__init__(f"kernel '{op}' cannot use backend '{backend}': {reason}")


#: what a write that found no room fails with: the disk full, the user's quota spent, a file-size limit reached
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_room(e: BaseException) -> OSError | None:
    """The OSError in ``e``'s chain (``e``, its causes and contexts) that says a write found no room, or None.
    torch.save reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc] unexpected pos``; the
    OSError that caused it is only in the chain."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in NO_ROOM:
            return e
        e = e.__cause__ or e.__context__
    return None


class DiskFull(HlnasError):
    """A file could not be written for lack of room; the message names the file, the free space and what to do."""

    _WHY = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is spent",
            errno.EFBIG: "the file-size limit (ulimit -f) is reached"}

    def __init__(self, path, cause: OSError | None = None):
        import os
        import shutil

        self.path = str(path)
        try:
            free = f"{shutil.disk_usage(os.path.dirname(os.path.abspath(self.path))).free:,} bytes free there"
        except OSError:
            free = "free space unknown"
        why = self._WHY.get(getattr(cause, "errno", None), "the disk is full")
        super().__init__(f"{why}: cannot write {self.path} ({free}); free space on that disk or write elsewhere")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' Did you mean: x?' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return f" Did you mean: {close[0]}?" if close else ""


def check_fields(kind: str, data: Mapping, cls: type) -> None:
    """Reject keys of ``data`` that are not fields of dataclass ``cls``, naming the allowed ones."""
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError(f"unknown {kind} key '{key}'.{did_you_mean(key, names)} Allowed: {', '.join(sorted(names))}")


class DataSourceError(HlnasError, ValueError):
    """A data source cannot be read: missing path, unknown format, missing text field, unreachable dataset."""

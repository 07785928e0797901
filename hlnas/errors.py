"""The hlnas error hierarchy.

Every error a user can cause derives from :class:`HlnasError` and says what was wrong,
where, what is allowed, and (where there is one) how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping

__all__ = [
    "HlnasError",
    "ConfigError",
    "LayoutError",
    "UnknownMixerError",
    "KernelUnavailable",
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

"""A name -> class registry whose entries may be lazy ``"module:attr"`` strings.

Lazy entries keep ``hlnas --help`` and ``hlnas layout`` free of heavy imports (fla, triton).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from hlnas.errors import HlnasError, did_you_mean

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Generic[T]):
    def __init__(self, kind: str, error: type[HlnasError] = HlnasError):
        self.kind = kind
        self._error = error
        self._entries: dict[str, T | str] = {}

    def add(self, name: str, target: T | str) -> None:
        if name in self._entries and self._entries[name] != target:
            raise HlnasError(
                f"{self.kind} '{name}' is registered twice: {self._entries[name]!r} and {target!r}"
            )
        self._entries[name] = target

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            # A decorator on the class the lazy string points at resolves to the same object.
            current = self._entries.get(name)
            if isinstance(current, str):
                self._entries[name] = obj
            else:
                self.add(name, obj)
            return obj

        return deco

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise self._error(
                f"unknown {self.kind} '{name}'.{did_you_mean(name, self._entries)} "
                f"Available: {', '.join(self.names())}"
            )
        target = self._entries[name]
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
            self._entries[name] = target
        return target  # type: ignore[return-value]

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

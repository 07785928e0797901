"""The catalog of token mixers: short name, one-letter layout code, and where the class lives.

Pure data, no torch: layouts, search spaces and ``hlnas --help`` use it without importing a model.
Adding a mixer is one file in ``hlnas/model/mixers/`` plus one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlnas.errors import UnknownMixerError
from hlnas.model.registry import Registry

__all__ = ["MixerEntry", "MIXERS", "ATTENTION", "PAPER_MIXERS", "mixer_entry", "mixer_for_code", "canonical", "ALIASES"]


@dataclass(frozen=True, slots=True)
class MixerEntry:
    name: str
    code: str  # one character in the compact layout string
    target: str  # "module:Class", imported on first use
    is_attention: bool  # grows a KV cache with context (True) or holds a fixed state (False)
    title: str  # how papers write it


ATTENTION = "attention"

_ENTRIES = [
    MixerEntry(ATTENTION, "A", "hlnas.model.mixers.attention:Attention", True, "Attention"),
    MixerEntry("hgrn", "H", "hlnas.model.mixers.hgrn:HGRN", False, "HGRN"),
    MixerEntry("hgrn2", "N", "hlnas.model.mixers.hgrn2:HGRN2", False, "HGRN-2"),
    MixerEntry("retnet", "R", "hlnas.model.mixers.retnet:RetNet", False, "RetNet"),
    MixerEntry("gla", "G", "hlnas.model.mixers.gla:GLA", False, "GLA"),
    MixerEntry("deltanet", "D", "hlnas.model.mixers.deltanet:DeltaNet", False, "DeltaNet"),
    MixerEntry("gated_deltanet", "Z", "hlnas.model.mixers.gated_deltanet:GatedDeltaNet", False, "GatedDeltaNet"),
    MixerEntry("mamba2", "M", "hlnas.model.mixers.mamba2:Mamba2", False, "Mamba-2"),
]

#: The six linear mixers of the paper's grid (arXiv 2507.06457), in its order.
PAPER_MIXERS = ("hgrn", "retnet", "gla", "hgrn2", "deltanet", "gated_deltanet")

_BY_NAME = {e.name: e for e in _ENTRIES}
_BY_CODE = {e.code: e for e in _ENTRIES}
assert len(_BY_CODE) == len(_ENTRIES), "layout codes must be unique"

#: name -> mixer class, imported lazily.
MIXERS: Registry = Registry("mixer", UnknownMixerError)
for _e in _ENTRIES:
    MIXERS.add(_e.name, _e.target)


#: Short spellings people use; layouts always store the canonical name.
ALIASES = {"gdn": "gated_deltanet", "gated_delta_net": "gated_deltanet", "delta_net": "deltanet", "hgrn-2": "hgrn2", "mamba-2": "mamba2"}


def canonical(name: str) -> str:
    return ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else name


def mixer_entry(name: str) -> MixerEntry:
    if name not in _BY_NAME:
        MIXERS.get(name)  # raises UnknownMixerError with did-you-mean and the list
    return _BY_NAME[name]


def mixer_for_code(code: str) -> MixerEntry:
    if code not in _BY_CODE:
        allowed = ", ".join(f"{e.code}={e.name}" for e in _ENTRIES)
        raise UnknownMixerError(f"unknown layout code '{code}'; allowed: {allowed}")
    return _BY_CODE[code]


def linear_mixer_names() -> list[str]:
    return [e.name for e in _ENTRIES if not e.is_attention]


def code_table() -> str:
    return ", ".join(f"{e.code}={e.name}" for e in _ENTRIES)

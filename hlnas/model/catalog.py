"""The catalog of token mixers: short name, one-letter layout code, and where the class lives.

Pure data, no torch: layouts, search spaces and ``hlnas --help`` use it without importing a model.
Adding a mixer is one file in ``hlnas/model/mixers/`` plus one line here.

Layer names: a mixer's name (``"gla"``), or for a windowed kind its name and window in tokens (``"swa:1024"``: softmax
attention over the last 1024 tokens). In the layout string a windowed layer is its code followed by the window
(``S1024``); every other layer is its one letter.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlnas.errors import UnknownMixerError
from hlnas.model.registry import Registry

__all__ = ["MixerEntry", "MIXERS", "ATTENTION", "SWA", "PAPER_MIXERS", "mixer_entry", "mixer_for_code", "canonical", "ALIASES",
           "split_layer", "layer_token", "linear_mixer_names", "code_table", "is_window_name"]


@dataclass(frozen=True, slots=True)
class MixerEntry:
    name: str
    code: str  # one character in the compact layout string
    target: str  # "module:Class", imported on first use
    is_attention: bool  # grows a KV cache with context (True) or holds a bounded state (False)
    title: str  # how papers write it
    holds_kv: bool = False  # keeps keys and values (softmax attention, full or windowed): its cache is KV cache
    windowed: bool = False  # its layer names carry a window: "swa:1024" (the code then takes the window: S1024)


ATTENTION = "attention"
SWA = "swa"  # sliding-window attention, a layer kind: "swa:W" keeps the last W tokens' keys and values

_ENTRIES = [
    MixerEntry(ATTENTION, "A", "hlnas.model.mixers.attention:Attention", True, "Attention", holds_kv=True),
    MixerEntry(SWA, "S", "hlnas.model.mixers.attention:SlidingWindowAttention", False, "SWA", holds_kv=True, windowed=True),
    MixerEntry("hgrn", "H", "hlnas.model.mixers.hgrn:HGRN", False, "HGRN"),
    MixerEntry("hgrn2", "N", "hlnas.model.mixers.hgrn2:HGRN2", False, "HGRN-2"),
    MixerEntry("retnet", "R", "hlnas.model.mixers.retnet:RetNet", False, "RetNet"),
    MixerEntry("gla", "G", "hlnas.model.mixers.gla:GLA", False, "GLA"),
    MixerEntry("deltanet", "D", "hlnas.model.mixers.deltanet:DeltaNet", False, "DeltaNet"),
    MixerEntry("gated_deltanet", "Z", "hlnas.model.mixers.gated_deltanet:GatedDeltaNet", False, "GatedDeltaNet"),
    MixerEntry("mamba2", "M", "hlnas.model.mixers.mamba2:Mamba2", False, "Mamba-2"),
    MixerEntry("kda", "K", "hlnas.model.mixers.kda:KDA", False, "KDA"),
    MixerEntry("rwkv7", "W", "hlnas.model.mixers.rwkv7:RWKV7", False, "RWKV-7"),
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
ALIASES = {"gdn": "gated_deltanet", "gated_delta_net": "gated_deltanet", "delta_net": "deltanet", "hgrn-2": "hgrn2", "mamba-2": "mamba2",
           "kimi_delta_attention": "kda", "rwkv-7": "rwkv7"}


def canonical(name: str) -> str:
    return ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else name


def split_layer(name: str) -> tuple[str, int | None]:
    """A layer name -> (mixer name, window or None): ``"swa:1024"`` -> ``("swa", 1024)``, ``"gla"`` -> ``("gla", None)``.
    A windowed kind without a window, or a window on any other mixer, is an :class:`UnknownMixerError` saying the form."""
    base, sep, arg = name.partition(":")
    entry = _BY_NAME.get(base)
    if entry is None:
        MIXERS.get(base)  # raises UnknownMixerError with did-you-mean and the list
    if entry.windowed:
        if not sep or not arg.isdigit() or int(arg) < 1:
            raise UnknownMixerError(f"'{name}': {base} needs a window in tokens, written {base}:W with an integer "
                                    f"W >= 1 (e.g. {base}:1024)")
        return base, int(arg)
    if sep:
        raise UnknownMixerError(f"'{name}': only windowed kinds ({', '.join(e.name for e in _ENTRIES if e.windowed)})"
                                f" take ':W'; '{base}' does not")
    return base, None


def is_window_name(name: object) -> bool:
    """Whether ``name`` is a windowed layer name such as ``"swa:1024"`` (a valid one)."""
    if not isinstance(name, str) or ":" not in name:
        return False
    try:
        return split_layer(name)[1] is not None
    except UnknownMixerError:
        return False


def mixer_entry(name: str) -> MixerEntry:
    """The catalog entry of a mixer or layer name (``"swa:1024"`` and ``"swa"`` -> the ``swa`` entry)."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    return _BY_NAME[split_layer(name)[0]]


def layer_token(name: str) -> str:
    """A layer's token in the layout string: its code, then the window for a windowed kind (``"swa:1024"`` -> ``S1024``)."""
    base, window = split_layer(name)
    return _BY_NAME[base].code + ("" if window is None else str(window))


def mixer_for_code(code: str) -> MixerEntry:
    if code not in _BY_CODE:
        allowed = ", ".join(f"{e.code}={e.name}" for e in _ENTRIES)
        raise UnknownMixerError(f"unknown layout code '{code}'; allowed: {allowed} (S takes its window: S1024)")
    return _BY_CODE[code]


def linear_mixer_names() -> list[str]:
    """The recurrent (linear-attention and state-space) mixers: every entry that keeps no keys and values."""
    return [e.name for e in _ENTRIES if not e.holds_kv]


def code_table() -> str:
    return ", ".join(f"{e.code}={e.name}" + ("<W>" if e.windowed else "") for e in _ENTRIES)

"""A hybrid layout: the per-layer list of token mixers of an N-layer model.

A layout is a value (a frozen tuple of mixer names) built by pure functions from
(mixer, ratio, placement, layers) or from explicit attention indices. Its compact string
form has one character per layer (see :func:`hlnas.model.catalog.code_table`), e.g. the paper's
GatedDeltaNet 6:1 at 24 layers is ``"ZZZZZA" * 4``.

Ratio convention (the paper's released checkpoints, reference/paper_grid.md section 2):
``r:1`` means one full-attention layer every r-th layer, so 24 layers at 3:1 hold 8
attention layers, and placement ``paper`` puts them at the end of each block of r.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Sequence

from hlnas.model.catalog import ATTENTION, MIXERS, canonical, linear_mixer_names, mixer_entry, mixer_for_code
from hlnas.errors import LayoutError, UnknownMixerError, did_you_mean

__all__ = [
    "Layout",
    "PAPER_LAYERS",
    "PAPER_RATIOS",
    "PLACEMENTS",
    "TRANSFORMER",
    "parse_ratio",
    "format_ratio",
    "attention_indices",
    "build_layout",
    "placement_of",
]

TRANSFORMER = "transformer"  # a mixer name meaning "every layer is attention"
PAPER_LAYERS = 24  # depth of the paper's released checkpoints: PAPER_RATIOS' attention positions are theirs at this depth
PAPER_RATIOS = ("pure", "24:1", "12:1", "6:1", "3:1")
PLACEMENTS = ("paper", "front", "back", "middle", "spread")


def parse_ratio(ratio: str | int | None) -> int | None:
    """``"pure"``/None -> None (no attention); ``"6:1"``, ``"6"`` or 6 -> 6."""
    if ratio is None:
        return None
    text = str(ratio).strip().lower()
    if text == "pure":
        return None
    head, sep, tail = text.partition(":")
    try:
        r = int(head)
        ok = (not sep or tail == "1") and r >= 2
    except ValueError:
        ok = False
    if not ok:
        raise LayoutError(
            f"ratio {ratio!r} is not allowed; write 'pure' or 'r:1' with an integer r >= 2 "
            f"(the paper's: {', '.join(PAPER_RATIOS)})"
        )
    return r


def format_ratio(r: int | None) -> str:
    return "pure" if r is None else f"{r}:1"


def attention_indices(n_layers: int, ratio: str | int | None, placement: str = "paper") -> tuple[int, ...]:
    """0-based indices of the full-attention layers for a ratio and a placement strategy.

    - ``paper``: one every r-th layer, ending at the last (24 layers, 6:1 -> 5, 11, 17, 23)
    - ``front`` / ``back``: all together at the start / end
    - ``middle``: one contiguous block centred in the stack
    - ``spread``: evenly from the first layer to the last
    """
    if n_layers < 1:
        raise LayoutError(f"layers must be >= 1, got {n_layers}")
    r = parse_ratio(ratio)
    if placement not in PLACEMENTS:
        raise LayoutError(f"placement '{placement}' is not allowed; allowed: {', '.join(PLACEMENTS)} or explicit indices")
    if r is None:
        return ()
    if n_layers % r:
        fits = [f"{d}:1" for d in range(n_layers, 1, -1) if n_layers % d == 0]
        raise LayoutError(
            f"ratio {r}:1 does not divide {n_layers} layers; ratios that do: {', '.join(fits) or 'none'}"
        )
    n = n_layers // r
    if placement == "paper":
        return tuple(range(r - 1, n_layers, r))
    if placement == "front":
        return tuple(range(n))
    if placement == "back":
        return tuple(range(n_layers - n, n_layers))
    if placement == "middle":
        start = (n_layers - n) // 2
        return tuple(range(start, start + n))
    # spread
    if n == 1:
        return (n_layers // 2,)
    return tuple(round(i * (n_layers - 1) / (n - 1)) for i in range(n))


def placement_of(layout: "Layout") -> str | None:
    """The placement strategy that puts ``layout``'s attention layers where they are: the first of :data:`PLACEMENTS`
    that does at its ratio (so ``paper`` where ``back`` would give the same layers), else ``"explicit:i,j,..."``
    (the form a space's ``attention_sets`` take). None for a pure model or an all-attention one."""
    attn = layout.attention_layers
    if not attn or len(attn) == layout.n_layers:
        return None
    if layout.n_layers % len(attn) == 0:
        ratio = layout.n_layers // len(attn)
        for name in PLACEMENTS:
            if attention_indices(layout.n_layers, ratio, name) == attn:
                return name
    return "explicit:" + ",".join(map(str, attn))


@dataclass(frozen=True, slots=True)
class Layout:
    """Per-layer mixer names, layer 0 first."""

    mixers: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.mixers:
            raise LayoutError("a layout needs at least one layer")
        for i, name in enumerate(self.mixers):
            if name not in MIXERS:
                try:
                    mixer_entry(name)
                except UnknownMixerError as e:
                    raise LayoutError(f"layer {i}: {e}") from None

    # -- views ------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.mixers)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.mixers) if mixer_entry(m).is_attention)

    @property
    def linear_mixers(self) -> tuple[str, ...]:
        """Distinct linear mixers, in order of first appearance."""
        seen: dict[str, None] = {}
        for m in self.mixers:
            if not mixer_entry(m).is_attention:
                seen.setdefault(m)
        return tuple(seen)

    @property
    def ratio(self) -> str:
        """'pure', 'r:1' when the attention count divides the depth, else 'a/n' (attention/layers)."""
        n_attn = len(self.attention_layers)
        if n_attn == 0:
            return "pure"
        if n_attn == self.n_layers:
            return TRANSFORMER
        if self.n_layers % n_attn == 0:
            return f"{self.n_layers // n_attn}:1"
        return f"{n_attn}/{self.n_layers}"

    @property
    def key(self) -> str:
        """Stable, filesystem-safe name for trials and checkpoints."""
        return str(self)

    def __str__(self) -> str:
        return "".join(mixer_entry(m).code for m in self.mixers)

    def describe(self) -> str:
        if not self.linear_mixers:
            return f"transformer, attention in all {self.n_layers} layers"
        return f"{'+'.join(self.linear_mixers)} {self.ratio}, attention at {list(self.attention_layers)}"

    # -- round trips ------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "Layout":
        """Inverse of ``str(layout)``."""
        text = text.strip()
        if not text:
            raise LayoutError("empty layout string")
        try:
            return cls(tuple(mixer_for_code(c).name for c in text))
        except UnknownMixerError as e:
            raise LayoutError(f"layout string {text!r}: {e}") from None

    def to_dict(self) -> dict:
        return {"layout": str(self), "mixers": list(self.mixers), "attention_layers": list(self.attention_layers)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> "Layout":
        if "mixers" in data:
            layout = cls(tuple(data["mixers"]))
        elif "layout" in data:
            layout = cls.parse(data["layout"])
        else:
            raise LayoutError(f"layout JSON needs 'mixers' or 'layout'; got keys {sorted(data)}")
        if "layout" in data and str(layout) != data["layout"]:
            raise LayoutError(f"layout JSON disagrees with itself: 'layout'={data['layout']!r} but 'mixers' give {str(layout)!r}")
        return layout

    @classmethod
    def from_json(cls, text: str) -> "Layout":
        return cls.from_dict(json.loads(text))


def build_layout(
    mixer: str | Sequence[str],
    ratio: str | int | None = "pure",
    n_layers: int = 24,
    placement: str | Sequence[int] = "paper",
) -> Layout:
    """Build a layout.

    ``mixer`` is a linear mixer name, ``"transformer"`` (all attention), or a per-layer
    sequence of linear mixer names (a heterogeneous model; its length sets the depth).
    ``placement`` is a strategy name or explicit 0-based attention indices (then ``ratio`` is ignored).
    """
    if isinstance(mixer, str):
        mixer = canonical(mixer)
        if mixer == TRANSFORMER:
            if parse_ratio(ratio) is not None or not isinstance(placement, str):
                raise LayoutError("'transformer' has attention in every layer; give no ratio or placement")
            return Layout((ATTENTION,) * n_layers)
        if mixer == ATTENTION:
            raise LayoutError(f"'{ATTENTION}' is not a linear mixer; use mixer 'transformer' for an all-attention model")
        if mixer not in MIXERS:
            allowed = ", ".join([TRANSFORMER, *linear_mixer_names()])
            raise LayoutError(f"unknown mixer '{mixer}'.{did_you_mean(mixer, [TRANSFORMER, *linear_mixer_names()])} Available: {allowed}")
        per_layer = [mixer] * n_layers
    else:
        per_layer = [canonical(m) for m in mixer]
        n_layers = len(per_layer)
        for i, m in enumerate(per_layer):
            if m not in linear_mixer_names():
                raise LayoutError(
                    f"layer {i}: '{m}' is not a linear mixer; allowed: {', '.join(linear_mixer_names())}"
                )
    if isinstance(placement, str):
        idx = attention_indices(n_layers, ratio, placement)
    else:
        idx = tuple(int(i) for i in placement)
        bad = [i for i in idx if not 0 <= i < n_layers]
        if bad:
            raise LayoutError(f"attention index {bad[0]} is out of range; expected a value in [0, {n_layers})")
        if len(set(idx)) != len(idx):
            raise LayoutError(f"attention indices repeat: {sorted(idx)}")
    for i in idx:
        per_layer[i] = ATTENTION
    return Layout(tuple(per_layer))

"""A hybrid layout: the per-layer list of token mixers of an N-layer model.

A layout is a value (a frozen tuple of layer names) built by pure functions from
(mixer, ratio, placement, layers) or from explicit attention indices. Its compact string
form has one token per layer (see :func:`hlnas.model.catalog.code_table`): a letter, and for a
windowed kind the letter and its window, e.g. the paper's GatedDeltaNet 6:1 at 24 layers is
``"ZZZZZA" * 4`` and the same with sliding-window attention over 1024 tokens ``"ZZZZZS1024" * 4``.

Ratio convention (the paper's released checkpoints, reference/paper_grid.md section 2):
``r:1`` means one full-attention layer every r-th layer, so 24 layers at 3:1 hold 8
attention layers, and placement ``paper`` puts them at the end of each block of r. Placement
``group`` is the other convention in use: r linear layers then one attention layer (Qwen3-Next's
and Kimi Linear's 3:1 is three linear layers per attention layer), so its layouts hold fewer
attention layers than the ratio's paper placement, and their own ratio reads (r+1):1 where the groups tile.

The attention layers of a layout (what its ratio counts): every softmax-attention layer, full or windowed,
when the layout holds a recurrent mixer; in a layout of attention alone, its full-attention layers. So
sliding-window layers are the attention of a linear hybrid (``"ZZZS1024"`` is gated_deltanet 4:1 with windowed
attention) and the bounded side of an attention-only one: an all-SWA model is pure (its cache does not grow),
never the all-attention control.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Sequence

from hlnas.model.catalog import (ATTENTION, MIXERS, canonical, is_window_name, layer_token, linear_mixer_names, mixer_entry,
                                 mixer_for_code, split_layer)
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
    "layer_tokens",
]

TRANSFORMER = "transformer"  # a mixer name meaning "every layer is attention"
PAPER_LAYERS = 24  # depth of the paper's released checkpoints: PAPER_RATIOS' attention positions are theirs at this depth
PAPER_RATIOS = ("pure", "24:1", "12:1", "6:1", "3:1")
PLACEMENTS = ("paper", "front", "back", "middle", "spread", "group")


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
    - ``group``: r linear layers then one attention layer, counted back from the last layer (every (r+1)-th layer
      ending at the last; 24 layers, 3:1 -> 3, 7, .., 23; where r+1 does not divide the depth the first group is short)
    """
    if n_layers < 1:
        raise LayoutError(f"layers must be >= 1, got {n_layers}")
    r = parse_ratio(ratio)
    if placement not in PLACEMENTS:
        raise LayoutError(f"placement '{placement}' is not allowed; allowed: {', '.join(PLACEMENTS)} or explicit indices")
    if r is None:
        return ()
    if placement == "group":  # no divisibility needed: the groups are counted back from the last layer
        return tuple(range((n_layers - 1) % (r + 1), n_layers, r + 1))
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
        for name in PLACEMENTS[:-1]:
            if attention_indices(layout.n_layers, ratio, name) == attn:
                return name
    n, gaps = layout.n_layers, {b - a for a, b in zip(attn, attn[1:])}
    if len(gaps) == 1 and min(gaps) >= 3 and attn[-1] == n - 1:  # every (r+1)-th layer back from the last: group r:1
        if attention_indices(n, min(gaps) - 1, "group") == attn:
            return "group"
    return "explicit:" + ",".join(map(str, attn))


@dataclass(frozen=True, slots=True)
class Layout:
    """Per-layer mixer names, layer 0 first."""

    mixers: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.mixers:
            raise LayoutError("a layout needs at least one layer")
        for i, name in enumerate(self.mixers):
            if name not in MIXERS or mixer_entry(name).windowed:
                try:
                    split_layer(name)
                except UnknownMixerError as e:
                    raise LayoutError(f"layer {i}: {e}") from None

    # -- views ------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.mixers)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The hybrid's attention layers (what its ratio counts): every softmax-attention layer, full or windowed, when
        a recurrent mixer is present; else the full-attention ones (see the module docstring)."""
        kv = [i for i, m in enumerate(self.mixers) if mixer_entry(m).holds_kv]
        if len(kv) < self.n_layers:
            return tuple(kv)
        return tuple(i for i in kv if mixer_entry(self.mixers[i]).is_attention)

    @property
    def window_layers(self) -> tuple[int, ...]:
        """The sliding-window attention layers (their KV cache is bounded by their window)."""
        return tuple(i for i, m in enumerate(self.mixers) if mixer_entry(m).windowed)

    @property
    def linear_mixers(self) -> tuple[str, ...]:
        """Distinct mixers of the layers that are not attention layers (recurrent mixers, or the windowed attention of
        an attention-only layout), in order of first appearance."""
        attn = set(self.attention_layers)
        return tuple(dict.fromkeys(m for i, m in enumerate(self.mixers) if i not in attn))

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
        return "".join(map(layer_token, self.mixers))

    def describe(self) -> str:
        if not self.linear_mixers:
            return f"transformer, attention in all {self.n_layers} layers"
        attn = self.attention_layers
        kinds = dict.fromkeys(self.mixers[i] for i in attn)
        kind = "" if set(kinds) <= {ATTENTION} else f" ({', '.join(kinds)})"
        return f"{'+'.join(self.linear_mixers)} {self.ratio}, attention at {list(attn)}{kind}"

    # -- round trips ------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "Layout":
        """Inverse of ``str(layout)``."""
        text = text.strip()
        if not text:
            raise LayoutError("empty layout string")
        try:
            if not _TOKENS.fullmatch(text):
                _bad_character(text)
            return cls(tuple(_token_layer(tok) for tok in _TOKEN.findall(text)))
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


_TOKEN = re.compile(r"[A-Za-z]\d*")  # one layer: its code, and a window's digits
_TOKENS = re.compile(r"(?:[A-Za-z]\d*)+")


def layer_tokens(text: str) -> list[str]:
    """A layout string's tokens, one a layer: ``"ZZS1024A"`` -> ``["Z", "Z", "S1024", "A"]`` (no validation)."""
    return _TOKEN.findall(text)


def _token_layer(tok: str) -> str:
    entry = mixer_for_code(tok[0])
    if entry.windowed != (len(tok) > 1):
        form = f"{entry.code}<window>, e.g. {entry.code}1024" if entry.windowed else entry.code
        raise UnknownMixerError(f"token '{tok}' is not a layer; {entry.name} is written {form}")
    return f"{entry.name}:{tok[1:]}" if entry.windowed else entry.name


def _bad_character(text: str):
    pos = next((i for i, c in enumerate(text) if not (c.isascii() and c.isalnum())), 0)
    raise UnknownMixerError(f"character {text[pos]!r} at {pos} is not a layer code; each layer is a letter, a windowed "
                            "one its letter and window (S1024)")


def build_layout(
    mixer: str | Sequence[str],
    ratio: str | int | None = "pure",
    n_layers: int = 24,
    placement: str | Sequence[int] = "paper",
    attention: str = ATTENTION,
) -> Layout:
    """Build a layout.

    ``mixer`` is a linear mixer name, a windowed attention layer (``"swa:1024"``: the bounded side of an attention-only
    hybrid, or alone an all-SWA model), ``"transformer"`` (all full attention), or a per-layer sequence of those
    (a heterogeneous model; its length sets the depth). ``placement`` is a strategy name or explicit 0-based attention
    indices (then ``ratio`` is ignored). ``attention`` is the kind of the attention layers: ``"attention"`` (full) or a
    windowed one such as ``"swa:1024"``.
    """
    attention = _attention_kind(attention)
    if isinstance(mixer, str):
        mixer = canonical(mixer)
        if mixer == TRANSFORMER:
            if parse_ratio(ratio) is not None or not isinstance(placement, str):
                raise LayoutError("'transformer' has attention in every layer; give no ratio or placement")
            return Layout((ATTENTION,) * n_layers)
        per_layer = [_bounded_mixer(mixer)] * n_layers
    else:
        per_layer = [_bounded_mixer(canonical(m), i) for i, m in enumerate(mixer)]
        n_layers = len(per_layer)
    if isinstance(placement, str):
        idx = attention_indices(n_layers, ratio, placement)
    else:
        idx = tuple(int(i) for i in placement)
        bad = [i for i in idx if not 0 <= i < n_layers]
        if bad:
            raise LayoutError(f"attention index {bad[0]} is out of range; expected a value in [0, {n_layers})")
        if len(set(idx)) != len(idx):
            raise LayoutError(f"attention indices repeat: {sorted(idx)}")
    if idx and attention != ATTENTION and all(is_window_name(m) for m in per_layer):
        raise LayoutError(f"attention={attention!r} beside windowed layers {sorted(set(per_layer))}: with no recurrent "
                          "mixer the attention layers of a windowed model are full attention")
    for i in idx:
        per_layer[i] = attention
    return Layout(tuple(per_layer))


def _bounded_mixer(name: str, layer: int | None = None) -> str:
    """``name`` if it is a linear mixer or a windowed attention layer ("swa:W"), else a LayoutError naming what is allowed."""
    if name in linear_mixer_names() or is_window_name(name):
        return name
    try:
        split_layer(name)
    except UnknownMixerError as e:
        if name.partition(":")[0] in MIXERS:  # a known kind written wrong (swa without a window, gla:4)
            raise LayoutError(f"{'' if layer is None else f'layer {layer}: '}{e}") from None
    bounded = [*linear_mixer_names(), "swa:<window>"]
    if layer is not None:
        raise LayoutError(f"layer {layer}: '{name}' is not a linear mixer; allowed: {', '.join(bounded)}")
    if name in MIXERS:  # attention itself
        raise LayoutError(f"'{name}' is not a linear mixer; use mixer 'transformer' for an all-attention model")
    allowed = [TRANSFORMER, *bounded]
    raise LayoutError(f"unknown mixer '{name}'.{did_you_mean(name, allowed)} Available: {', '.join(allowed)}")


def _attention_kind(name: str) -> str:
    """The attention layers' kind: ``"attention"`` (or ``"full"``) for full attention, or a windowed layer name."""
    name = canonical(name)
    if name in (ATTENTION, "full"):
        return ATTENTION
    if is_window_name(name):
        return name
    raise LayoutError(f"attention kind {name!r} is not allowed; allowed: full (or attention), swa:<window> (e.g. swa:1024)")

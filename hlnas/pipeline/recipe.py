"""A run recipe: everything needed to train and score one candidate, loadable from YAML.

```yaml
model: {preset: proxy-tiny, d_model: 64}          # a preset plus ModelConfig overrides
layout: {mixer: gla, ratio: "6:1", placement: paper}   # or  layout: GGGGGA...  (compact string)
train: {tokens: 2000000, batch_size: 8, seq_len: 256, lr: 0.001}
data: {source: synthetic, tokenizer: bytes}
score: {objectives: [val_loss, mqar]}
```

``--set train.lr=3e-4`` style overrides apply on top, checked against the field types (hlnas.overrides).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hlnas.model.config import ModelConfig, preset
from hlnas.data.sources import DataConfig
from hlnas.errors import ConfigError, did_you_mean
from hlnas.model.layout import Layout, build_layout
from hlnas.outputs import read_input
from hlnas.overrides import field_types, parse_sets, yaml_error_text, yaml_load
from hlnas.score.objectives import ScoreConfig
from hlnas.lm.trainer import TrainConfig

__all__ = ["RunConfig", "load_recipe", "apply_overrides", "layout_from_spec",
           "model_from_spec", "model_overrides", "yaml_load", "DEFAULT_LAYOUT"]

# The keys of a layout mapping, typed for --set; a layout may also be one compact string.
LAYOUT_KEYS = {"mixer": str | list[str], "ratio": str | int | None, "placement": str | list[int], "layers": int}
SECTION_TYPES = {"model": {**field_types(ModelConfig), "preset": str}, "layout": LAYOUT_KEYS, "train": TrainConfig,
                 "data": DataConfig, "score": ScoreConfig}
SECTIONS = tuple(SECTION_TYPES)


def layout_from_spec(spec, n_layers: int) -> Layout:
    """A compact string, or {mixer, ratio, placement, layers} (placement may be a list of indices)."""
    if isinstance(spec, str):
        return Layout.parse(spec)
    if not isinstance(spec, dict):
        raise ConfigError(f"layout must be a layout string or a mapping with 'mixer'; got {type(spec).__name__}")
    for key in spec:
        if key not in LAYOUT_KEYS:
            raise ConfigError(f"unknown layout key '{key}'.{did_you_mean(key, LAYOUT_KEYS)} Allowed: {', '.join(sorted(LAYOUT_KEYS))}")
    if "mixer" not in spec:
        raise ConfigError("layout needs 'mixer' (a linear mixer name, 'transformer', or a per-layer list)")
    mixer = spec["mixer"]
    ratio = spec.get("ratio", "pure")
    if mixer == "transformer":
        return build_layout(mixer, None, spec.get("layers", n_layers))
    return build_layout(mixer, ratio, spec.get("layers", n_layers), spec.get("placement", "paper"))


def model_from_spec(spec: dict) -> ModelConfig:
    """``{preset: name, **overrides}`` (the YAML form of a model section) as a :class:`ModelConfig`."""
    spec = dict(spec or {})
    base = preset(spec.pop("preset", "proxy-tiny"))
    if not spec:
        return base
    return ModelConfig.from_dict({**base.to_dict(), **spec})


def model_overrides(model: ModelConfig, preset_name: str, *, skip: tuple[str, ...] = ()) -> dict:
    """The inverse of :func:`model_from_spec`: the fields where ``model`` differs from its preset (without
    ``skip``). Written instead of the whole config so that a changed ``preset`` still takes effect."""
    base = preset(preset_name).to_dict()
    return {k: v for k, v in model.to_dict().items() if base.get(k) != v and k not in skip}


@dataclass(frozen=True)
class RunConfig:
    layout: Layout
    model: ModelConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    score: ScoreConfig = field(default_factory=ScoreConfig)
    preset: str = "proxy-tiny"

    @classmethod
    def from_dict(cls, raw: dict, *, where: str = "recipe") -> "RunConfig":
        for key in raw:
            if key not in SECTIONS:
                raise ConfigError(f"{where}: unknown section '{key}'.{did_you_mean(key, SECTIONS)} Allowed: {', '.join(SECTIONS)}")
        try:
            model_spec = dict(raw.get("model") or {})
            preset_name = model_spec.get("preset", "proxy-tiny")
            model = model_from_spec(model_spec)
            if "layout" not in raw:
                raise ConfigError("a layout is required (layout: {mixer: gla, ratio: '6:1'} or a layout string)")
            layout = layout_from_spec(raw["layout"], model.n_layers)
            return cls(
                layout=layout,
                model=model,
                train=TrainConfig.from_dict(raw.get("train") or {}),
                data=DataConfig.from_dict(raw.get("data") or {}),
                score=ScoreConfig.from_dict(raw.get("score") or {}),
                preset=preset_name,
            )
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        except TypeError as e:  # a wrong value type reaching a dataclass
            raise ConfigError(f"{where}: {e}") from None

    def to_dict(self) -> dict:
        return {
            "layout": str(self.layout),
            "model": {"preset": self.preset, **model_overrides(self.model, self.preset)},
            "train": self.train.to_dict(),
            "data": self.data.to_dict(),
            "score": self.score.to_dict(),
        }


def apply_overrides(raw: dict, sets: list[str]) -> dict:
    """``["train.lr=3e-4", "layout.ratio=3:1"]`` applied to a raw recipe dict (a new one; ``raw`` is not changed)."""
    return {**raw, **parse_sets(sets, SECTION_TYPES, raw)}


#: what ``hlnas train`` trains when neither a recipe file nor a layout is given
DEFAULT_LAYOUT = {"mixer": "gla", "ratio": "6:1"}


def load_recipe(path: str | Path | None, sets: list[str] | None = None, base: dict | None = None, *,
                layout: str | None = None) -> RunConfig:
    """The recipe in ``path`` (YAML; None: ``base`` alone) with ``--set`` items applied. ``layout``: a compact
    layout string that replaces the file's layout (``hlnas train --layout``); layout.* items then refine a mapping."""
    raw: dict = dict(base or {})
    where = "recipe"
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"recipe file '{path}' does not exist")
        try:
            loaded = yaml_load(read_input(p, "recipe file", ConfigError)) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML at {yaml_error_text(e)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping with sections {', '.join(SECTIONS)}")
        raw.update(loaded)
        where = str(path)
    if layout is not None:
        raw["layout"] = layout
    return RunConfig.from_dict(apply_overrides(raw, sets or []), where=where)

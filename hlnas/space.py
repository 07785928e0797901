"""A search space: YAML validated at the boundary into a frozen :class:`SearchSpace`.

Keys (examples in ``search_spaces/``): ``name``; ``mixers`` (linear mixers, or 'transformer');
``ratios`` ('pure', 'r:1': one attention layer every r-th layer); ``placements`` (paper, front, back,
middle, spread); ``attention_sets`` (explicit 0-based indices, placement "explicit:0,12");
``transformer`` (add the all-attention baseline once); ``attention`` (the kinds the attention layers may take:
``full``, ``swa:W`` sliding windows; two or more make a dimension); ``layers`` (default: the preset's depth);
``hetero: {ratio: "6:1"}`` (instead of ratios/placements: each block of r layers picks its own mixer);
``scale: {preset, model, train, data, score, kv_context}``; ``objectives: [{name, metric, direction}]``;
``constraints: {max_params, max_kv_bytes, max_state_bytes}``; ``sampler`` (nsga2, tpe, gp, random, grid).

Every key is checked; a bad file fails with its path, the key, the bad value and what is allowed.
The scale sections and the calibration are validated into the real, frozen config objects the space then
holds (their modules are imported when a space is first read: they need torch).
Bare names (``load_space("tiny")``) resolve to the repo's ``search_spaces/`` or the package copy.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hlnas.errors import ConfigError, LayoutError, did_you_mean
from hlnas.model.catalog import PAPER_MIXERS, canonical, is_window_name, linear_mixer_names
from hlnas.model.config import PRESETS, ModelConfig
from hlnas.outputs import read_input
from hlnas.model.layout import PLACEMENTS, PAPER_LAYERS, PAPER_RATIOS, TRANSFORMER, Layout, build_layout, format_ratio, parse_ratio
from hlnas.overrides import dotted_diff, is_int
from hlnas.settings import (SAMPLERS, CONSTRAINTS, DEFAULT_OBJECTIVES, OBJECTIVE_DIRECTIONS, RAW_RECALL_METRICS, RECALL_SOURCES,
                            CalibrationConfig, Objective, RungConfig, SettingsChecker, SpaceError)

if TYPE_CHECKING:  # the config modules pull in torch; the validator imports them when it first runs
    from hlnas.data.sources import DataConfig
    from hlnas.score.objectives import ScoreConfig
    from hlnas.lm.trainer import TrainConfig

__all__ = ["SearchSpace", "Objective", "SpaceError", "SAMPLERS", "OBJECTIVE_DIRECTIONS", "CONSTRAINTS", "load_space",
           "space_from_dict", "builtin_spaces", "RAW_RECALL_METRICS", "RECALL_SOURCES"]

TOP_KEYS = ("name", "mixers", "ratios", "placements", "attention_sets", "transformer", "attention", "layers", "hetero",
            "scale", "objectives", "constraints", "sampler", "calibration", "rungs")
FULL = "full"  # the attention kind of full softmax attention (a space's ``attention`` list; layouts write it "attention")
SCALE_KEYS = ("preset", "model", "train", "data", "score", "kv_context")
GRID_LIMIT = 100_000  # combinations grid() will enumerate; beyond this use a sampler
EXPLICIT = "explicit"
_REPO_DIR = Path(__file__).resolve().parents[1] / "search_spaces"
_PKG_DIR = Path(__file__).resolve().parent / "spaces"


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """A validated space; build it with :func:`load_space` or :func:`space_from_dict` (direct construction skips checks)."""

    name: str
    source: str | None = None
    mixers: tuple[str, ...]
    ratios: tuple[str, ...] = ()
    placements: tuple[str, ...] = ("paper",)
    attention_sets: tuple[tuple[int, ...], ...] = ()
    include_transformer: bool = False
    attention_kinds: tuple[str, ...] = (FULL,)  # what the attention layers may be: full, swa:W (two or more: a dimension)
    n_layers: int = 24
    hetero_ratio: str | None = None
    preset: str = "proxy-tiny"
    # the scale, as the real config objects (validated when the space was read)
    model: ModelConfig  # the preset with scale.model's overrides, at the space's depth (n_layers)
    train: TrainConfig
    data: DataConfig
    score: ScoreConfig
    objectives: tuple[Objective, ...] = DEFAULT_OBJECTIVES
    kv_context: int = 4096
    constraints: dict[str, float] = field(default_factory=dict)
    sampler: str = "nsga2"
    calibration: CalibrationConfig
    rungs: RungConfig | None = None  # multi-fidelity search (hlnas.search.rungs); off by default

    # -- the dimensions a sampler sees ----------------------------------------------------------
    @property
    def n_blocks(self) -> int:
        """Hetero spaces: blocks of r layers, each ending in attention (0 otherwise)."""
        return self.n_layers // parse_ratio(self.hetero_ratio) if self.hetero_ratio else 0

    def params(self) -> dict[str, list]:
        """Categorical dimensions: ``mixer``/``ratio``/``placement``, or ``block_0``.. for hetero spaces."""
        kinds = {"attention": list(self.attention_kinds)} if len(self.attention_kinds) > 1 else {}
        if self.hetero_ratio:
            return {**{f"block_{b}": list(self.mixers) for b in range(self.n_blocks)}, **kinds}
        if not self.mixers:
            return {"mixer": [TRANSFORMER]}
        placements = [p for p in self.placements if p != EXPLICIT]
        placements += [f"{EXPLICIT}:" + ",".join(map(str, s)) for s in self.attention_sets]
        return {"mixer": [*self.mixers, *([TRANSFORMER] if self.include_transformer else [])],
                "ratio": list(self.ratios), "placement": placements, **kinds}

    def layout(self, params: dict) -> Layout:
        """The layout of one point; parameters that do not matter for it are ignored."""
        choices = self.params()

        def pick(key: str):
            if key not in params:
                raise SpaceError(f"space '{self.name}': params lack '{key}'; this space's dimensions: {', '.join(choices)}")
            if params[key] not in choices[key]:
                raise SpaceError(f"space '{self.name}': params['{key}']={params[key]!r} is not in this space; "
                                 f"allowed: {', '.join(map(str, choices[key]))}")
            return params[key]

        kind = pick("attention") if "attention" in choices else self.attention_kinds[0]
        if self.hetero_ratio:
            r = parse_ratio(self.hetero_ratio)
            per_layer = [pick(f"block_{b}") for b in range(self.n_blocks) for _ in range(r)]
            return build_layout(per_layer, self.hetero_ratio, placement="paper", attention=kind)
        mixer = pick("mixer")
        if mixer == TRANSFORMER:
            return build_layout(TRANSFORMER, None, self.n_layers)
        if is_window_name(mixer):  # beside windowed layers the attention layers are full attention: the kind is moot
            kind = FULL
        ratio = pick("ratio")
        if ratio == "pure":
            return build_layout(mixer, "pure", self.n_layers)
        placement = pick("placement")
        if placement.startswith(EXPLICIT + ":"):
            idx = [int(i) for i in placement.split(":", 1)[1].split(",")]
            return build_layout(mixer, None, self.n_layers, idx, attention=kind)
        return build_layout(mixer, ratio, self.n_layers, placement, attention=kind)

    def size(self) -> int:
        """Parameter combinations before deduplication (cheap; grid() refuses more than GRID_LIMIT)."""
        return math.prod(len(v) for v in self.params().values())

    def countable(self, limit: int) -> int | None:
        """How many distinct layouts the space has, when no more than ``limit`` (else None)."""
        n = len(self.grid())
        return n if n <= limit else None

    def grid(self) -> list[dict]:
        """Every combination, first one kept per distinct layout (the Transformer appears once)."""
        dims = self.params()
        if self.size() > GRID_LIMIT:
            raise SpaceError(f"space '{self.name}' has {self.size():,} combinations, more than grid() enumerates "
                             f"({GRID_LIMIT:,}); use sampler nsga2, tpe, gp or random")
        seen: dict[str, dict] = {}
        for values in itertools.product(*dims.values()):
            point = dict(zip(dims, values))
            seen.setdefault(self.layout(point).key, point)
        return list(seen.values())

    def candidates(self) -> list[Layout]:
        return [self.layout(p) for p in self.grid()]

    @property
    def is_paper_grid(self) -> bool:
        """Every candidate is a cell of the paper's grid (arXiv 2507.06457): one of its six mixers (or the
        Transformer) at one of its ratios, placed as its 24-layer checkpoints are. Decided by content, not by the
        space's name: :mod:`hlnas.analysis.paper`'s overlays look a cell up by (mixer, ratio) alone, so they hold only then."""
        return (self.hetero_ratio is None and self.n_layers == PAPER_LAYERS and set(self.placements) <= {"paper"}
                and set(self.mixers) <= set(PAPER_MIXERS) and set(self.ratios) <= set(PAPER_RATIOS))

    def result_key(self, metric: str) -> str:
        """Where ``metric`` sits in a trial's results ('ruler' is RULER's weighted average, ``ruler_avg``)."""
        return "ruler_avg" if metric == "ruler" else metric

    def recall_source(self) -> str | None:
        """The raw accuracy key behind this scale's 'recall': the first of :data:`RECALL_SOURCES` it scores."""
        return next((key for obj, key in RECALL_SOURCES if obj in self.score.objectives), None)

    # -- identity ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The space as plain JSON data, the form stored in a study and read back by :func:`space_from_dict`.

        The train, data, score and calibration sections are written whole, so a stored study says what its
        trials ran even after a default changes (a resume against the new default is then refused, showing it);
        the model section is what differs from the preset, so that replacing the preset takes effect."""
        from hlnas.pipeline.recipe import model_overrides

        d: dict = {"name": self.name, "mixers": list(self.mixers)}
        if self.attention_kinds != (FULL,):  # only when set: the fingerprints of full-attention spaces stay as they were
            d["attention"] = list(self.attention_kinds)
        if self.hetero_ratio:
            d["hetero"] = {"ratio": self.hetero_ratio}
        else:
            d.update(ratios=list(self.ratios), placements=list(self.placements),
                     attention_sets=[list(s) for s in self.attention_sets], transformer=self.include_transformer)
        scale = {"preset": self.preset, "model": model_overrides(self.model, self.preset, skip=("n_layers",)),
                 "train": self.train.to_dict(), "data": self.data.to_dict(), "score": self.score.to_dict(),
                 "kv_context": self.kv_context}
        d.update(layers=self.n_layers, scale=scale, objectives=[o.to_dict() for o in self.objectives],
                 constraints=dict(self.constraints), sampler=self.sampler, calibration=self.calibration.to_dict())
        if self.rungs is not None:  # only when set: the fingerprints of spaces without rungs stay as they were
            d["rungs"] = self.rungs.to_dict()
        return json.loads(json.dumps(d, default=list))  # plain JSON types all the way down

    def with_start_order(self, given: "SearchSpace | None") -> "SearchSpace":
        """This space run in ``given``'s calibration start order (calibration.order, mixer_order: how runs are
        scheduled, no part of the fingerprint), so a resume can reorder what is left; itself when ``given`` is None."""
        if given is None:
            return self
        order = {k: v for k, v in given.calibration.to_dict().items() if k in ("order", "mixer_order")}
        return self.with_overrides(calibration={**self.calibration.to_dict(), **order})

    def fingerprint(self) -> str:
        body = {k: v for k, v in self.to_dict().items() if k not in ("name", "source")}
        # the calibration's start order is how its runs are scheduled, not what they measure, and its extra ratios are
        # runs trained beside it for the search, never judged: a resume may change either
        body["calibration"] = {k: v for k, v in body["calibration"].items()
                               if k not in ("order", "mixer_order", "extra_ratios")}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def diff(self, other: "SearchSpace", ignore: tuple[str, ...] = ()) -> list[str]:
        """What differs from ``other``, one line per dotted key (name and source do not count, nor a key in
        ``ignore`` or below one: ``"scale.train"`` leaves out every training setting)."""
        return dotted_diff(self.to_dict(), other.to_dict(), ignore=("name", *ignore))

    def with_sets(self, items: list[str]) -> "SearchSpace":
        """A re-validated copy with ``--set SECTION.KEY=VALUE`` items applied to the scale (sections model, train,
        data, score; nested keys such as ``score.mqar.steps``), each over the section's stored form; a wrong key
        or type raises :class:`~hlnas.errors.ConfigError` naming the item."""
        if not items:
            return self
        from hlnas.data.sources import DataConfig
        from hlnas.overrides import parse_sets
        from hlnas.score.objectives import ScoreConfig
        from hlnas.lm.trainer import TrainConfig

        sections = {"model": ModelConfig, "train": TrainConfig, "data": DataConfig, "score": ScoreConfig}
        return self.with_overrides(**parse_sets(items, sections, self.to_dict()["scale"]))

    def with_overrides(self, **changes) -> "SearchSpace":
        """A re-validated copy with fields replaced, e.g. ``with_overrides(sampler="tpe", ratios=["6:1"])``; a scale
        section takes a config object or a mapping of its fields (which replaces the whole section)."""
        from hlnas.pipeline.recipe import model_overrides

        raw, names = self.to_dict(), {f.name for f in dataclasses.fields(self)}
        for key, value in changes.items():
            if key not in names:
                raise SpaceError(f"unknown SearchSpace field '{key}'.{did_you_mean(key, names)} Allowed: {', '.join(sorted(names))}")
            if key == "model" and isinstance(value, ModelConfig):
                raw["scale"]["model"] = model_overrides(value, changes.get("preset", self.preset), skip=("n_layers",))
            elif key == "rungs":
                raw.pop("rungs", None)
                if value is not None:
                    raw["rungs"] = value.to_dict() if dataclasses.is_dataclass(value) else value
            elif key in SCALE_KEYS or key == "calibration":
                value = value.to_dict() if dataclasses.is_dataclass(value) else value  # a config object or its fields
                (raw["scale"] if key in SCALE_KEYS else raw)[key] = value
            elif key == "hetero_ratio":
                raw.pop("hetero", None)
                if value is not None:  # a hetero space has no ratios/placements of its own
                    raw["hetero"] = {"ratio": value}
                    for k in ("ratios", "placements", "attention_sets", "transformer"):
                        if _RAW_KEYS.get(k, k) not in changes:
                            raw.pop(k, None)
            elif key == "objectives":
                raw[key] = [o.to_dict() if isinstance(o, Objective) else o for o in value]
            elif key == "attention_sets":
                raw[key] = [list(s) if not isinstance(s, str) else s for s in value]
            elif key != "source":
                raw[{f: k for k, f in _RAW_KEYS.items()}.get(key, key)] = value
        out = space_from_dict(raw, where=f"{self.source or self.name} (overrides)")
        return dataclasses.replace(out, source=changes.get("source", self.source))


_RAW_KEYS = {"transformer": "include_transformer", "layers": "n_layers",
             "attention": "attention_kinds"}  # YAML key -> field, where they differ

# -- loading ----------------------------------------------------------------------------------------
def builtin_spaces() -> dict[str, Path]:
    """Bare name -> file: the repo's ``search_spaces/`` first, then the copies shipped in the package."""
    found: dict[str, Path] = {}
    for folder in (_REPO_DIR, _PKG_DIR):
        if folder.is_dir():
            for p in sorted(folder.glob("*.yaml")):
                found.setdefault(p.stem, p)
    return found


def load_space(path: str | os.PathLike) -> SearchSpace:
    """Load a space from a YAML file, or a built-in one by bare name (``"tiny"``, ``"paper_grid"``)."""
    p = Path(path)
    if not p.is_file():
        builtin = builtin_spaces()
        stem = p.stem if p.suffix in (".yaml", ".yml") else p.name
        if len(p.parts) == 1 and stem in builtin:
            p = builtin[stem]
        elif p.is_dir():
            raise SpaceError(f"search space '{path}' is a directory; give a YAML file in it, or a built-in name")
        else:
            raise SpaceError(f"search space '{path}' not found: no such file and no built-in space of that name."
                             f"{did_you_mean(stem, builtin)} Built-in: {', '.join(builtin)} (or give a path to a YAML file)")
    p = p.resolve()
    where = os.path.relpath(p) if not os.path.relpath(p).startswith("..") else str(p)  # short in messages
    import yaml

    from hlnas.overrides import yaml_error_text
    from hlnas.pipeline.recipe import yaml_load  # keeps 6:1 a string (YAML 1.1 would read base-60 361)

    try:
        raw = yaml_load(read_input(path if Path(path).is_file() else p, "search space", SpaceError))  # named as given
    except yaml.YAMLError as e:
        raise SpaceError(f"{where}: not valid YAML at {yaml_error_text(e)}") from None
    if raw is None:
        raise SpaceError(f"{where}: the file is empty; a space needs at least 'mixers' (see search_spaces/tiny.yaml)")
    if isinstance(raw, dict) and raw.get("mixers") == []:  # in a file, not the stored form of the Transformer alone
        allowed = ", ".join(linear_mixer_names())
        raise SpaceError(f"{where}: mixers is empty; list at least one of {allowed}, swa:<window> (and "
                         "transformer: true for the all-attention baseline), or mixers: [transformer] for the baseline alone")
    space = space_from_dict(raw, where=where)
    return dataclasses.replace(space, source=str(p))


def space_from_dict(raw: dict, where: str = "<dict>") -> SearchSpace:
    """Validate a raw mapping (as read from YAML) into a :class:`SearchSpace`."""
    v = _Validator(where)
    v.keys("", raw, TOP_KEYS)
    scale = raw.get("scale") or {}
    v.keys("scale.", scale, SCALE_KEYS)
    configs, model_section = v.scale(scale)
    n_layers = v.layers(raw.get("layers"), configs["model"], model_section)
    hetero = "hetero" in raw
    mixers, transformer = v.mixers(raw.get("mixers"), hetero)
    if not isinstance(raw.get("transformer", False), bool):
        v.fail(f"transformer={raw['transformer']!r} must be true or false")
    transformer = transformer or raw.get("transformer", False)
    hetero_ratio, ratios, placements, sets = None, (), ("paper",), ()
    if hetero:
        for k in ("ratios", "placements", "attention_sets", "transformer"):
            if raw.get(k) not in (None, False):
                v.fail(f"'{k}' cannot be used with 'hetero' (each block of r layers ends in attention, the paper "
                       "placement; put baselines in another space)")
        v.keys("hetero.", raw["hetero"], ("ratio",))
        hetero_ratio = v.ratio("hetero.ratio", raw["hetero"].get("ratio"), n_layers, pure=False)
    elif mixers:
        if "ratios" not in raw:
            v.fail(f"'ratios' is required, e.g. ratios: [pure, '6:1']; allowed: {_ratio_allowed(n_layers)}")
        if not v.items("ratios", raw["ratios"]):  # no layout of a mixer without a ratio
            v.fail(f"ratios is empty; list at least one, e.g. ratios: [pure, '6:1']; allowed: {_ratio_allowed(n_layers)}")
        ratios = v.unique("ratios", [v.ratio(f"ratios[{i}]", r, n_layers) for i, r in enumerate(raw["ratios"])])
        sets = v.attention_sets(raw.get("attention_sets") or [], n_layers)
        placements = v.placements(raw.get("placements"), bool(sets))
    elif not transformer:
        v.fail("'mixers' lists no linear mixer and 'transformer' is not true: the space is empty")
    kv_context = scale.get("kv_context", 4096)
    if not is_int(kv_context) or kv_context < 1:
        v.fail(f"scale.kv_context={kv_context!r} must be a positive integer (tokens of context for kv_cache_bytes)")
    name = raw.get("name") or (Path(where).stem if where != "<dict>" else "space")
    if not isinstance(name, str):
        v.fail(f"name={name!r} must be a string")
    kinds = v.attention_kinds(raw.get("attention"))
    space = SearchSpace(
        name=name, source=None, mixers=mixers, ratios=ratios, placements=placements, attention_sets=sets,
        include_transformer=transformer, attention_kinds=kinds, n_layers=n_layers, hetero_ratio=hetero_ratio,
        preset=scale.get("preset", "proxy-tiny"), model=configs["model"].replace(n_layers=n_layers), train=configs["train"],
        data=configs["data"], score=configs["score"], objectives=v.objectives(raw.get("objectives"), configs["score"].objectives),
        kv_context=kv_context, constraints=v.constraints(raw.get("constraints") or {}),
        sampler=v.choice("sampler", raw.get("sampler", "nsga2"), SAMPLERS), calibration=v.calibration(raw.get("calibration")),
        rungs=v.rungs(raw.get("rungs"), configs["score"]))
    if space.sampler == "grid" and space.size() > GRID_LIMIT:
        v.fail(f"sampler='grid' over {space.size():,} combinations (more than {GRID_LIMIT:,}); use nsga2, tpe, gp or random")
    return space


def _ratio_allowed(n_layers: int) -> str:
    fits = [r for r in PAPER_RATIOS[1:] if n_layers % parse_ratio(r) == 0]
    return ", ".join(["pure", *fits]) + f" (or any r:1 with r dividing layers={n_layers})"


class _Validator(SettingsChecker):
    """Checks one raw space; every failure names ``where`` (the file), the key and the value."""

    def rungs(self, value, score):
        """The space's :class:`hlnas.search.rungs.RungConfig` (absent: no rung scheduler)."""
        from hlnas.settings import rung_config

        try:
            return rung_config(value, score)
        except (ConfigError, TypeError) as e:
            self.fail(str(e))

    def scale(self, scale: dict):
        name = self.choice("scale.preset", scale.get("preset", "proxy-tiny"), tuple(PRESETS))
        sections = {k: copy.deepcopy(scale.get(k) or {}) for k in ("model", "train", "data", "score")}
        for k, sec in sections.items():
            if not isinstance(sec, dict):
                self.fail(f"scale.{k} must be a mapping of {k} settings, got {sec!r}")
        if "preset" in sections["model"]:
            self.fail("scale.model.preset: put the preset at scale.preset")
        from hlnas.data.sources import DataConfig
        from hlnas.pipeline.recipe import model_from_spec
        from hlnas.score.objectives import ScoreConfig
        from hlnas.lm.trainer import TrainConfig

        builders = {"model": lambda d: model_from_spec({"preset": name, **d}), "train": TrainConfig.from_dict,
                    "data": DataConfig.from_dict, "score": ScoreConfig.from_dict}
        built = {}
        for k, build in builders.items():
            try:
                built[k] = build(sections[k])
            except (ConfigError, TypeError, ValueError) as e:
                self.fail(f"scale.{k}: {e}")
        from hlnas.errors import UnknownMixerError
        from hlnas.model.mixers import get_mixer

        for mixer, overrides in (built["model"].mixer_hparams or {}).items():  # else every trial of it fails alike
            try:
                get_mixer(mixer).check_keys(overrides or {})
            except UnknownMixerError:
                pass  # hlnas.model.config's own check, if any, names it
            except ConfigError as e:
                self.fail(f"scale.model.{e}")
        from hlnas.data.tokenizer import vocab_mismatch

        why = vocab_mismatch(built["data"].tokenizer, built["model"].vocab_size, strict=False)
        if why:
            self.fail(f"scale: {why}")
        mixed = built["train"].recall_every and built["train"].recall_format == "mqar"
        if "mqar_mixed" in built["score"].objectives and not mixed:
            self.fail("scale.score.objectives has mqar_mixed, which scores the MQAR instances mixed into training: "
                      "set scale.train.recall_format: mqar and scale.train.recall_every >= 1")
        return built, sections["model"]

    def layers(self, value, model_cfg, model_section: dict) -> int:
        if value is None:
            return model_cfg.n_layers
        if not is_int(value) or value < 1:
            self.fail(f"layers={value!r} must be a positive integer (default: the preset's depth, {model_cfg.n_layers})")
        if model_section.get("n_layers", value) != value:
            self.fail(f"layers={value} disagrees with scale.model.n_layers={model_section['n_layers']}; give one of them")
        return value

    def mixers(self, value, hetero: bool) -> tuple[tuple[str, ...], bool]:
        allowed = [*linear_mixer_names(), *([] if hetero else [TRANSFORMER])]
        if value is None:
            self.fail(f"'mixers' is required; allowed: {', '.join(allowed)}, swa:<window>")
        names = [canonical(m) if isinstance(m, str) else m for m in self.items("mixers", value)]
        for i, m in enumerate(names):
            # a sliding-window layer may be the bounded side too: alone an all-SWA model (pure), or beside full attention
            if m not in allowed and not is_window_name(m):
                self.bad(f"mixers[{i}]", value[i], ", ".join(allowed) + ", swa:<window> (e.g. swa:1024)", allowed)
        if hetero and not names:
            self.fail(f"'mixers' must list the linear mixers each block may pick; allowed: {', '.join(allowed)}")
        # 'transformer' among the mixers is the same as transformer: true
        return self.unique("mixers", [m for m in names if m != TRANSFORMER]), TRANSFORMER in names

    def ratio(self, key: str, value, n_layers: int, pure: bool = True) -> str:
        try:
            r = parse_ratio(value) if value is not None else -1
        except LayoutError:
            r = -1
        if r == -1 or (r is None and not pure) or (r is not None and n_layers % r):
            allowed = _ratio_allowed(n_layers)
            self.bad(key, value, allowed if pure else allowed.replace("pure, ", ""))
        return format_ratio(r)

    def attention_kinds(self, value) -> tuple[str, ...]:
        allowed = "full, swa:<window> with an integer window >= 1 (e.g. swa:1024)"
        kinds = [FULL if k in (FULL, "attention") else k for k in self.items("attention", [FULL] if value is None else value)]
        for i, kind in enumerate(kinds):
            if kind != FULL and not is_window_name(kind):
                self.bad(f"attention[{i}]", value[i], allowed)
        return self.unique("attention", kinds) if kinds else self.fail(f"attention is empty; allowed: {allowed}")

    def placements(self, value, has_sets: bool) -> tuple[str, ...]:
        if value is None:
            return (EXPLICIT,) if has_sets else ("paper",)
        allowed = [*PLACEMENTS, *([EXPLICIT] if has_sets else [])]
        note = "" if has_sets else f" ('{EXPLICIT}' needs attention_sets)"
        out = [self.choice(f"placements[{i}]", p, allowed, note) for i, p in enumerate(self.items("placements", value))]
        if has_sets and EXPLICIT not in out:
            out.append(EXPLICIT)  # attention_sets are only reachable through the explicit placement
        if not out:
            self.fail(f"placements is empty; allowed: {', '.join(PLACEMENTS)}")
        return self.unique("placements", out)

    def attention_sets(self, value, n_layers: int) -> tuple[tuple[int, ...], ...]:
        out = []
        for i, s in enumerate(self.items("attention_sets", value)):
            key = f"attention_sets[{i}]"
            if isinstance(s, str):  # "0,12" as in the CLI's --placement
                s = [int(t) if t.strip().isdigit() else t for t in s.split(",")]
            idx = self.items(key, s)
            for j, x in enumerate(idx):
                if not is_int(x) or not 0 <= x < n_layers:
                    self.bad(f"{key}[{j}]", x, f"a layer index in [0, {n_layers}) (layers={n_layers})")
            self.unique(key, idx)
            if not idx or len(idx) == n_layers:
                self.fail(f"{key}={idx!r} must hold between 1 and {n_layers - 1} indices "
                          "(use ratio 'pure' for none, transformer: true for all)")
            out.append(tuple(sorted(idx)))
        return self.unique("attention_sets", out)

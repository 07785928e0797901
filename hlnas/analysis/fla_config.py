"""A layout at a scale as the ``config.json`` of fla's model family of its linear mixer (written against fla 0.6.0).

fla's linear families build hybrids from one config (``fla/models/configuration_utils.py``): every block holds the
family's mixer, except the layers an ``attn`` spec names (``layers``, ``num_heads``, ``num_kv_heads``,
``window_size``, ``rope_theta``); a list of specs gives full and sliding-window layers windows of their own. Their
blocks are hlnas's: pre-norm RMSNorm, mixer, RMSNorm, SwiGLU MLP of ``intermediate_size``, untied head by default.
An all-attention layout is fla's ``transformer`` family (one ``window_size`` for every layer).

The config carries every setting that shapes the model: widths, the mixer's heads, expansions, gates and short
convolutions as hlnas resolved them for the layout (:func:`hlnas.model.cost.layer_mixer`), the MLP width the cost model
solved (:func:`hlnas.model.cost.resolve_config`) and the attention layers' indices, heads and windows. What fla cannot
express is refused with one line naming what it lacks (:class:`ExportError`): linear mixers that differ per block,
a setting fla's family has no field for, Mamba-2 (fla's family has no MLP in its blocks and takes no ``attn``), and
RWKV-7 hybrids (fla 0.6.0's RWKV-7 block unpacks the value residual from every layer's output, which its attention
layer does not return: fla PR #145).

RWKV-7's family differs in its blocks: LayerNorms with a bias and RWKV-7's squared-ReLU channel mix with a token shift
of its own instead of the SwiGLU MLP. The export sizes that channel mix to the SwiGLU's parameters
(``intermediate_size`` = 1.5 x the MLP width: two matrices where SwiGLU has three) and :data:`RWKV7_BLOCK_NOTE` says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hlnas.errors import HlnasError
from hlnas.model.catalog import mixer_entry, split_layer
from hlnas.model.config import PRESETS, ModelConfig
from hlnas.model.cost import layer_mixer, resolve_config
from hlnas.model.layout import PLACEMENTS, Layout, attention_indices, build_layout

__all__ = ["ExportError", "Scale", "SCALES", "FLA_FAMILIES", "fla_config", "at_depth", "scaled_model",
           "RWKV7_BLOCK_NOTE", "FLA_VERSION"]

FLA_VERSION = "0.6.0"  # the fla release this mapping follows (hlnas pins it)
SCALES = ("paper-340m", "paper-1.3b")  # the paper's two scales (hlnas.model.config.PRESETS)
RWKV7_BLOCK_NOTE = ("fla's rwkv7 blocks hold LayerNorms with a bias and RWKV-7's squared-ReLU channel mix (its own "
                    "token shift: d_model more activations of decode state a layer) where hlnas's hold RMSNorm and "
                    "SwiGLU; intermediate_size is 1.5x hlnas's MLP width, so the parameters match")


class ExportError(HlnasError):
    """A layout or setting that fla's model families cannot express; the message names what is missing."""


# -- the scale ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class Scale:
    """Where to take a layout: a preset (``paper-340m``, ``paper-1.3b``: the paper's widths at its 24 layers) and/or
    explicit widths, each given value overriding the preset's. Without a preset, ``width``, ``heads`` and ``vocab`` are
    needed and ``depth`` defaults to the layout's. A layout re-lays at a new depth (:func:`at_depth`)."""

    preset: str | None = None
    width: int | None = None
    depth: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    vocab: int | None = None
    mlp_hidden: int | None = None

    def describe(self) -> str:
        given = [f"{k}={v}" for k, v in dataclasses.asdict(self).items() if v is not None and k != "preset"]
        return " ".join(filter(None, [self.preset, *given])) or "the layout's own"


def scaled_model(scale: Scale, trained: ModelConfig | None, n_layers: int) -> ModelConfig:
    """The model config at ``scale``: the preset's or the explicit widths, with what the candidate was trained with
    carried over (``mixer_hparams``: short convs, heads, gates as set for it; the attention window, rope_theta, tied
    embeddings, norm eps, init std). Width-derived defaults are recomputed at the new width."""
    if scale.preset is not None and scale.preset not in PRESETS:
        raise ExportError(f"scale '{scale.preset}' is not a preset; allowed: {', '.join(SCALES)} (or any of "
                          f"{', '.join(PRESETS)}), or explicit --width --heads --vocab")
    base = PRESETS.get(scale.preset) if scale.preset else None
    missing = [k for k in ("width", "heads", "vocab") if base is None and getattr(scale, k) is None]
    if missing:
        raise ExportError(f"an explicit scale needs {', '.join('--' + k for k in missing)} (or a preset: "
                          f"{', '.join(SCALES)})")
    depth = scale.depth or (base.n_layers if base is not None else n_layers)  # a preset's depth is the paper's 24
    pairs = (("d_model", scale.width), ("n_layers", depth), ("n_heads", scale.heads),
             ("vocab_size", scale.vocab), ("mlp_hidden", scale.mlp_hidden))
    changes: dict = {k: v for k, v in pairs if v is not None}
    if scale.heads is not None or scale.kv_heads is not None:  # new heads: the preset's kv heads no longer apply
        changes["n_kv_heads"] = scale.kv_heads
    if scale.mlp_hidden is not None:  # an explicit MLP width replaces the preset's parameter target
        changes["target_params"] = None
    if trained is not None:
        changes.update(mixer_hparams=dict(trained.mixer_hparams), window=trained.window, rope_theta=trained.rope_theta,
                       tie_embeddings=trained.tie_embeddings, norm_eps=trained.norm_eps, init_std=trained.init_std)
    return ModelConfig(**changes) if base is None else base.replace(**changes)


def at_depth(layout: Layout, n_layers: int) -> Layout:
    """``layout`` rebuilt at ``n_layers``: the same linear mixer, attention kind and ratio under the placement that
    made it; a layout of several mixers or attention kinds repeated whole, where the depth is a multiple of its own.
    Explicit indices that follow no placement only at their own depth."""
    if n_layers == layout.n_layers:
        return layout
    where = f"layout {layout} has {layout.n_layers} layers; depth {n_layers}"
    mixers, attn = layout.linear_mixers, layout.attention_layers
    kinds = {layout.mixers[i] for i in attn}
    if len(mixers) > 1 or len(kinds) > 1:
        if n_layers % layout.n_layers == 0:  # a pattern of several kinds repeats whole
            return Layout(layout.mixers * (n_layers // layout.n_layers))
        raise ExportError(f"{where} is no multiple of it, and a layout of several kinds re-lays only by repeating; "
                          "export it at its depth or a multiple")
    if not mixers:  # all attention
        return Layout((layout.mixers[0],) * n_layers)
    if not attn:
        return build_layout(mixers[0], "pure", n_layers)
    for placement in PLACEMENTS:
        for r in range(2, layout.n_layers + 1):
            try:
                match = attention_indices(layout.n_layers, r, placement) == attn
            except HlnasError:  # r does not divide the layout's depth
                continue
            if match:  # a ratio that does not divide the new depth says so (LayoutError)
                return build_layout(mixers[0], r, n_layers, placement, attention=kinds.pop())
    raise ExportError(f"{where}: its attention layers {list(attn)} follow no placement "
                      f"({', '.join(PLACEMENTS)}); export it at its depth")


# -- each linear mixer's family ------------------------------------------------------------------------
def _no(name: str, field: str, value, why: str) -> ExportError:
    return ExportError(f"{name}: {field}={value!r} has no field in fla's {FLA_FAMILIES[name][0]} config ({why})")


def _conv(name: str, hp) -> dict:
    if getattr(hp, "conv_bias", False):
        raise _no(name, "conv_bias", True, "its layer's short convolutions have no bias")
    return {"use_short_conv": hp.use_short_conv, "conv_size": hp.conv_size}


def _gated_deltanet(hp, d: int) -> dict:
    return {"num_heads": hp.num_heads, "head_dim": hp.head_dim, "expand_v": hp.expand_v, "use_gate": hp.use_gate,
            "output_gate_activation": hp.gate_act, "allow_neg_eigval": hp.allow_neg_eigval, **_conv("gated_deltanet", hp)}


def _kda(hp, d: int) -> dict:
    return {"num_heads": hp.num_heads, "head_dim": hp.head_dim, "expand_v": hp.expand_v,
            "allow_neg_eigval": hp.allow_neg_eigval, **_conv("kda", hp)}


def _deltanet(hp, d: int) -> dict:
    return {"num_heads": hp.num_heads, "expand_k": hp.expand_k, "expand_v": hp.expand_v, "use_beta": hp.use_beta,
            "use_gate": hp.use_gate, "allow_neg_eigval": hp.allow_neg_eigval, "qk_activation": hp.qk_activation,
            "qk_norm": hp.qk_norm, "use_output_norm": True, **_conv("deltanet", hp)}


def _gla(hp, d: int) -> dict:
    if hp.gate_fn != "swish":
        raise _no("gla", "gate_fn", hp.gate_fn, "fla's GLA block takes the output gate's activation from hidden_act, "
                                                "the MLP's too, which is swish")
    for field, fla_value in (("gate_logit_normalizer", 16), ("gate_low_rank_dim", 16)):
        if getattr(hp, field) != fla_value:
            raise _no("gla", field, getattr(hp, field), f"its layer is built with {fla_value}")
    return {"num_heads": hp.num_heads, "num_kv_heads": hp.num_kv_heads, "expand_k": hp.expand_k, "expand_v": hp.expand_v,
            "feature_map": hp.feature_map, "use_output_gate": hp.use_output_gate, "clamp_min": hp.clamp_min,
            **_conv("gla", hp)}


def _hgrn(hp, d: int) -> dict:
    return {"expand_ratio": hp.expand_ratio, "use_lower_bound": hp.use_lower_bound, **_conv("hgrn", hp)}


def _hgrn2(hp, d: int) -> dict:
    return {"num_heads": hp.num_heads or d // hp.expand_ratio, "expand_ratio": hp.expand_ratio,
            "use_lower_bound": hp.use_lower_bound, **_conv("hgrn2", hp)}


def _retnet(hp, d: int) -> dict:
    if hp.rope_theta != 10000.0:
        raise _no("retnet", "rope_theta", hp.rope_theta, "fla's MultiScaleRetention rotates with base 10000")
    return {"num_heads": hp.num_heads, "expand_k": hp.expand_k, "expand_v": hp.expand_v}


def _rwkv7(hp, d: int) -> dict:
    return {"head_dim": hp.head_dim, "num_heads": d // hp.head_dim, "decay_low_rank_dim": hp.decay_low_rank_dim,
            "gate_low_rank_dim": hp.gate_low_rank_dim, "a_low_rank_dim": hp.a_low_rank_dim,
            "v_low_rank_dim": hp.v_low_rank_dim, "norm_first": True, "norm_bias": True, "hidden_act": "sqrelu"}


#: hlnas mixer -> (fla model_type, its mixer's config fields from the hlnas hyper-parameters and d_model)
FLA_FAMILIES: dict[str, tuple[str, Callable]] = {
    "gated_deltanet": ("gated_deltanet", _gated_deltanet), "kda": ("kda", _kda), "deltanet": ("delta_net", _deltanet),
    "gla": ("gla", _gla), "hgrn": ("hgrn", _hgrn), "hgrn2": ("hgrn2", _hgrn2), "retnet": ("retnet", _retnet),
    "rwkv7": ("rwkv7", _rwkv7),
}
#: hlnas mixers with an fla family that cannot hold them, and what is missing
_REFUSED = {"mamba2": "fla's mamba2 family builds blocks of a norm and the mixer alone (no MLP, which hlnas's blocks "
                      "have) and takes no attn layers"}


def _attention_specs(layout: Layout, cfg: ModelConfig) -> list[dict]:
    """One fla ``attn`` spec per attention kind (full, each window), in layer order of first appearance."""
    specs: dict[str, dict] = {}
    for i, name in enumerate(layout.mixers):
        if not mixer_entry(name).holds_kv:
            continue
        _, hp = layer_mixer(name, cfg)
        if hp.input_conv:
            raise ExportError(f"attention input_conv={hp.input_conv}: fla's attention layer has no input convolution")
        spec = specs.setdefault(name, {"layers": [], "num_heads": hp.num_heads, "num_kv_heads": hp.num_kv_heads,
                                       "qkv_bias": False, "window_size": hp.window, "rope_theta": hp.rope_theta})
        spec["layers"].append(i)
    return list(specs.values())


def fla_config(layout: Layout, cfg: ModelConfig, *, context: int = 4096) -> dict:
    """The fla ``config.json`` (a plain dict) that builds ``layout`` under ``cfg`` as hlnas's cost model counts it,
    or :class:`ExportError` naming what fla lacks. ``context``: ``max_position_embeddings``."""
    cfg = resolve_config(layout, cfg)  # the MLP width the cost model solved, the layout's depth
    d = cfg.d_model
    linear = [m for m in layout.mixers if not mixer_entry(m).holds_kv]
    kinds = list(dict.fromkeys(split_layer(m)[0] for m in linear))
    if len(kinds) > 1:
        raise ExportError(f"layout {layout} has linear mixers that differ per block ({', '.join(kinds)}); each fla model "
                          "family builds one linear mixer for every non-attention layer")
    common = {"hidden_size": d, "num_hidden_layers": layout.n_layers, "vocab_size": cfg.vocab_size,
              "intermediate_size": cfg.mlp_hidden, "hidden_act": "swish", "norm_eps": cfg.norm_eps,
              "tie_word_embeddings": cfg.tie_embeddings, "initializer_range": cfg.init_std,
              "max_position_embeddings": context, "use_cache": True}
    specs = _attention_specs(layout, cfg)
    if not kinds:  # attention only: fla's transformer family, one window for every layer
        if len(specs) > 1:
            raise ExportError(f"layout {layout} mixes attention kinds ({', '.join(dict.fromkeys(layout.mixers))}) with no "
                              "linear mixer; fla's transformer family takes one window_size for every layer")
        s = specs[0]
        return {"model_type": "transformer", **common, "num_heads": s["num_heads"], "num_kv_heads": s["num_kv_heads"],
                "qkv_bias": False, "qk_norm": False, "window_size": s["window_size"], "rope_theta": s["rope_theta"]}
    name = kinds[0]
    if name in _REFUSED:
        raise ExportError(f"{name}: {_REFUSED[name]}")
    if name == "rwkv7" and specs:
        raise ExportError("rwkv7 hybrids: fla 0.6.0's RWKV-7 block unpacks the value residual from every layer's output "
                          "and its attention layer returns none (fla PR #145); only pure rwkv7 layouts export")
    model_type, fields = FLA_FAMILIES[name]
    _, hp = layer_mixer(name, cfg)
    if getattr(hp, "norm_eps", cfg.norm_eps) != cfg.norm_eps:
        raise _no(name, "norm_eps", hp.norm_eps, f"fla gives the mixer the blocks' norm_eps, {cfg.norm_eps}")
    out = {"model_type": model_type, **common, **fields(hp, d)}
    if name == "rwkv7":  # two matrices of 1.5x the width hold SwiGLU's three
        out["intermediate_size"] = round(1.5 * cfg.mlp_hidden)
    out["attn"] = None if not specs else specs[0] if len(specs) == 1 else specs
    return out


"""Exact cost of a layout, from the mixers' formulas alone (no weights are built).

* ``params``: every parameter of the model (embedding, blocks, norms, head).
* ``kv_cache_bytes``: attention layers, 2 x kv_heads x head_dim x L x B x itemsize (sliding windows capped: a
  ``swa:W`` layer, or every attention layer under ``ModelConfig.window``, holds min(L, W) tokens).
* ``state_bytes``: everything the linear layers hold while decoding (recurrent state, short-conv
  windows); constant in L.
* ``inference_bytes``: weights + KV cache + state at the given dtype.
* ``flops_per_token``: forward FLOPs per token at context L: token mixers as in the paper's
  Table 4 plus their projections, the MLPs and the LM head (2 FLOPs per multiply-add).

``tests/test_budget.py`` checks params against ``sum(p.numel())`` and the cache bytes against the
``nbytes`` of a real cache after decoding L tokens, for every mixer and for hybrids.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from hlnas.model.catalog import MIXERS, mixer_entry, split_layer
from hlnas.model.config import ModelConfig
from hlnas.errors import ConfigError
from hlnas.model.layout import Layout
from hlnas.model.nn import SwiGLU

__all__ = ["LayoutCost", "layout_cost", "layout_metrics", "resolve_config", "parse_dtype", "DTYPES", "ISO_TOLERANCE",
           "layer_mixer"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype '{dtype}' is not allowed; allowed: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def layer_mixer(name: str, cfg: ModelConfig):
    """(mixer class, hyper-parameters) of a layer named ``name`` under ``cfg`` (``"swa:1024"``: the window from the name)."""
    base, window = split_layer(name)
    cls = MIXERS.get(base)
    return cls, cls.layer_hparams(cfg, window)


def _mixer_params(layout: Layout, cfg: ModelConfig) -> int:
    total = 0
    for i, name in enumerate(layout.mixers):
        cls, hp = layer_mixer(name, cfg)
        total += cls.layer_param_count(cfg.d_model, hp, i)
    return total


def _params(layout: Layout, cfg: ModelConfig, mlp_hidden: int) -> int:
    d, n = cfg.d_model, layout.n_layers
    embed = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
    norms = (2 * n + 1) * d
    return embed + norms + _mixer_params(layout, cfg) + n * SwiGLU.param_count(d, mlp_hidden)


#: how far from ``target_params`` a solved layout may land (the paper compared models of matched size)
ISO_TOLERANCE = 0.02
# MLP width multiples tried in turn, coarsest first: 128 keeps fla's tile-friendly widths where it lands close; a small
# proxy's 24 layers x 3 x d params per width unit make 128 too coarse (up to 5% off at d=256)
_WIDTH_MULTIPLES = (128, 64, 32, 16, 8, 1)


def resolve_config(layout: Layout, cfg: ModelConfig, multiple_of: int = 128) -> ModelConfig:
    """Fix the MLP width: ``cfg.mlp_hidden``, else solved from ``cfg.target_params``, else fla's rule.

    The solve takes the coarsest width multiple (``multiple_of``, then 64, 32, ... 1) whose nearest width puts the
    whole model within a quarter of :data:`ISO_TOLERANCE` of the target; failing that, the closest width, which must
    be within :data:`ISO_TOLERANCE`. So every layout of a space has the space's size, whatever its mixers."""
    # n_layers follows the layout: mixers that spread settings over depth (HGRN's forget-gate lower bound) read it.
    cfg = cfg.replace(n_layers=layout.n_layers)
    if cfg.mlp_hidden is not None or cfg.target_params is None:
        return cfg.replace(mlp_hidden=cfg.mlp_width)
    target = cfg.target_params
    fixed = _params(layout, cfg, 0)
    per_unit = layout.n_layers * SwiGLU.param_count(cfg.d_model, 1)
    if target - fixed < per_unit:
        raise ConfigError(
            f"target_params={target:,} is below what layout {layout} needs without an MLP "
            f"({fixed:,}); raise target_params or set mlp_hidden"
        )
    best, best_off = 0, float("inf")
    for m in (multiple_of, *(k for k in _WIDTH_MULTIPLES if k < multiple_of)):
        width = max(1, round((target - fixed) / per_unit / m)) * m
        off = abs(fixed + width * per_unit - target) / target
        if off < best_off:
            best, best_off = width, off
        if off <= ISO_TOLERANCE / 4:
            break
    if best_off > ISO_TOLERANCE:
        raise ConfigError(f"no MLP width puts layout {layout} within {ISO_TOLERANCE:.0%} of target_params={target:,} "
                          f"(each width unit adds {per_unit:,} params); raise target_params or set mlp_hidden")
    return cfg.replace(mlp_hidden=best)


@dataclass(frozen=True)
class LayoutCost:
    layout: str
    context: int
    batch: int
    dtype: str
    params: int
    mlp_hidden: int
    kv_cache_bytes: int
    state_bytes: int
    inference_bytes: int
    flops_per_token: int
    attention_layers: tuple[int, ...]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["attention_layers"] = list(self.attention_layers)
        return d


def layout_cost(
    layout: Layout, cfg: ModelConfig, *, context: int = 4096, batch: int = 1, dtype: str | torch.dtype = "bf16"
) -> LayoutCost:
    if context < 1 or batch < 1:
        raise ConfigError(f"context and batch must be >= 1, got context={context}, batch={batch}")
    dt = parse_dtype(dtype)
    cfg = resolve_config(layout, cfg)
    kv = state = 0
    flops = 0
    d = cfg.d_model
    for name in layout.mixers:
        cls, hp = layer_mixer(name, cfg)
        held = cls.state_bytes(d, hp, batch=batch, seq_len=context, dtype=dt)
        if mixer_entry(name).holds_kv:  # full attention, or a window's KV (capped at its window)
            kv += held
        else:
            state += held
        flops += cls.flops_per_token(d, hp, context)
    flops += layout.n_layers * 2 * SwiGLU.param_count(d, cfg.mlp_hidden) + 2 * d * cfg.vocab_size
    params = _params(layout, cfg, cfg.mlp_hidden)
    itemsize = torch.empty((), dtype=dt).element_size()
    name = next(k for k, v in DTYPES.items() if v == dt)
    return LayoutCost(
        layout=str(layout),
        context=context,
        batch=batch,
        dtype=name,
        params=params,
        mlp_hidden=cfg.mlp_hidden,
        kv_cache_bytes=kv,
        state_bytes=state,
        inference_bytes=params * itemsize + kv + state,
        flops_per_token=flops,
        attention_layers=layout.attention_layers,
    )


def layout_metrics(layout_str: str, model: ModelConfig, kv_context: int, placement: str | None = None) -> dict:
    """What the cost model says about a layout (no weights built): the attributes every trial records."""
    layout = Layout.parse(layout_str)
    cost = layout_cost(layout, model, context=kv_context, batch=1, dtype="bf16")
    return {
        "layout": str(layout),
        "mixers": list(layout.mixers),
        "attention_layers": list(layout.attention_layers),
        "ratio": layout.ratio,
        "linear_mixers": list(layout.linear_mixers),
        "placement": placement,
        "params": cost.params,
        # the iso-parameter solve's goal and the width it chose (None when the space sets no target)
        "target_params": model.target_params,
        "mlp_hidden": cost.mlp_hidden,
        "kv_cache_bytes": cost.kv_cache_bytes,
        "kv_context": kv_context,
        "state_bytes": cost.state_bytes,
        "inference_bytes": cost.inference_bytes,
        "flops_per_token": cost.flops_per_token,
    }

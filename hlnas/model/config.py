"""Model configuration and named presets.

A :class:`ModelConfig` fixes the widths shared by every layer; the layout fixes which mixer
each layer has. Per-mixer settings (heads, expansions, gates) default to flash-linear-attention's
layer of the same name and can be overridden through ``mixer_hparams``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hlnas.errors import ConfigError, did_you_mean

__all__ = ["ModelConfig", "PRESETS", "preset", "swiglu_hidden", "RESIDUAL_INITS"]

#: ModelConfig.residual_init values
RESIDUAL_INITS = ("fla", "zero")


def swiglu_hidden(d_model: int, hidden_ratio: int = 4, multiple_of: int = 256) -> int:
    """fla's MLP width: 2/3 * ratio * d_model rounded up to a multiple of 256 (1024 -> 2816)."""
    h = int(d_model * hidden_ratio * 2 / 3)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    d_model: int
    n_layers: int = 24  # default depth of layouts built for this config
    vocab_size: int
    n_heads: int  # attention heads
    n_kv_heads: int | None = None  # GQA; None = n_heads
    window: int | None = None  # sliding-window attention; None = full
    rope_theta: float = 10000.0
    mlp_hidden: int | None = None  # None = fla's rule (swiglu_hidden), or solved from target_params
    # Iso-parameter comparison: when set (and mlp_hidden is None) the SwiGLU width of each layout
    # is solved so the whole model lands closest to this count (hlnas.model.cost.resolve_config).
    target_params: int | None = None
    tie_embeddings: bool = False  # the paper's checkpoints are untied
    norm_eps: float = 1e-6
    init_std: float = 0.02
    # how the residual branches' output projections (each mixer's output projection, each MLP's down_proj)
    # start: "fla" (normal, init_std, as every other weight: fla's, and hlnas's default) or "zero" (each block
    # starts as the identity, SkipInit/ReZero). A 24-layer all-attention recall model learned MQAR only under
    # "zero" (reference/deep-recall-control.md, section 1)
    residual_init: str = "fla"
    mixer_hparams: dict[str, dict] = field(default_factory=dict)  # {"gla": {"num_heads": 4}, ...}

    def __post_init__(self) -> None:
        for name in ("d_model", "vocab_size", "n_heads", "n_layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        kv = self.kv_heads
        if kv < 1 or self.n_heads % kv:
            raise ConfigError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={kv}")
        if self.target_params is not None and self.target_params < 1:
            raise ConfigError(f"target_params must be >= 1 or None, got {self.target_params}")
        if self.residual_init not in RESIDUAL_INITS:
            raise ConfigError(f"residual_init={self.residual_init!r} is not allowed; allowed: {', '.join(RESIDUAL_INITS)} "
                              "(zero: every block's residual branch starts at exactly 0)")
        if self.window is not None and self.window < 1:
            raise ConfigError(f"window must be >= 1 or None, got {self.window}")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def mlp_width(self) -> int:
        return self.mlp_hidden or swiglu_hidden(self.d_model)

    def to_dict(self) -> dict:
        from hlnas.overrides import config_to_dict

        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        from hlnas.overrides import config_from_dict

        return config_from_dict(cls, data, "model config")

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    # The paper's two scales (arXiv 2507.06457 section 3.4; shapes of the m-a-p checkpoints, paper_grid.md section 2).
    # Mixers keep fla's shapes; the MLP width is solved per layout so every candidate has the class's
    # parameter count (the released checkpoints range 0.3B-0.4B at "340M" per their HF size badges).
    "paper-340m": ModelConfig(d_model=1024, vocab_size=32000, n_heads=16, target_params=340_000_000),
    "paper-1.3b": ModelConfig(d_model=2048, vocab_size=32000, n_heads=32, target_params=1_300_000_000),
    # Proxies: 24 layers so every paper ratio exists, byte-level vocabulary.
    "proxy-tiny": ModelConfig(d_model=64, vocab_size=256, n_heads=4, mlp_hidden=128),  # CPU tests, seconds
    "proxy-small": ModelConfig(d_model=128, vocab_size=256, n_heads=4, mlp_hidden=256),  # CPU searches, minutes
    "proxy-gpu": ModelConfig(d_model=512, vocab_size=256, n_heads=8),  # quick GPU runs
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}'.{did_you_mean(name, PRESETS)} Available: {', '.join(PRESETS)}")
    return PRESETS[name]

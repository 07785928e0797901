"""The contract every token mixer implements.

A mixer maps ``x: [B, T, d_model]`` to ``[B, T, d_model]``. It counts its own cost from its
hyper-parameters alone (no weights built): parameters, bytes held in the decode cache after
``seq_len`` tokens, and forward FLOPs per token. ``tests/mixers/test_contract.py`` checks each
count against the real module and the real cache, for every registered mixer.

Decode cache: ``forward(x, cache)`` with a dict reads and updates this layer's state in place,
so calling it on a prefix and then token by token gives the outputs of one parallel call.
Integer entries (e.g. ``"pos"``) are bookkeeping; only tensors count as cache bytes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from hlnas.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from hlnas.model.config import ModelConfig

__all__ = ["Mixer", "STATE_DTYPE", "cache_nbytes"]

#: Recurrent (matrix-valued) states are kept in float32 whatever the activation dtype: fla does
#: the same, since a bf16 state drifts over thousands of decay-and-add steps.
STATE_DTYPE = torch.float32


def cache_nbytes(cache: dict[str, Any]) -> int:
    return sum(v.numel() * v.element_size() for v in cache.values() if isinstance(v, Tensor))


class Mixer(nn.Module):
    #: short registry name (hlnas.model.catalog)
    name: ClassVar[str]
    #: the nn.Parameters this mixer uses bare in its math (not inside a Linear, norm or convolution), each broadcast
    #: against ``[B, T, *shape]`` activations
    bare_parameters: ClassVar[tuple[str, ...]] = ()

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        pass

    # -- hyper-parameters ------------------------------------------------------------------
    @classmethod
    def defaults(cls, cfg: "ModelConfig") -> dict:
        """Width-dependent defaults (e.g. attention heads from the model config)."""
        return {}

    @classmethod
    def check_keys(cls, overrides) -> None:
        """Refuse a key of ``mixer_hparams[name]`` that is no hyper-parameter of this mixer (a space checks its file
        with this before a search writes anything)."""
        fields = {f.name for f in dataclasses.fields(cls.Hparams)}
        for key in overrides:
            if key not in fields:
                raise ConfigError(
                    f"mixer_hparams['{cls.name}']: unknown key '{key}'.{did_you_mean(key, fields)} "
                    f"Allowed: {', '.join(sorted(fields))}"
                )

    @classmethod
    def hparams(cls, cfg: "ModelConfig") -> "Mixer.Hparams":
        """This mixer's hyper-parameters under ``cfg``: defaults, then ``cfg.mixer_hparams[name]``."""
        overrides = dict(cfg.mixer_hparams.get(cls.name, {}))
        cls.check_keys(overrides)
        hp = cls.Hparams(**{**cls.defaults(cfg), **overrides})
        cls.validate(cfg.d_model, hp)
        return hp

    @classmethod
    def layer_hparams(cls, cfg: "ModelConfig", window: int | None = None) -> "Mixer.Hparams":
        """The hyper-parameters of one layer of this kind: :meth:`hparams`, and for a windowed kind (a layer named
        ``"swa:1024"``) its window. Kinds without a window take none."""
        if window is not None:
            raise ConfigError(f"{cls.name}: layers of this mixer take no window (got {window})")
        return cls.hparams(cfg)

    @classmethod
    def layer_param_count(cls, d_model: int, hp: "Mixer.Hparams", layer_idx: int) -> int:
        """Parameters of the layer at ``layer_idx``: :meth:`param_count` unless the kind's layers differ by depth."""
        return cls.param_count(d_model, hp)

    @classmethod
    def validate(cls, d_model: int, hp: "Mixer.Hparams") -> None:
        """Raise ConfigError naming the bad value; called before weights are built."""

    # -- cost model (no weights) ------------------------------------------------------------
    @classmethod
    def param_count(cls, d_model: int, hp: "Mixer.Hparams") -> int:
        raise NotImplementedError

    @classmethod
    def state_bytes(cls, d_model: int, hp: "Mixer.Hparams", *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        """Bytes held in the decode cache after ``seq_len`` tokens with activations in ``dtype``."""
        raise NotImplementedError

    @classmethod
    def flops_per_token(cls, d_model: int, hp: "Mixer.Hparams", seq_len: int) -> int:
        """Forward FLOPs per token: projections (2 per multiply-add) plus the token-mixing op."""
        raise NotImplementedError

    # -- module --------------------------------------------------------------------------
    def __init__(self, d_model: int, hp: "Mixer.Hparams", layer_idx: int):
        super().__init__()
        self.d_model, self.hp, self.layer_idx = d_model, hp, layer_idx

    def residual_out(self) -> nn.Linear:
        """The projection that writes this mixer's output into the residual stream (what
        ``ModelConfig.residual_init='zero'`` zeroes)."""
        return self.o_proj

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

"""Gated Linear Attention (Yang et al. 2023), shaped as fla's ``GatedLinearAttention`` layer.

q/k projections to ``expand_k * d_model`` (0.5), v to ``expand_v * d_model`` (1.0), 4 heads; a low-rank
(16) per-key-channel forget gate ``g = logsigmoid(gk_proj(x)) / 16``; the GLA recurrence
(``hlnas.model.kernels.gla``); per-head RMSNorm gated by ``swish(g_proj(x))``; o_proj. No short convolution
by default (fla's default); with it, q, k and v each get a SiLU causal conv as in fla.

Decode cache: ``"state"`` ``[B, H, K, V]`` (float32; float64 for float64 inputs), and with short convs
``"conv_q"``, ``"conv_k"``, ``"conv_v"`` in the activation dtype.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.gla import gla
from hlnas.model.mixers.base import STATE_DTYPE, Mixer
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import GatedRMSNorm, RMSNorm, fused_linear

_FEATURE_MAPS = {None: None, "swish": F.silu, "relu": F.relu, "sigmoid": torch.sigmoid}


class GLA(Mixer):
    name = "gla"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        num_heads: int = 4
        num_kv_heads: int | None = None  # MQA/GQA on k, v and the gate; None = num_heads
        expand_k: float = 0.5
        expand_v: float = 1.0
        feature_map: str | None = None  # applied to q and k: None | swish | relu | sigmoid
        use_short_conv: bool = False
        conv_size: int = 4
        conv_bias: bool = False
        use_output_gate: bool = True
        gate_fn: str = "swish"  # output gate activation: swish | sigmoid
        gate_logit_normalizer: float = 16.0
        gate_low_rank_dim: int = 16
        clamp_min: float | None = None  # lower clamp on the log forget gate
        norm_eps: float = 1e-6

    @classmethod
    def defaults(cls, cfg) -> dict:
        # fla's GLA layer is width-independent (4 heads fit d_model=64: head dims 8 and 16)
        return dict(norm_eps=cfg.norm_eps)

    @staticmethod
    def _dims(d_model: int, hp: Hparams) -> dict:
        key_dim, value_dim = round(d_model * hp.expand_k), round(d_model * hp.expand_v)
        groups = hp.num_heads // (hp.num_kv_heads or hp.num_heads)
        return dict(key=key_dim, value=value_dim, key_kv=key_dim // groups, value_kv=value_dim // groups,
                    head_k=key_dim // hp.num_heads, head_v=value_dim // hp.num_heads, groups=groups)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        kv = hp.num_kv_heads or hp.num_heads
        if hp.num_heads < 1 or kv < 1 or hp.num_heads % kv:
            raise ConfigError(f"gla: num_heads={hp.num_heads} must be a positive multiple of num_kv_heads={kv}")
        for name, ratio in (("expand_k", hp.expand_k), ("expand_v", hp.expand_v)):
            width = d_model * ratio
            if not math.isclose(width, round(width)) or round(width) < 1 or round(width) % hp.num_heads:
                raise ConfigError(
                    f"gla: d_model * {name} = {d_model} * {ratio} = {width:g} must be a positive integer "
                    f"divisible by num_heads={hp.num_heads}"
                )
        if hp.feature_map not in _FEATURE_MAPS:
            raise ConfigError(f"gla: feature_map={hp.feature_map!r}; allowed: None, swish, relu, sigmoid")
        if hp.gate_fn not in ("swish", "sigmoid"):
            raise ConfigError(f"gla: gate_fn={hp.gate_fn!r}; allowed: swish, sigmoid")
        if hp.gate_logit_normalizer <= 0 or hp.gate_low_rank_dim < 1:
            raise ConfigError(
                f"gla: gate_logit_normalizer={hp.gate_logit_normalizer} must be > 0 and "
                f"gate_low_rank_dim={hp.gate_low_rank_dim} >= 1"
            )
        if hp.use_short_conv and hp.conv_size < 2:
            raise ConfigError(f"gla: conv_size={hp.conv_size} must be >= 2 with use_short_conv")

    @classmethod
    def _conv_channels(cls, d_model: int, hp: Hparams) -> tuple[int, ...]:
        d = cls._dims(d_model, hp)
        return (d["key"], d["key_kv"], d["value_kv"]) if hp.use_short_conv else ()

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        d = cls._dims(d_model, hp)
        n = d_model * (d["key"] + d["key_kv"] + d["value_kv"])  # q, k, v
        n += d_model * d["value"] if hp.use_output_gate else 0  # g_proj
        n += d_model * hp.gate_low_rank_dim + (hp.gate_low_rank_dim + 1) * d["key_kv"]  # gk_proj (2nd has bias)
        n += sum(c * (hp.conv_size + hp.conv_bias) for c in cls._conv_channels(d_model, hp))
        return n + d["head_v"] + d["value"] * d_model  # norm weight, o_proj

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        d = cls._dims(d_model, hp)
        state = batch * hp.num_heads * d["head_k"] * d["head_v"] * STATE_DTYPE.itemsize
        itemsize = torch.empty((), dtype=dtype).element_size()
        return state + sum(ShortConvolution.state_bytes(c, hp.conv_size, batch, itemsize)
                           for c in cls._conv_channels(d_model, hp))

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        d = cls._dims(d_model, hp)
        proj = cls.param_count(d_model, hp) - d["head_v"] - d["key_kv"]  # every weight is one multiply-add
        proj -= sum(c * hp.conv_bias for c in cls._conv_channels(d_model, hp))
        # the paper's Table 4 gives 7 d^2 / H for GLA, i.e. 7 H (d/H)^2 = 7 H * head_k * head_v here
        return 2 * proj + 7 * hp.num_heads * d["head_k"] * d["head_v"]

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        d = self._dims(d_model, hp)
        self.dims = d
        self.q_proj = nn.Linear(d_model, d["key"], bias=False)
        self.k_proj = nn.Linear(d_model, d["key_kv"], bias=False)
        self.v_proj = nn.Linear(d_model, d["value_kv"], bias=False)
        self.g_proj = nn.Linear(d_model, d["value"], bias=False) if hp.use_output_gate else None
        if hp.use_short_conv:
            conv = lambda c: ShortConvolution(c, hp.conv_size, activation="silu", bias=hp.conv_bias)  # noqa: E731
            self.q_conv, self.k_conv, self.v_conv = (conv(c) for c in self._conv_channels(d_model, hp))
        self.gk_proj = nn.Sequential(nn.Linear(d_model, hp.gate_low_rank_dim, bias=False),
                                     nn.Linear(hp.gate_low_rank_dim, d["key_kv"], bias=True))
        if hp.use_output_gate:
            self.g_norm = GatedRMSNorm(d["head_v"], hp.norm_eps, act=hp.gate_fn)
        else:
            self.g_norm = RMSNorm(d["head_v"], hp.norm_eps)
        self.o_proj = nn.Linear(d["value"], d_model, bias=False)

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; ``cache`` is read and updated in place."""
        B, T, _ = x.shape
        hp, d = self.hp, self.dims
        q, k, v = fused_linear(x, self.q_proj, self.k_proj, self.v_proj)
        if hp.use_short_conv:
            q = self.q_conv(q, cache, key="conv_q")
            k = self.k_conv(k, cache, key="conv_k")
            v = self.v_conv(v, cache, key="conv_v")
        gk = self.gk_proj(x)
        H, Hkv = hp.num_heads, hp.num_heads // d["groups"]
        q = q.view(B, T, H, d["head_k"])
        k, gk = k.view(B, T, Hkv, d["head_k"]), gk.view(B, T, Hkv, d["head_k"])
        v = v.view(B, T, Hkv, d["head_v"])
        if d["groups"] > 1:  # each kv head serves `groups` consecutive query heads, as fla's repeat
            k, gk, v = (t.repeat_interleave(d["groups"], dim=2) for t in (k, gk, v))
        # the log-gate stays in float32 (float64 in tests): fla's chunk_gla accepts a float32 g as is
        g = F.logsigmoid(gk.to(torch.promote_types(gk.dtype, torch.float32))) / hp.gate_logit_normalizer
        if hp.clamp_min is not None:
            g = g.clamp(min=hp.clamp_min)
        if hp.feature_map is not None:
            q, k = _FEATURE_MAPS[hp.feature_map](q), _FEATURE_MAPS[hp.feature_map](k)
        state = cache.get("state") if cache is not None else None
        o, state = gla(q, k, v, g, initial_state=state, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = state.detach()
        if hp.use_output_gate:
            o = self.g_norm(o, self.g_proj(x).view(B, T, H, d["head_v"]))
        else:
            o = self.g_norm(o)
        return self.o_proj(o.reshape(B, T, d["value"]))

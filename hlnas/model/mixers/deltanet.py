"""DeltaNet (arXiv 2406.06484), shaped like fla's ``fla/layers/delta_net.py``.

x -> q, k, v projections -> short causal convolutions (kernel 4; SiLU on q, k when qk_activation is
silu, always on v) -> heads -> q, k l2-normalized -> beta = sigmoid(b_proj(x)) -> delta rule ->
per-head RMSNorm (or gated RMSNorm with ``use_gate``) -> o_proj.

Decode cache: ``"state"`` ``[B, H, dk, dv]`` (float32; float64 for a float64 module) and the three
conv states ``"conv_q"``, ``"conv_k"``, ``"conv_v"`` ``[B, conv_size-1, C]`` in the activation dtype.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.delta_rule import delta_rule
from hlnas.model.kernels.l2norm import l2norm
from hlnas.model.mixers.base import STATE_DTYPE, Mixer
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import GatedRMSNorm, RMSNorm, fused_linear

_QK_ACTIVATIONS = ("silu", "relu", "elu", "identity")
_QK_NORMS = ("l2", "sum")


def state_itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of a recurrent state: STATE_DTYPE, but float64 modules keep float64 states."""
    return 8 if dtype == torch.float64 else torch.empty((), dtype=STATE_DTYPE).element_size()


def delta_state_bytes(batch: int, key_dim: int, value_dim: int, head_v: int, hp, dtype: torch.dtype) -> int:
    """A delta-rule layer's decode state (DeltaNet, Gated DeltaNet): H x dk x dv per sequence at
    :func:`state_itemsize`, and with short convolutions (``hp.use_short_conv``) their windows over q, k and v at the
    activation ``dtype``."""
    state = batch * key_dim * head_v * state_itemsize(dtype)  # H * dk * dv per sequence
    if hp.use_short_conv:
        itemsize = torch.empty((), dtype=dtype).element_size()
        state += ShortConvolution.state_bytes(2 * key_dim + value_dim, hp.conv_size, batch, itemsize)
    return state


def inverse_softplus_dt(n: int) -> Tensor:
    """``n`` values of ``softplus^-1(dt)`` with dt log-uniform in [1e-3, 1e-1] (floored at 1e-4): Mamba's ``dt_bias``
    init, which fla's Gated DeltaNet and KDA use."""
    dt = torch.exp(torch.rand(n) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
    return dt + torch.log(-torch.expm1(-dt))


class DeltaInputs:
    """The input side the delta-rule mixers share (DeltaNet, Gated DeltaNet, KDA, each as its fla layer): q, k, v
    projections; short causal convolutions over them (SiLU on v, and on q and k under the silu activation) or the
    activations alone; heads; q and k normalised; beta = sigmoid(b_proj(x)), doubled with ``allow_neg_eigval``. The
    mixer sets ``head_k_dim``, ``head_v_dim`` and ``b_proj``; hparams without ``qk_activation`` / ``qk_norm`` take
    silu / l2. Modules are made in the order the caller asks, so each mixer keeps its seeded initialisation."""

    def _make_qkv_proj(self, d_model: int, key_dim: int, value_dim: int) -> None:
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)

    def _make_qkv_convs(self, key_dim: int, value_dim: int) -> None:
        hp = self.hp
        qk_act = "silu" if getattr(hp, "qk_activation", "silu") == "silu" else None
        self.q_conv1d = ShortConvolution(key_dim, hp.conv_size, activation=qk_act, bias=hp.conv_bias)
        self.k_conv1d = ShortConvolution(key_dim, hp.conv_size, activation=qk_act, bias=hp.conv_bias)
        self.v_conv1d = ShortConvolution(value_dim, hp.conv_size, activation="silu", bias=hp.conv_bias)

    def _qkv(self, x: Tensor, cache: dict | None) -> tuple[Tensor, Tensor, Tensor]:
        """x ``[B, T, d_model]`` -> q, k ``[B, T, H, head_k_dim]`` (normalised), v ``[B, T, H, head_v_dim]``."""
        hp = self.hp
        act, norm = getattr(hp, "qk_activation", "silu"), getattr(hp, "qk_norm", "l2")
        q, k, v = fused_linear(x, self.q_proj, self.k_proj, self.v_proj)
        if hp.use_short_conv:
            q = self.q_conv1d(q, cache, key="conv_q")
            k = self.k_conv1d(k, cache, key="conv_k")
            v = self.v_conv1d(v, cache, key="conv_v")
        else:
            q, k = (F.silu(q), F.silu(k)) if act == "silu" else (q, k)
            v = F.silu(v)
        B, T, _ = x.shape
        q, k = q.view(B, T, hp.num_heads, self.head_k_dim), k.view(B, T, hp.num_heads, self.head_k_dim)
        if act == "relu":
            q, k = q.relu(), k.relu()
        elif act == "elu":
            q, k = F.elu(q) + 1, F.elu(k) + 1
        if norm == "l2":
            q, k = l2norm(q), l2norm(k)
        else:  # sum-normalize: keys on the simplex
            q, k = F.normalize(q, p=1, dim=-1, eps=1e-6), F.normalize(k, p=1, dim=-1, eps=1e-6)
        return q, k, v.view(B, T, hp.num_heads, self.head_v_dim)

    def _beta(self, x: Tensor) -> Tensor:
        """``[B, T, H]`` writing strengths in (0, 1), or (0, 2) with ``allow_neg_eigval``."""
        beta = torch.sigmoid(self.b_proj(x))
        return beta * 2 if self.hp.allow_neg_eigval else beta


class HeadDimDelta(DeltaInputs):
    """Widths set per head (``num_heads``, ``head_dim``, ``expand_v``), as fla's Gated DeltaNet and KDA take them, and
    what follows from them alone: the widths, their checks, the short convolutions' parameters and the decode state."""

    @staticmethod
    def _dims(hp) -> tuple[int, int, int]:
        """(key_dim, value_dim, head_v_dim)."""
        head_v = round(hp.head_dim * hp.expand_v)
        return hp.num_heads * hp.head_dim, hp.num_heads * head_v, head_v

    @classmethod
    def validate(cls, d_model: int, hp) -> None:
        if hp.num_heads < 1 or hp.head_dim < 1:
            raise ConfigError(f"{cls.name}: num_heads={hp.num_heads} and head_dim={hp.head_dim} must be >= 1")
        if hp.expand_v <= 0 or not math.isclose(hp.head_dim * hp.expand_v, round(hp.head_dim * hp.expand_v)):
            raise ConfigError(f"{cls.name}: head_dim * expand_v = {hp.head_dim} * {hp.expand_v} must be a positive "
                              "integer")
        if hp.use_short_conv and hp.conv_size < 2:
            raise ConfigError(f"{cls.name}: conv_size={hp.conv_size} must be >= 2")

    @classmethod
    def _conv_params(cls, hp) -> int:
        """The q, k, v short convolutions' parameters (0 without them)."""
        if not hp.use_short_conv:
            return 0
        key_dim, value_dim, _ = cls._dims(hp)
        channels = 2 * key_dim + value_dim
        return channels * hp.conv_size + (channels if hp.conv_bias else 0)

    @classmethod
    def state_bytes(cls, d_model: int, hp, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        key_dim, value_dim, head_v = cls._dims(hp)
        return delta_state_bytes(batch, key_dim, value_dim, head_v, hp, dtype)


class DeltaNet(DeltaInputs, Mixer):
    name = "deltanet"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        num_heads: int = 4  # fla's DeltaNet layer default (fla's DeltaNetConfig uses 16)
        expand_k: float = 1.0
        expand_v: float = 1.0
        use_beta: bool = True
        use_gate: bool = False  # output gate g_proj + gated RMSNorm; fla's default is off
        use_short_conv: bool = True
        conv_size: int = 4
        conv_bias: bool = False
        allow_neg_eigval: bool = False  # beta in (0, 2) instead of (0, 1)
        qk_activation: str = "silu"
        qk_norm: str = "l2"
        norm_eps: float = 1e-6  # fla's models pass config.norm_eps = 1e-6 to the layer

    @classmethod
    def defaults(cls, cfg) -> dict:
        # 4 heads as fla, but keep head_dim >= 16 at tiny widths (d_model=64 -> 4 x 16)
        return dict(num_heads=max(1, min(4, cfg.d_model // 16)), norm_eps=cfg.norm_eps)

    @staticmethod
    def _dims(d_model: int, hp: Hparams) -> tuple[int, int]:
        return round(d_model * hp.expand_k), round(d_model * hp.expand_v)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        key_dim, value_dim = cls._dims(d_model, hp)
        if hp.num_heads < 1 or key_dim % hp.num_heads or value_dim % hp.num_heads or key_dim < 1 or value_dim < 1:
            raise ConfigError(
                f"deltanet: key_dim={key_dim} (d_model*expand_k) and value_dim={value_dim} (d_model*expand_v) "
                f"must be positive multiples of num_heads={hp.num_heads}"
            )
        if hp.qk_activation not in _QK_ACTIVATIONS:
            raise ConfigError(f"deltanet: qk_activation={hp.qk_activation!r}; allowed: {', '.join(_QK_ACTIVATIONS)}")
        if hp.qk_norm not in _QK_NORMS:
            raise ConfigError(f"deltanet: qk_norm={hp.qk_norm!r}; allowed: {', '.join(_QK_NORMS)}")
        if hp.use_short_conv and hp.conv_size < 2:
            raise ConfigError(f"deltanet: conv_size={hp.conv_size} must be >= 2")

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        key_dim, value_dim = cls._dims(d_model, hp)
        n = 2 * d_model * key_dim + 2 * d_model * value_dim  # q, k, v, o projections
        n += d_model * hp.num_heads if hp.use_beta else 0
        n += d_model * value_dim if hp.use_gate else 0
        if hp.use_short_conv:
            channels = 2 * key_dim + value_dim
            n += channels * hp.conv_size + (channels if hp.conv_bias else 0)
        return n + value_dim // hp.num_heads  # output norm weight (per head_v_dim, shared by heads)

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        key_dim, value_dim = cls._dims(d_model, hp)
        return delta_state_bytes(batch, key_dim, value_dim, value_dim // hp.num_heads, hp, dtype)

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        key_dim, value_dim = cls._dims(d_model, hp)
        proj = 2 * (2 * d_model * key_dim + 2 * d_model * value_dim)
        proj += 2 * d_model * hp.num_heads if hp.use_beta else 0
        proj += 2 * d_model * value_dim if hp.use_gate else 0
        # the paper's Table 4: 8 d^2 / H for the delta rule; d^2 generalizes to key_dim * value_dim
        return proj + 8 * key_dim * value_dim // hp.num_heads

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        self.key_dim, self.value_dim = self._dims(d_model, hp)
        self.head_k_dim, self.head_v_dim = self.key_dim // hp.num_heads, self.value_dim // hp.num_heads
        self._make_qkv_proj(d_model, self.key_dim, self.value_dim)
        if hp.use_beta:
            self.b_proj = nn.Linear(d_model, hp.num_heads, bias=False)
        if hp.use_short_conv:
            self._make_qkv_convs(self.key_dim, self.value_dim)
        if hp.use_gate:
            self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
            self.o_norm = GatedRMSNorm(self.head_v_dim, eps=hp.norm_eps, act="swish")
        else:
            self.o_norm = RMSNorm(self.head_v_dim, eps=hp.norm_eps)
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; ``cache`` (a dict) is read and updated in place."""
        B, T, _ = x.shape
        hp = self.hp
        q, k, v = self._qkv(x, cache)
        beta = self._beta(x) if hp.use_beta else x.new_ones(B, T, hp.num_heads) * (2 if hp.allow_neg_eigval else 1)
        state = cache.get("state") if cache is not None else None
        o, state = delta_rule(q, k, v, beta, initial_state=state, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = state.detach()
        if hp.use_gate:
            o = self.o_norm(o, self.g_proj(x).view(B, T, hp.num_heads, self.head_v_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(o.reshape(B, T, self.value_dim))

"""Full softmax attention: RoPE, causal, GQA, optional sliding window (fla's ``Attention`` layer shape:
q/k/v/o projections without bias).

``input_conv=w`` (0: off, fla's layer) adds ``h + conv_w(h)`` on the layer's input, a causal depthwise
convolution of width ``w`` ("Canon" layers, Allen-Zhu, Physics of Language Models part 4.1): it hands attention
the previous tokens, as the linear mixers' short convolutions do. With it (and zero-initialised residual
outputs) a 24-layer all-attention recall model learned MQAR at K=64 (reference/deep-recall-control.md).

``input_conv_init`` says how that conv starts: ``normal`` (the model's init, std 0.02 as every fla weight),
``shift`` (the previous token's tap at 1, the others at 0: the layer sees ``h_t + h_{t-1}`` from step 0) or
``shift2`` (the two previous tokens' taps at 1: ``h_t + h_{t-1} + h_{t-2}``). Why: at
normal init the previous token reaches attention at about 2 % of its weight, and the 24-layer control's take-off
from the copy-any plateau at MQAR K=64 came anywhere from step 1600 to beyond 4300 over 8 seeds; shift hands
attention the key next to each value from the start. ``shift2`` is the same start for tasks whose value sits two
tokens after its key: variable tracking's ``x = v`` (hlnas.recall.vt), where the previous-token shift hands the
value's position the ``=``. ``split2`` splits the channels in three contiguous groups that see ``h_t``, ``h_{t-1}``
and ``h_{t-2}`` alone (taps -1 at t and +1 at the earlier token, added to the residual): where shift2's sum mixes the
three tokens in every channel, so a value read at ``x``'s position in ``y = x`` carries ``y`` and ``=`` as well,
split2 keeps them apart in separate channels and a projection can key on one and read another. Why: with shift2 a
24-layer all-attention control learned VT's 0-hop queries and never its 1-hop ones."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.attention import attention
from hlnas.model.mixers.base import Mixer
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import fused_linear, rotary_qk
from hlnas.overrides import is_int


#: each start as what ``h + conv(h)`` hands attention: the channels in len(groups) contiguous groups, each seeing the
#: sum of the tokens its tuple names (b: token t-b; a conv of width w has taps t-w+1 .. t)
_STARTS = {"shift": ((0, 1),), "shift2": ((0, 1, 2),), "split2": ((0,), (1,), (2,))}
#: how the attention-input conv may start (``input_conv_init``)
CONV_INITS = ("normal", *_STARTS)


class Attention(Mixer):
    name = "attention"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        num_heads: int
        num_kv_heads: int
        window: int | None = None
        rope_theta: float = 10000.0
        input_conv: int = 0  # width of the causal depthwise conv added to the input; 0 = none
        input_conv_init: str = "normal"  # normal, shift (h_t + h_{t-1}), shift2 (+ h_{t-2}), split2 (CONV_INITS)

    @classmethod
    def defaults(cls, cfg) -> dict:
        return dict(num_heads=cfg.n_heads, num_kv_heads=cfg.kv_heads, window=cfg.window, rope_theta=cfg.rope_theta)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        if d_model % hp.num_heads or hp.num_heads % hp.num_kv_heads:
            raise ConfigError(
                f"attention: d_model={d_model} must divide by num_heads={hp.num_heads}, "
                f"and num_heads by num_kv_heads={hp.num_kv_heads}"
            )
        if not is_int(hp.input_conv) or not 0 <= hp.input_conv <= 16:
            raise ConfigError(f"attention: input_conv={hp.input_conv!r} is not allowed; allowed: 0 (off) or a conv "
                              "width from 1 to 16")
        if hp.input_conv_init not in CONV_INITS:
            raise ConfigError(f"attention: input_conv_init={hp.input_conv_init!r} is not allowed; allowed: "
                              + ", ".join(CONV_INITS))
        back = max((b for g in _STARTS.get(hp.input_conv_init, ()) for b in g), default=0)  # the farthest tap set
        if back and hp.input_conv <= back:
            what = "the previous token" if back == 1 else f"each of the {back} previous tokens"
            raise ConfigError(f"attention: input_conv_init={hp.input_conv_init!r} needs input_conv >= {back + 1} (a tap "
                              f"for {what}), got input_conv={hp.input_conv!r}")

    @staticmethod
    def _dims(d_model: int, hp: Hparams) -> tuple[int, int]:
        head_dim = d_model // hp.num_heads
        return head_dim, hp.num_kv_heads * head_dim

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        _, kv_dim = cls._dims(d_model, hp)
        return 2 * d_model * d_model + 2 * d_model * kv_dim + d_model * hp.input_conv  # q, o and k, v; conv

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        head_dim, _ = cls._dims(d_model, hp)
        held = seq_len if hp.window is None else min(seq_len, hp.window)
        item = torch.empty((), dtype=dtype).element_size()
        conv = ShortConvolution.state_bytes(d_model, hp.input_conv, batch, item) if hp.input_conv else 0
        return 2 * hp.num_kv_heads * head_dim * held * batch * item + conv

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        _, kv_dim = cls._dims(d_model, hp)
        proj = 2 * (2 * d_model * d_model + 2 * d_model * kv_dim + d_model * hp.input_conv)
        span = seq_len if hp.window is None else min(seq_len, hp.window)
        # the paper's Table 4: 2 * L * d_model per token (QK^T and AV at one multiply-add each)
        return proj + 2 * span * d_model

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        self.head_dim, kv_dim = self._dims(d_model, hp)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, kv_dim, bias=False)
        self.v_proj = nn.Linear(d_model, kv_dim, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.input_conv = ShortConvolution(d_model, hp.input_conv, activation=None) if hp.input_conv else None
        self.reset_structured_parameters()

    def reset_structured_parameters(self) -> None:
        """The input conv's shift or split start, applied after the model's generic init of every weight
        (hlnas.model.build.HybridLM.reset_parameters), which would otherwise draw it normal again."""
        groups = _STARTS.get(self.hp.input_conv_init)
        if self.input_conv is None or groups is None:
            return
        w, now = self.input_conv.weight, self.input_conv.size - 1  # w[c, 0, now - b] is channel c's tap at t-b
        with torch.no_grad():
            w.zero_()
            for channels, taps in zip(torch.tensor_split(torch.arange(w.shape[0]), len(groups)), groups):
                w[channels, 0, now] = -1.0  # the residual already adds h_t: cancel it, then add each named token
                for b in taps:
                    w[channels, 0, now - b] += 1.0

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        B, T, _ = x.shape
        hp = self.hp
        pos = cache.get("pos", 0) if cache is not None else 0
        if self.input_conv is not None:
            x = x + self.input_conv(x, cache, key="input_conv")
        q, k, v = fused_linear(x, self.q_proj, self.k_proj, self.v_proj)
        q = q.view(B, T, hp.num_heads, self.head_dim)
        k = k.view(B, T, hp.num_kv_heads, self.head_dim)
        v = v.view(B, T, hp.num_kv_heads, self.head_dim)
        q, k = rotary_qk(q, k, pos, hp.rope_theta)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=1)
                v = torch.cat([cache["v"], v], dim=1)
            keep = k.shape[1] if hp.window is None else min(k.shape[1], hp.window)
            cache["k"], cache["v"] = k[:, -keep:].detach(), v[:, -keep:].detach()
            cache["pos"] = pos + T
        o = attention(q, k, v, window=hp.window)
        return self.o_proj(o.reshape(B, T, -1))


class SlidingWindowAttention(Attention):
    """Attention over each token's last W tokens, itself included: a layer kind (``"swa:W"``) a layout places beside
    full attention, where :attr:`ModelConfig.window` windows every attention layer of a model alike. Its KV cache keeps
    the last W tokens (Mistral's and Gemma's local layers; fla's ``attn`` spec ``window_size``). Every other setting is
    the attention layers' own (``mixer_hparams['attention']``)."""

    name = "swa"

    @classmethod
    def layer_hparams(cls, cfg, window: int | None = None) -> Attention.Hparams:
        if window is None or window < 1:
            raise ConfigError(f"swa: a sliding-window layer needs a window >= 1 (its layer name swa:W), got {window!r}")
        return dataclasses.replace(Attention.hparams(cfg), window=window)

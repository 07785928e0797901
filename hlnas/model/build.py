"""A causal language model built from a :class:`~hlnas.model.layout.Layout`.

embedding -> N pre-norm blocks (RMSNorm, token mixer, residual; RMSNorm, SwiGLU MLP, residual)
-> final RMSNorm -> LM head. Each block's mixer is the layout's mixer for that layer.
"""

from __future__ import annotations

import threading

import torch
from torch import Tensor, nn

from hlnas.model.cost import layer_mixer, resolve_config
from hlnas.model.config import ModelConfig
from hlnas.model.layout import Layout
from hlnas.model.mixers.base import Mixer, cache_nbytes
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import RMSNorm, SwiGLU

__all__ = ["HybridLM", "Cache", "build_model", "seeded_model"]

# torch's default generator is one per process: runs sharing a process (threads of a Ray actor, tests) take it in turn,
# so each model's weights depend on its own seed alone, as in a process of its own
_SEEDED_BUILD = threading.Lock()


class Cache:
    """Decode state of a whole model: one dict per layer (KV for attention, recurrent state otherwise)."""

    def __init__(self, n_layers: int):
        self.layers: list[dict] = [{} for _ in range(n_layers)]
        self.seen_tokens = 0

    def nbytes(self) -> int:
        return sum(cache_nbytes(layer) for layer in self.layers)

    def layer_nbytes(self) -> list[int]:
        return [cache_nbytes(layer) for layer in self.layers]


class Block(nn.Module):
    def __init__(self, mixer: Mixer, d_model: int, mlp_hidden: int, eps: float):
        super().__init__()
        self.mixer_norm = RMSNorm(d_model, eps)
        self.mixer = mixer
        self.mlp_norm = RMSNorm(d_model, eps)
        self.mlp = SwiGLU(d_model, mlp_hidden)

    def forward(self, x: Tensor, cache: dict | None) -> Tensor:
        x = x + self.mixer(self.mixer_norm(x), cache)
        return x + self.mlp(self.mlp_norm(x))


class HybridLM(nn.Module):
    def __init__(self, layout: Layout, cfg: ModelConfig):
        super().__init__()
        if cfg.n_layers != layout.n_layers:  # depth-spread settings (HGRN/HGRN-2 lower bounds) read n_layers
            cfg = cfg.replace(n_layers=layout.n_layers)
        self.layout, self.cfg = layout, cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        blocks = []
        for i, name in enumerate(layout.mixers):
            cls, hp = layer_mixer(name, cfg)
            blocks.append(Block(cls(cfg.d_model, hp, i), cfg.d_model, cfg.mlp_width, cfg.norm_eps))
        self.blocks = nn.ModuleList(blocks)
        # values one layer hands to later ones within a forward (RWKV-7's value residual: layer 0's v), emptied after it
        self._shared: dict = {}
        for block in self.blocks:
            if hasattr(block.mixer, "shared"):
                block.mixer.shared = self._shared
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.cfg.init_std
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.Embedding, ShortConvolution)):
                # fla's models init short convolutions like every other weight (normal, std 0.02)
                nn.init.normal_(m.weight, std=std)
            # mixers re-apply their own special inits (decay rates, dt biases, ...)
            init = getattr(m, "reset_special_parameters", None)
            if callable(init):
                init()
        for m in self.modules():
            # inits that overwrite a weight the pass above set on a child module (the attention-input conv's shift
            # start): a pass of their own, after it; they draw no random numbers, so every other weight is as before
            init = getattr(m, "reset_structured_parameters", None)
            if callable(init):
                init()
        if self.cfg.residual_init == "zero":  # every block starts as the identity: x + 0 + 0
            for block in self.blocks:
                for proj in (block.mixer.residual_out(), block.mlp.down_proj):
                    nn.init.zeros_(proj.weight)
                    if proj.bias is not None:
                        nn.init.zeros_(proj.bias)

    def new_cache(self) -> Cache:
        return Cache(len(self.blocks))

    def forward(self, input_ids: Tensor, cache: Cache | None = None, blocks=None, head: bool = True) -> Tensor:
        """input_ids ``[B, T]`` -> logits ``[B, T, vocab]``. With ``cache``, continues from its state. ``blocks``:
        callables run in place of :attr:`blocks`, one each (their compiled forms: :func:`hlnas.training.step.compiled`).
        ``head=False``: the final hidden states ``[B, T, d_model]`` instead, for a loss that applies :attr:`lm_head`
        itself (:mod:`hlnas.training.head_loss`)."""
        x = self.embed(input_ids)
        try:
            for i, block in enumerate(self.blocks if blocks is None else blocks):
                x = block(x, None if cache is None else cache.layers[i])
        finally:
            self._shared.clear()
        if cache is not None:
            cache.seen_tokens += input_ids.shape[1]
        x = self.norm(x)
        return self.lm_head(x) if head else x

    @property
    def compile_regions(self) -> nn.ModuleList:
        """The repeated blocks that :func:`hlnas.training.step.compiled` compiles one by one."""
        return self.blocks

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(layout: Layout, cfg: ModelConfig) -> HybridLM:
    """The model for ``layout`` with its MLP width resolved (see :func:`hlnas.model.cost.resolve_config`)."""
    return HybridLM(layout, resolve_config(layout, cfg))


def seeded_model(layout: Layout, cfg: ModelConfig, seed: int) -> HybridLM:
    """:func:`build_model` with its weights drawn from ``torch.manual_seed(seed)``, the same whichever other runs
    share the process."""
    with _SEEDED_BUILD:
        torch.manual_seed(seed)
        return build_model(layout, cfg)

"""Greedy decoding through a model's decode cache.

A model here is anything with ``forward(input_ids [B, T], cache) -> logits [B, T, V]`` and
``new_cache()`` (:class:`hlnas.model.build.HybridLM`): the prompt is prefilled once, then one token is
fed per step, so a step costs one token of work instead of a full forward over the context.

Prompts are grouped by token length and run in batches of equal length, because the cache
keeps one position counter per layer (no padding, so batching cannot change the result).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from hlnas.errors import ConfigError
from hlnas.training.loop import evaluating, model_device

__all__ = ["greedy_generate", "greedy_generate_ids"]


@torch.no_grad()
def greedy_generate_ids(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    eos_id: int | None = None,
    device: torch.device | str | None = None,
    batch_size: int = 8,
    stop_check=None,
) -> list[list[int]]:
    """Greedy continuation ids of each prompt (prompt excluded).

    A row ends after ``max_new_tokens`` tokens, at ``eos_id`` (not included), or when
    ``stop_check(generated_ids)`` returns True (the ids that made it true are kept).
    """
    if max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    for i, ids in enumerate(prompt_ids):
        if len(ids) == 0:
            raise ConfigError(f"prompt {i} encodes to no tokens; greedy decoding needs at least one")
    device = model_device(model) if device is None else device
    out: list[list[int]] = [[] for _ in prompt_ids]
    with evaluating(model):
        by_len: dict[int, list[int]] = {}
        for i, ids in enumerate(prompt_ids):
            by_len.setdefault(len(ids), []).append(i)
        for rows in by_len.values():
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                gen = _decode_batch(model, [prompt_ids[i] for i in chunk], max_new_tokens, eos_id, device, stop_check)
                for i, g in zip(chunk, gen):
                    out[i] = g
    return out


def _decode_batch(model, prompts, max_new_tokens, eos_id, device, stop_check) -> list[list[int]]:
    n = len(prompts)
    gen: list[list[int]] = [[] for _ in range(n)]
    if max_new_tokens == 0:
        return gen
    done = [False] * n
    cache = model.new_cache()
    logits = model(torch.tensor([list(p) for p in prompts], dtype=torch.long, device=device), cache)
    for step in range(max_new_tokens):
        nxt = logits[:, -1].argmax(dim=-1).tolist()
        for r, tok in enumerate(nxt):
            if done[r]:
                continue
            if eos_id is not None and tok == eos_id:
                done[r] = True
                continue
            gen[r].append(int(tok))
            if len(gen[r]) >= max_new_tokens or (stop_check is not None and stop_check(gen[r])):
                done[r] = True
        if all(done) or step == max_new_tokens - 1:
            break
        # finished rows keep being fed (their outputs are ignored) so the batch stays rectangular
        logits = model(torch.tensor(nxt, dtype=torch.long, device=device).view(n, 1), cache)
    return gen


def greedy_generate(
    model: nn.Module,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    stop: list[str] | None = None,
    device: torch.device | str | None = None,
    max_context: int | None = None,
    *,
    batch_size: int = 8,
    stop_at_eos: bool = True,
) -> list[str]:
    """Greedy text continuation of each prompt.

    ``stop``: the output is cut before the first occurrence of any of these strings, and decoding
    of that prompt ends as soon as one appears. ``stop_at_eos``: the tokenizer's ``eos_id`` ends a
    row (hlnas trains with it as the document separator). ``max_context`` (tokens): prompts longer
    than ``max_context - max_new_tokens`` keep only their last tokens (the question sits at the end).
    """
    stops = [s for s in (stop or []) if s]
    encoded = [tokenizer.encode(p) for p in prompts]
    if max_context is not None:
        keep = max_context - max_new_tokens
        if keep < 1:
            raise ConfigError(f"max_context={max_context} leaves no room for a prompt after max_new_tokens={max_new_tokens}")
        encoded = [ids[-keep:] for ids in encoded]

    def stop_check(ids: list[int]) -> bool:
        text = tokenizer.decode(ids)
        return any(s in text for s in stops)

    ids = greedy_generate_ids(
        model,
        encoded,
        max_new_tokens,
        eos_id=tokenizer.eos_id if stop_at_eos else None,
        device=device,
        batch_size=batch_size,
        stop_check=stop_check if stops else None,
    )
    return [_cut(tokenizer.decode(g), stops) for g in ids]


def _cut(text: str, stops: list[str]) -> str:
    cuts = [text.find(s) for s in stops if s in text]
    return text[: min(cuts)] if cuts else text

"""How a token row marks what the model reads but is not trained to predict, and how a batch's targets come from it:
one convention for the LM's packed rows (:mod:`hlnas.data.packing`) and the recall tasks' documents
(:mod:`hlnas.recall.mqar`)."""

from __future__ import annotations

import torch

__all__ = ["not_a_target", "split_targets"]


def not_a_target(token_id):
    """How a token-id document marks a token the model reads but is not trained to predict: ``-id - 1``
    (an int or a tensor of ids; applied to a mark it gives the id back). MQAR's random keys and values
    carry no signal and their loss drowns the answers' (seen in a CPU MQAR pilot). Rows
    keep the marks; :func:`split_targets` removes them."""
    return -token_id - 1


def split_targets(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A training batch ``[B, seq_len + 1]`` -> ``(tokens, targets)``: tokens with marks removed, and
    ``targets = tokens[:, 1:]`` with -100 (cross-entropy's ignore index) where a token was marked."""
    marked = batch < 0
    if not bool(marked.any()):
        return batch, batch[:, 1:]
    tokens = torch.where(marked, not_a_target(batch), batch)
    return tokens, tokens[:, 1:].masked_fill(marked[:, 1:], -100)

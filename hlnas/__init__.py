"""hlnas: neural architecture search over hybrid linear-attention language models.

Data flows one way: space -> layout -> (budget) -> model (mixers -> kernels) -> train -> score
-> study -> dashboard. Names here are imported lazily so ``import hlnas`` does not pull in torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "Layout": "hlnas.layout",
    "build_layout": "hlnas.layout",
    "PAPER_RATIOS": "hlnas.layout",
    "PLACEMENTS": "hlnas.layout",
    "ModelConfig": "hlnas.config",
    "PRESETS": "hlnas.config",
    "preset": "hlnas.config",
    "LayoutCost": "hlnas.budget",
    "layout_cost": "hlnas.budget",
    "HybridLM": "hlnas.model",
    "Cache": "hlnas.model",
    "build_model": "hlnas.model",
    "MIXERS": "hlnas.catalog",
    "PAPER_MIXERS": "hlnas.catalog",
    "HlnasError": "hlnas.errors",
    "SearchSpace": "hlnas.space",
    "load_space": "hlnas.space",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hlnas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

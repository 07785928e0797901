"""Pins the public API and the one-way import direction of the package."""

import ast
import pathlib
import subprocess
import sys

import hlnas

PKG = pathlib.Path(hlnas.__file__).parent

EXPECTED = {
    "__version__", "Layout", "build_layout", "PAPER_RATIOS", "PLACEMENTS", "ModelConfig", "PRESETS", "preset",
    "LayoutCost", "layout_cost", "HybridLM", "Cache", "build_model", "MIXERS", "PAPER_MIXERS", "HlnasError", "SearchSpace", "load_space",
}


def test_all_is_pinned_and_resolves():
    assert set(hlnas.__all__) == EXPECTED
    for name in hlnas.__all__:
        assert getattr(hlnas, name) is not None


def test_import_hlnas_and_help_do_not_import_torch():
    code = "import sys, hlnas, hlnas.cli, hlnas.layout; hlnas.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# Each module may import only from modules at its level or to its left in this order.
ORDER = ["errors", "overrides", "registry", "catalog", "layout", "config", "nn", "kernels", "mixers", "budget",
         "model", "data", "train", "graphs", "score", "recipe", "calibrate", "samplers", "space", "trial", "executors",
         "storage", "lease", "proposals", "study", "paper", "pareto", "figures", "report", "tabular", "dashboard", "cli"]


def _level(module: str) -> int:
    top = module.split(".")[1] if module.startswith("hlnas.") else module
    return ORDER.index(top) if top in ORDER else -1


def test_imports_point_one_way():
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        mod = ".".join(rel.parts)
        if mod.endswith("__init__"):
            mod = mod[: -len(".__init__")]
        if mod == "hlnas" or _level(mod) < 0:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t.startswith("hlnas.") and _level(t) > _level(mod):
                    bad.append(f"{mod} imports {t}")
    assert not bad, "backward imports: " + "; ".join(bad)

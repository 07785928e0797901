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
    code = "import sys, hlnas, hlnas.cli.main, hlnas.model.layout; hlnas.cli.main.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# The package's wings, bottom first: a module may import only from its own wing or one to its left (data flows one way:
# space -> layout -> model -> recall and LM training -> score -> study -> analysis). The loose modules stand as wings.
ORDER = ["errors", "outputs", "overrides", "metrics", "model", "settings", "training", "data", "recall", "lm", "score",
         "pipeline", "space", "calibration", "search", "analysis", "cli"]


def test_every_module_stands_in_a_wing():
    """A new top-level module or wing is placed in ORDER (and the README's concepts), not left out of the check."""
    tops = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())) and p.stem not in ("__init__", "__main__")}
    assert tops <= set(ORDER), f"not in ORDER: {sorted(tops - set(ORDER))}"


def test_at_most_eight_modules_loose_at_the_top():
    loose = sorted(p.name for p in PKG.glob("*.py"))
    assert len(loose) <= 8, loose


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


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# Private names one module takes from another: none. A helper shared between modules gets a public name.
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def private_imports() -> set[tuple[str, str]]:
    """(module, other module's private name) for every ``from hlnas.x import _y``, ``import hlnas.x._y`` and
    ``x._y`` where ``x`` is another hlnas module imported in that file."""
    found = set()
    for path in PKG.rglob("*.py"):
        mod = _module(path)
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        modules = {}  # local name -> the hlnas module (or name) it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from .x import y
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                if not base.startswith("hlnas"):
                    continue
                for a in node.names:
                    if _private(a.name) and base != mod:
                        found.add((mod, f"{base}.{a.name}"))
                    modules[a.asname or a.name] = f"{base}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("hlnas"):
                        if any(_private(p) for p in a.name.split(".")):
                            found.add((mod, a.name))
                        modules[a.asname or "hlnas"] = a.name if a.asname else "hlnas"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                chain, base = [], node.value
                while isinstance(base, ast.Attribute):
                    chain.insert(0, base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id in modules:
                    owner = ".".join([modules[base.id], *chain])
                    if owner != mod:
                        found.add((mod, f"{owner}.{node.attr}"))
    return found


def test_no_module_takes_another_modules_private_names():
    found = private_imports()
    assert not found - KNOWN_PRIVATE_IMPORTS, "private names used across modules: " + "; ".join(
        f"{m} uses {n}" for m, n in sorted(found - KNOWN_PRIVATE_IMPORTS))
    assert not KNOWN_PRIVATE_IMPORTS - found, f"fixed, drop from KNOWN_PRIVATE_IMPORTS: {sorted(KNOWN_PRIVATE_IMPORTS - found)}"


def test_experiments_import_hlnas_as_installed_not_through_sys_path():
    """Experiments are small scripts over the installed library (run from the repo root; those that reuse the
    tests' inputs as ``python -m experiments.NAME``): none edits sys.path to find hlnas or the tests."""
    root = PKG.parent / "experiments"
    bad = [str(p.relative_to(root)) for p in root.rglob("*.py") if "sys.path.insert" in p.read_text()]
    assert not bad, f"experiments that edit sys.path: {bad}"


def _module_imports() -> dict[str, set[str]]:
    """Each hlnas module's hlnas imports, wherever they stand (top level, a function, ``if TYPE_CHECKING``)."""
    names = {}
    for path in PKG.rglob("*.py"):
        mod = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
        names[mod.removesuffix(".__init__")] = path
    edges = {}
    for mod, path in names.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("hlnas"):
                for a in node.names:  # "from hlnas.search import loop" names a module
                    sub = f"{node.module}.{a.name}"
                    out.add(sub if sub in names else node.module)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name.startswith("hlnas")}
        edges[mod] = {t for t in out if t in names and t != mod and t != "hlnas"}
    return edges


def test_no_import_cycles():
    edges = _module_imports()
    state, cycles = {}, []

    def visit(mod, path):
        state[mod] = "open"
        for t in sorted(edges[mod]):
            if state.get(t) == "open":
                cycles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[mod] = "done"

    for mod in sorted(edges):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, "import cycles: " + "; ".join(cycles)


def test_no_module_over_500_lines_and_no_function_over_80():
    """Size limits: a function that grows past one screen is a sign that it holds more than one step."""
    root = pathlib.Path(hlnas.__file__).parent
    too_long = []
    for p in sorted(root.rglob("*.py")):
        src = p.read_text()
        if src.count("\n") > 500:
            too_long.append(f"module {p.relative_to(root)}: {src.count(chr(10))} lines")
        for n in ast.walk(ast.parse(src)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80:
                too_long.append(f"function {p.relative_to(root)}:{n.name}: {n.end_lineno - n.lineno + 1} lines")
    assert not too_long, too_long


def test_no_public_function_takes_more_than_ten_parameters():
    """Options travel grouped in the settings objects that already exist (SearchOptions, LoopSettings, the configs),
    not as a function's twentieth keyword."""
    too_many = []
    for p in sorted(PKG.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_"):
                a = n.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [x for x in (a.vararg, a.kwarg) if x]
                count = len(names) - (1 if names and names[0] in ("self", "cls") else 0)
                if count > 10:
                    too_many.append(f"{p.relative_to(PKG.parent)}:{n.name} takes {count}")
    assert not too_many, too_many

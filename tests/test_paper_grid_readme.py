"""experiments/paper_grid/README.md's device plan stays runnable: every h200.sh step it names is one h200.sh knows
(its run_step dispatcher, matched by bash itself), and every repository file its commands name exists. The plan is
what the next session fires at the device with 30 s between calls: a renamed step or a moved space there costs a call."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "experiments" / "paper_grid" / "README.md"
SCRIPT = ROOT / "experiments" / "paper_grid" / "h200.sh"
# a step: name[:T][/N], joined by "+"; a name has an underscore or a ":T" (prose after a step is not one)
_ONE = r"(?:[a-z0-9]+_[a-z0-9_]*(?::[\w.]+)?|[a-z0-9_]+:[\w.]+)(?:/\d+)?"
STEP = re.compile(rf"{_ONE}(?:\+{_ONE})*")
PATH = re.compile(r"(?<![\w/.$<])((?:experiments|search_spaces|tests)/[\w./-]+\.(?:yaml|json|py|sh))")


def _dispatch_patterns() -> list[str]:
    """The case patterns of h200.sh's run_step (``grid_by:*``, ``placement_by:*|placement_s1_by:*``, ...), the
    catch-all ``*`` left out."""
    body = SCRIPT.read_text().split("run_step() {", 1)[1].split("\n}\n", 1)[0]
    pats = re.findall(r"^    ([A-Za-z0-9_:|*]+)\)", body, flags=re.M)
    return [p for p in pats if p != "*"]


def _readme_steps() -> list[str]:
    steps = []
    for line in README.read_text().splitlines():
        if "h200.sh " not in line:
            continue
        for tok in line.split("h200.sh ", 1)[1].split():
            tok = tok.strip("`,;.)")
            if tok.startswith(("#", "\\")) or not STEP.fullmatch(tok):
                break
            steps += [s.split("/")[0] for s in tok.split("+")]
    return steps


def test_the_dispatcher_patterns_are_read():
    pats = _dispatch_patterns()
    assert "grid_by:*" in pats and "placement_by:*|placement_s1_by:*" in pats and "bench_decode*" in pats


def test_every_step_the_readme_names_is_one_h200_sh_knows():
    steps = _readme_steps()
    # the parser finds the plan's steps at all (each block's kind of step is there, whatever its T)
    for family in ("placement_by:", "placement_s1_by:", "bench_lm:", "sweep_by:", "gpu_tests:"):
        assert any(s.startswith(family) for s in steps), family
    case = "|".join(_dispatch_patterns())
    script = f'for s in "$@"; do case "$s" in {case}) ;; *) echo "$s";; esac; done'
    unknown = subprocess.run(["bash", "-c", script, "_", *steps], capture_output=True, text=True, check=True).stdout.split()
    assert unknown == [], f"README steps h200.sh does not know: {unknown}"


def test_the_matcher_would_catch_a_renamed_step():
    case = "|".join(_dispatch_patterns())
    script = f'case "$1" in {case}) echo known;; *) echo unknown;; esac'
    run = lambda s: subprocess.run(["bash", "-c", script, "_", s], capture_output=True, text=True).stdout.strip()  # noqa: E731
    assert (run("placement_by:60"), run("placemnt_by:60"), run("grid_s2_by:60")) == ("known", "unknown", "unknown")


def test_every_file_the_readme_commands_name_exists():
    named = {m for line in README.read_text().splitlines() for m in PATH.findall(line) if "<" not in m}
    assert {"experiments/paper_grid/placement_h200_lr.yaml", "search_spaces/paper_grid_h200_lr.yaml"} <= named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert missing == [], f"README names files that are not in the repository: {missing}"

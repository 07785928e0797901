"""hlnas reads as a product, not a lab notebook (issue #62): a short README that is an index, with no run diary in it,
and a tracked tree small enough to travel with a GPU call (64 MiB in all, the tree included).

The README's reference text lives in docs/; dated results, with their card, in docs/results.md; what was tried, in
docs/history.md and git. ``diary_marks`` is the one definition of what does not belong in reference text, so other
texts (the package's docstrings and help) can be held to it too."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

README_MAX_LINES = 200
HISTORY_MAX_LINES = 80
TREE_MAX_BYTES = 8_000_000  # the tracked files, as `git ls-files | xargs du -cb` counts them

# what marks a run diary: a date, a GPU model, a path into experiments/ (dated logs and results), a commit hash
DIARY = {
    "date": re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    # H100, h200, A100, A10, V100, L40, B200, and the same inside names (paper_grid_h200): not in reference text
    "GPU model": re.compile(r"(?<![A-Za-z0-9])(?:[ABHLTV]\d{2,3}|MI\d{3}X?|GH200|GB200)(?![0-9])", re.IGNORECASE),
    "experiments/ path": re.compile(r"\bexperiments[/.][A-Za-z_]"),
    # 7-40 lowercase hex characters with a digit and a letter among them: a commit, not a number or a word
    "commit hash": re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
}


def diary_marks(text: str) -> list[str]:
    """Each date, GPU model name, experiments/ path and commit hash in ``text``, as 'line N: kind: match'."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for kind, pattern in DIARY.items():
            found += [f"line {n}: {kind}: {m.group(0)!r}" for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("text, kind", [
    ("measured on 2026-12-05", "date"), ("on an H100 80GB", "GPU model"), ("search_spaces/paper_grid_h200_lr.yaml", "GPU model"),
    ("the A100's memory", "GPU model"), ("see experiments/bench/paper_scale.md", "experiments/ path"),
    ("python -m experiments.gpu_check", "experiments/ path"), ("fixed in 16ecf2d", "commit hash"),
])
def test_diary_marks_finds_each_kind(text, kind):
    (mark,) = diary_marks(text)
    assert f": {kind}: " in mark


@pytest.mark.parametrize("text", [
    "arXiv 2507.06457", "ZZZZZAZZZZZAZZZZZAZZZZZA at 24 layers", "2,097,152 tokens at T=4096 and B=16", "a deadbeef word",
    "torch==2.13.0", "the 3:1 hybrid, 128 heads of 64", "l2norm, bf16, fp32", "`hlnas search --timeout 3600`",
])
def test_diary_marks_leaves_reference_text_alone(text):
    assert diary_marks(text) == []


def test_readme_is_an_index_of_at_most_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_readme_has_no_dates_gpu_models_experiment_paths_or_commit_hashes():
    assert diary_marks(README.read_text()) == [], "README.md: these belong in docs/results.md or docs/history.md"


def test_readme_keeps_the_two_first_commands_ci_runs():
    text = README.read_text()
    assert "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[test]' && .venv/bin/hlnas search" in text
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line.strip() for line in ci.splitlines() if line.strip().startswith(".venv/bin/python -m pytest"))
    assert command in text, f"README.md must show the test command .ci/run runs: {command}"


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    text = README.read_text()
    links = set(re.findall(r"\]\((docs/[^)#]+)", text))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert links <= pages, f"README links to missing pages: {sorted(links - pages)}"
    assert pages <= links, f"docs pages the README does not link: {sorted(pages - links)}"
    for page in (ROOT / "docs").glob("*.md"):  # and the pages' links to each other
        for target in re.findall(r"\]\(([a-z-]+\.md)", page.read_text()):
            assert (ROOT / "docs" / target).exists(), f"{page.name} links to docs/{target}, which does not exist"


def test_history_is_at_most_80_lines():
    lines = (ROOT / "docs" / "history.md").read_text().splitlines()
    assert len(lines) <= HISTORY_MAX_LINES, f"docs/history.md has {len(lines)} lines"


def test_tracked_tree_is_at_most_8_mb():
    """A GPU call carries at most 64 MiB, the tree included, beside wheels, caches and a corpus: the tree stays small.
    Results that leave it stay in git history."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    sizes = {name.decode(): (ROOT / name.decode()).stat().st_size for name in names
             if name and (ROOT / name.decode()).is_file()}
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= TREE_MAX_BYTES, f"tracked files: {total:,} bytes (limit {TREE_MAX_BYTES:,}); largest: {largest}"

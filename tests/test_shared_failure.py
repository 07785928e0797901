"""A failure every trial shares stops the search (hlnas.search.shared): a setting no layout can train with, and a full
``--out`` disk (a real file-size limit in a search process), each stop after the first trials with one line naming the
cause and leave their layouts re-queued, not failed; a resume after the fix trains them. The policy itself (what counts
as the same cause) on stored trials."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

import hlnas
from hlnas.errors import HlnasError
from hlnas.search.records import SHARED_ATTR, failed_by_layout
from hlnas.search.shared import SHARED_AFTER, SharedCause, SharedFailure, signature
from hlnas.search.study import load_hlnas_study, run_search
from hlnas.search.options import SearchOptions
from hlnas.space import space_from_dict
from tests.helpers import filling_up
from tests.searches import tiny_raw, trained

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.usefixtures("one_thread")


def no_recall_model_space(**top):
    """The tiny GLA space with a recall model no layout can build: 32 wide, 7 heads (each trial trains its LM in a
    second, then fails building the recall model)."""
    raw = tiny_raw(**top)
    raw["scale"]["score"]["mqar"]["model"] = {"n_heads": 7}
    return space_from_dict(raw)


def test_a_setting_every_layout_fails_with_stops_after_the_first_trials_and_requeues_them(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    events = []
    with pytest.raises(SharedFailure) as e:
        run_search(no_recall_model_space(), SearchOptions(
            storage=url, study_name="s", n_trials=4, on_event=lambda kind, data: events.append(kind)))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"the first {SHARED_AFTER} trials all failed the same way, so no more were started (config)")
    assert "score.mqar.model: d_model=32 must be divisible by n_heads=7" in msg and "change that setting" in msg
    assert events.count("started") == SHARED_AFTER  # the fourth layout never started
    study = load_hlnas_study(url, "s")
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert len(failed) == SHARED_AFTER and all(t.user_attrs["error_kind"] == "config" for t in failed)
    assert study.user_attrs[SHARED_ATTR]["trials"] == [t.number for t in failed]
    assert failed_by_layout(study) == {}  # not failures of their layouts
    requeued = [t.user_attrs["requeued_from"] for t in study.get_trials(states=(TrialState.WAITING,))
                if "requeued_from" in t.user_attrs]  # beside the grid's fourth point, queued at the start
    assert sorted(requeued) == [t.number for t in failed]

    # the setting changed, the same command (a new search of the name) replaces the study, which held nothing else
    fixed = space_from_dict(tiny_raw())
    run_search(fixed, SearchOptions(storage=url, study_name="s", n_trials=4))
    study = load_hlnas_study(url, "s")
    assert len({t.user_attrs["layout"] for t in trained(study)}) == 4 and SHARED_ATTR not in study.user_attrs


def test_keep_going_trains_on_and_each_failure_is_the_layouts_own(tmp_path):
    url = f"sqlite:///{tmp_path}/k.db"
    run_search(no_recall_model_space(), SearchOptions(storage=url, study_name="k", n_trials=4, fail_fast=False))
    study = load_hlnas_study(url, "k")
    assert len(failed_by_layout(study)) == 4 and SHARED_ATTR not in study.user_attrs


def test_a_resume_whose_trials_all_fail_the_same_way_stops_and_keeps_what_completed(tmp_path, monkeypatch):
    """The cause came after the first run, and after the search's own checks (here an --out under a file that the
    up-front check is made to miss, as a folder that turns unwritable mid-search would: every trial's checkpoint
    folder is refused); the resume stops after the first trials, its completed trial stays, and a new search of the
    name is refused as before. With a usable --out a plain resume trains the re-queued layouts."""
    import hlnas.search.study as study_module

    monkeypatch.setattr(study_module, "output_dir", lambda path, *a, **k: path)
    url = f"sqlite:///{tmp_path}/c.db"
    run_search(space_from_dict(tiny_raw()), SearchOptions(storage=url, study_name="c", n_trials=1))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SharedFailure, match=r"\(other\): NotADirectoryError: .*afile/sub/"):
        run_search(None, SearchOptions(
            storage=url, study_name="c", n_trials=4, resume=True, out_root=str(tmp_path / "afile" / "sub")))
    study = load_hlnas_study(url, "c")
    assert len(trained(study)) == 1 and len(study.user_attrs[SHARED_ATTR]["trials"]) == SHARED_AFTER
    with pytest.raises(HlnasError, match="already exists in this storage; pass --resume"):
        run_search(space_from_dict(tiny_raw()), SearchOptions(storage=url, study_name="c", n_trials=4))
    run_search(None, SearchOptions(
        storage=url, study_name="c", n_trials=4, resume=True, out_root=str(tmp_path / "out")))
    study = load_hlnas_study(url, "c")
    assert len({t.user_attrs["layout"] for t in trained(study)}) == 4 and not failed_by_layout(study)


def _frozen(number: int, kind: str | None, error: str | None, layout: str, state=TrialState.FAIL):
    attrs = {"layout": layout} | ({"error_kind": kind, "error": error} if kind else {})
    t = optuna.trial.create_trial(state=state, values=[1.0] if state == TrialState.COMPLETE else None,
                                  user_attrs=attrs)
    t.number = number
    return t


def test_what_counts_as_the_same_cause():
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate {} GiB (GPU 0; 79.1 GiB total)\nTraceback ..."
    assert signature("oom", oom.format("2.50"), "GGGA") == signature("oom", oom.format("12.00"), "AAAA")  # sizes differ
    assert signature("other", "RuntimeError: bad shape for GGGA", "GGGA") == signature(
        "other", "RuntimeError: bad shape for AAAA", "AAAA")  # the layout is masked
    assert signature("disk", "DiskFull: ... /a/GGGA/checkpoint.pt", "GGGA") == signature("disk", "x", "AAAA")
    assert signature("nan", "non-finite loss at step 3", "GGGA") is None  # a NaN is the layout's own
    assert signature("no_row", "no row for GGGA", "GGGA") is None  # the sampler benchmark's kinds are rows

    cause = SharedCause(after=3)
    for i, lay in enumerate(["GGGG", "GAGA"]):
        cause.told(_frozen(i, "config", "ConfigError: n_heads=7", lay), lay)
    cause.told(_frozen(2, "nan", "loss nan", "GGGA"), "GGGA")  # another kind between: the run starts again
    assert not cause.tripped and cause.streak == []
    for i, lay in enumerate(["GGGG", "GAGA", "GGGA"], start=3):
        cause.told(_frozen(i, "config", "ConfigError: n_heads=7", lay), lay)
    assert cause.tripped and [n for n, _, _ in cause.streak] == [3, 4, 5]

    after_success = SharedCause(after=2)
    after_success.told(_frozen(0, None, None, "GGGG", TrialState.COMPLETE), "GGGG")
    for i, lay in enumerate(["GAGA", "GGGA"], start=1):  # a trial completed: a config failure is a layout's own now
        after_success.told(_frozen(i, "config", "ConfigError: x", lay), lay)
    assert not after_success.tripped
    for i, lay in enumerate(["GAGA", "GGGA"], start=3):  # a full disk is a shared cause at any point
        after_success.told(_frozen(i, "disk", f"DiskFull: /o/{lay}/checkpoint.pt", lay), lay)
    assert after_success.tripped


DISK_FULL = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (__LIMIT__, __LIMIT__))
    from hlnas.cli.main import main
    sys.exit(main(sys.argv[1:]))
""")


def test_a_full_out_disk_stops_the_search_names_the_path_and_leaves_no_partial_checkpoint(tmp_path):
    """Every trial's checkpoint (about 750 kB) is refused by a 400 kB file-size limit (RLIMIT_FSIZE: what a full
    disk does to a write, without root), while the study's SQLite file (about 120 kB) still fits."""
    space_file, out = tmp_path / "space.yaml", tmp_path / "out"
    space_file.write_text(yaml.safe_dump(tiny_raw()))
    url = f"sqlite:///{tmp_path}/d.db"
    argv = ["search", "--space", str(space_file), "--storage", url, "--study", "d", "--out", str(out), "--trials", "4",
            "--workers", "1", "--no-progress"]
    # the hlnas this test imports (a worktree's, not an installed copy's)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(hlnas.__file__).parents[1])}
    p = subprocess.run([sys.executable, "-c", DISK_FULL.replace("__LIMIT__", str(400_000)), *argv], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("hlnas search: error: ")]
    assert len(errors) == 1 and "Traceback" not in p.stderr
    assert f"the first {SHARED_AFTER} trials all failed the same way, so no more were started (disk)" in errors[0]
    assert f"cannot write {out}{os.sep}" in errors[0] and "checkpoint.pt" in errors[0]
    assert f"hlnas search --resume --storage {url} --study d --out {out} trains them" in errors[0]
    assert not [f for f in out.rglob("*") if f.name.endswith(".tmp")]  # no partial checkpoint left

    # room again: a plain resume trains the re-queued layouts (and the fourth), each with its checkpoint
    p = subprocess.run([sys.executable, "-m", "hlnas", "search", "--resume", "--storage", url, "--study", "d",
                        "--out", str(out), "--workers", "1", "--no-progress"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    study = load_hlnas_study(url, "d")
    layouts = {t.user_attrs["layout"] for t in trained(study)}
    assert len(layouts) == 4 and all((out / lay / "checkpoint.pt").is_file() for lay in layouts)
    assert not failed_by_layout(study)


def test_a_checkpoint_that_finds_the_disk_full_names_it_and_leaves_no_partial_file(tmp_path, monkeypatch):
    """The disk fills up 64 kB into the write (ENOSPC from the file's write, as a full disk gives it): DiskFull names
    the checkpoint, and the half-written .tmp beside it is removed; a checkpoint saved before stays whole."""
    import torch

    from hlnas.errors import DiskFull
    from hlnas.training import checkpoint

    path = tmp_path / "checkpoint.pt"
    checkpoint.save_state(path, {"step": 1})

    monkeypatch.setattr(checkpoint, "open", filling_up(1 << 16), raising=False)  # refuses past 64 kB
    with pytest.raises(DiskFull, match=f"the disk is full: cannot write {path} \\([\\d,]+ bytes free there\\)"):
        checkpoint.save_state(path, {"w": torch.zeros(1 << 16)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    assert torch.load(path)["step"] == 1

"""A study name is a name, never a path: the folders kept for a study are named by a safe slug and the study's id,
inside --out (or the working directory); names a storage cannot keep or a terminal cannot show are refused; the
commands printed for a study quote its name for the shell. (The one-line refusals: tests/test_bad_inputs.py.)"""

from __future__ import annotations

import os
import shlex

import optuna
import pytest
import yaml

from hlnas.cli.main import main
from hlnas.search import optuna_adapter
from hlnas.search.records import paused_root
from hlnas.search.storage import UnknownStudyError, check_study_name, study_slug
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from tests.searches import tiny_raw, tiny_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("name", ["../../../../x", "/abs/path", "..", ".", "a/../../b", "  spaced  name ", "naïve"])
def test_a_study_folder_is_a_slug_and_the_id_inside_its_root(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/n.db", study_name=name)
    out = tmp_path / "out"
    folder = os.path.relpath(paused_root(study, out_root=str(out)), out / "rungs")
    assert os.sep not in folder and not folder.startswith(".")  # one folder, right inside OUT/rungs
    assert folder.startswith(study_slug(name, optuna_adapter.study_id(study)) + "-")
    assert not (tmp_path / "x").exists() and not os.path.exists("/abs/path")
    other = optuna.create_study(storage=f"sqlite:///{tmp_path}/n.db", study_name=name + "2")
    cwd_root = paused_root(other)  # without --out: in the working directory
    assert os.path.dirname(os.path.dirname(cwd_root)) == str(tmp_path)


def test_the_slug_keeps_what_a_folder_name_can_hold():
    assert study_slug("paper grid/seed 1", 7) == "paper-grid-seed-1-7"
    assert study_slug("../../etc", 3) == "etc-3"
    assert study_slug("...", 2) == "study-2"
    assert study_slug("x" * 100, 1) == "x" * 40 + "-1"


@pytest.mark.parametrize(("name", "why"), [
    ("", "a study name must be a non-empty string"), ("   ", "a study name must be a non-empty string"),
    ("a\nb", r"may not hold control characters \(found '\\n' at position 1\)"),
    ("tab\there", r"found '\\t' at position 3"), ("zero\u200bwidth", r"found '\\u200b' at position 4"),
    ("x" * 513, "a study name of 513 characters is longer than the 512 a storage keeps"),
])
def test_names_a_storage_cannot_keep_or_a_terminal_cannot_show_are_refused(tmp_path, name, why):
    with pytest.raises(UnknownStudyError, match=why):
        check_study_name(name)
    url = f"sqlite:///{tmp_path}/r.db"
    with pytest.raises(UnknownStudyError, match=why):
        run_search(tiny_space(), SearchOptions(storage=url, study_name=name, n_trials=1))
    assert not (tmp_path / "r.db").exists()  # refused before the storage was opened


def test_the_commands_printed_for_a_study_quote_its_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(tiny_raw()))
    name, url = "my study; rm -rf ~ 'x'", f"sqlite:///{tmp_path}/q.db"
    assert main(["search", "--space", "space.yaml", "--storage", url, "--study", name, "--trials", "1",
                 "--workers", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    status = next(ln for ln in out.splitlines() if ln.strip().startswith("hlnas status"))
    assert shlex.split(status) == ["hlnas", "status", "--storage", url, "--study", name]
    assert main(shlex.split(status)[1:]) == 0  # pasted back, it reads the same study
    assert name in capsys.readouterr().out

"""A study storage that fails once it is open: read-only (chmod, with root's override of file modes dropped), full
(a file-size limit in the search process), a corrupt page (bytes overwritten in the SQLite file), locked (another
connection holding SQLite's lock) and a damaged journal. Each is one line naming the storage, the cause in plain words
and the remedy, never a traceback; completed trials are never lost, and a trial the failure left running is re-queued
by the next --resume, as after kill -9."""

from __future__ import annotations

import ctypes
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

from tests.helpers import filling_up
from optuna.trial import TrialState

import hlnas
from hlnas.cli.main import main
from hlnas.search.study import load_hlnas_study, run_search
from hlnas.search.options import SearchOptions
from tests.searches import tiny_space, trained

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def stored(tmp_path) -> tuple[Path, str]:
    """A study 's' of the tiny space with one trained trial, in tmp_path/s.db; its file and URL."""
    db = tmp_path / "s.db"
    run_search(tiny_space(), SearchOptions(storage=f"sqlite:///{db}", study_name="s", n_trials=1))
    return db, f"sqlite:///{db}"


def env() -> dict:
    """A search process's environment: the hlnas this test imports, one thread."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(hlnas.__file__).parents[1])}


def drop_file_mode_override() -> None:
    """Run as root, a process writes any file whatever its mode; drop that (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
    CAP_FOWNER leave the bounding set: an exec'd root process then lacks them), so chmod means what it says."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2, 3):
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def one_error_line(err: str, command: str) -> str:
    errors = [ln for ln in err.splitlines() if ln.startswith(f"hlnas {command}: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
    return errors[0]


def completed(url: str) -> dict:
    return {t.number: t.values for t in optuna.load_study(study_name="s", storage=url).trials
            if t.state == TrialState.COMPLETE}


WRITE = textwrap.dedent("""
    import sys
    from hlnas.search.storage import open_storage, storage_failure
    import optuna
    url = sys.argv[1]
    try:
        optuna.load_study(study_name="s", storage=open_storage(url)).set_user_attr("x", 1)
    except Exception as e:
        print(storage_failure(e, url))
""")


def test_a_read_only_sqlite_file_is_one_line_and_is_left_untouched(stored):
    db, url = stored
    before = db.read_bytes()
    os.chmod(db, 0o444)
    os.chmod(db.parent, 0o555)
    try:
        run = lambda *argv: subprocess.run([sys.executable, *argv], cwd="/", env=env(), capture_output=True,  # noqa: E731
                                           text=True, timeout=120, preexec_fn=drop_file_mode_override)
        p = run("-m", "hlnas", "search", "--resume", "--storage", url, "--study", "s", "--no-progress", "--workers", "1")
        assert p.returncode == 2
        line = one_error_line(p.stderr, "search")
        assert line == (f"hlnas search: error: storage '{url}': '{db}' is read-only, and a search writes there; make it "
                        "writable (chmod u+w), or copy the file somewhere writable and pass that")
        # a write past the search's check (a reader's, or a file made read-only mid-search): SQLite's own words
        p = run("-c", WRITE, url)
        assert p.stdout.strip() == (f"storage '{url}': it is read-only (attempt to write a readonly database); make {db} "
                                    "and its folder writable (chmod u+w), or copy it somewhere writable and pass that")
        p = run("-m", "hlnas", "status", "--storage", url)  # reading needs no write
        assert p.returncode == 0 and "study 's': 1 complete" in p.stdout
    finally:
        os.chmod(db.parent, 0o755)
        os.chmod(db, 0o644)
    assert db.read_bytes() == before


FULL = textwrap.dedent("""
    import os, resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
    limit = os.path.getsize(sys.argv[1]) + 4096  # room for a page more: the storage fills up at its next writes
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from hlnas.cli.main import main
    sys.exit(main(sys.argv[2:]))
""")


def test_a_storage_that_fills_up_mid_search_loses_nothing_and_the_resume_requeues_the_running_trial(stored):
    db, url = stored
    kept = completed(url)
    resume = ["search", "--resume", "--storage", url, "--study", "s", "--trials", "4", "--no-progress", "--workers", "1"]
    p = subprocess.run([sys.executable, "-c", FULL, str(db), *resume], cwd=db.parent, env=env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2
    line = one_error_line(p.stderr, "search")
    assert line.startswith(f"hlnas search: error: storage '{url}': a write to it failed (its size reached this process's "
                           "file-size limit, ulimit -f, of ")
    assert line.endswith("(disk I/O error); make room (free space on its disk, or raise the limit) or check the disk, "
                         "then run the command again (completed trials are stored, and --resume re-queues a trial that "
                         "was running)")
    assert completed(url) == kept  # nothing lost
    left = [t.number for t in optuna.load_study(study_name="s", storage=url).trials if t.state == TrialState.RUNNING]
    assert left  # the storage filled up while a trial ran (its result could not be told)

    assert main(resume) == 0  # room again: a plain resume
    study = load_hlnas_study(url, "s")
    assert {n: v for n, v in completed(url).items() if n in kept} == kept
    assert len({t.user_attrs["layout"] for t in trained(study)}) == 4
    assert not study.get_trials(states=(TrialState.RUNNING,))
    for n in left:  # what the failure left running is re-queued, as after kill -9
        assert study.trials[n].user_attrs["error_kind"] == "interrupted"
        assert any(t.user_attrs.get("requeued_from") == n for t in study.trials)


def corrupt_page(db: Path, page: int = 1, size: int = 4096) -> bytes:
    """Overwrite page ``page`` (0-based; page 0 holds the header and the schema) with 0xa5; the file's new bytes."""
    with open(db, "r+b") as f:
        f.seek(page * size)
        f.write(b"\xa5" * size)
    return db.read_bytes()


@pytest.mark.parametrize("argv", [["status"], ["search", "--resume", "--study", "s", "--no-progress", "--workers", "1"],
                                  ["report", "--out", "{tmp}/rep", "--no-png"]], ids=lambda a: a[0])
def test_a_corrupt_page_is_one_line_and_nothing_is_written(stored, tmp_path, monkeypatch, capsys, argv):
    db, url = stored
    monkeypatch.chdir(tmp_path)
    damaged = corrupt_page(db)
    command = [a.format(tmp=tmp_path) for a in argv] + ["--storage", url]
    assert main(command) == 2
    line = one_error_line(capsys.readouterr().err, argv[0])
    assert line == (f"hlnas {argv[0]}: error: storage '{url}': the file is damaged (database disk image is malformed); "
                    f"restore it from a copy, or salvage what it holds: sqlite3 {db} .recover | sqlite3 recovered.db, "
                    "then pass --storage sqlite:///recovered.db")
    assert db.read_bytes() == damaged and not (tmp_path / "rep").exists()


def test_a_lock_held_past_the_wait_is_one_line(stored, monkeypatch, capsys):
    import hlnas.search.storage as storage

    db, url = stored
    monkeypatch.setattr(storage, "SQLITE_BUSY_TIMEOUT_S", 1.0)  # 120 s in a search
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert main(["status", "--storage", url]) == 2
    finally:
        holder.close()
    line = one_error_line(capsys.readouterr().err, "status")
    assert line == (f"hlnas status: error: storage '{url}': another process held its lock for over 1 s (database is "
                    "locked); close the program holding it (a sqlite3 shell, a stuck hlnas), then run the command again "
                    "(completed trials are stored, and --resume re-queues a trial that was running)")
    assert main(["status", "--storage", url]) == 0  # the lock gone


def test_a_damaged_journal_is_one_line_without_the_list_of_schemes(tmp_path, capsys):
    log = tmp_path / "s.log"
    run_search(tiny_space(), SearchOptions(storage=f"journal:///{log}", study_name="s", n_trials=1))
    with open(log, "r+b") as f:
        f.seek(200)
        f.write(b"\xa5" * 64)
    assert main(["status", "--storage", f"journal:///{log}"]) == 2
    line = one_error_line(capsys.readouterr().err, "status")
    assert line.startswith(f"hlnas status: error: storage 'journal:///{log}': the journal file is damaged (a line is not "
                           "a whole JSON record) ('utf-8' codec can't decode byte 0xa5")
    assert line.endswith("restore it from a copy, or cut it after its last whole line") and "allowed schemes" not in line


def test_a_journal_cut_short_is_refused_before_anything_reads_past_it_or_appends_to_it(tmp_path, capsys):
    log = tmp_path / "s.log"
    run_search(tiny_space(), SearchOptions(storage=f"journal:///{log}", study_name="s", n_trials=1))
    whole = log.read_bytes()
    log.write_bytes(whole[:-37])  # the last record cut mid-line, as a killed writer leaves it
    for argv in (["status", "--storage", f"journal:///{log}"],
                 ["search", "--resume", "--storage", f"journal:///{log}", "--study", "s", "--no-progress"]):
        assert main(argv) == 2
        line = one_error_line(capsys.readouterr().err, argv[0])
        assert "the journal's last record is cut short" in line and "remove the partial last line" in line
        assert log.read_bytes() == whole[:-37]  # nothing appended to the broken line
    log.write_bytes(whole[: whole.rindex(b"\n", 0, len(whole) - 37) + 1])  # cut after the last whole record: readable
    assert main(["status", "--storage", f"journal:///{log}"]) == 0


@pytest.mark.parametrize(("argv", "target"), [
    (["report", "--storage", "{url}", "--out", "{tmp}/out/rep", "--no-png"], "out/rep/report.html"),
    (["export", "ZZZZZA", "--out", "{tmp}/out/fla"], "out/fla/ZZZZZA/config.json"),
], ids=lambda a: a[0] if isinstance(a, list) else None)
def test_a_full_out_disk_is_one_line_and_leaves_no_partial_file(stored, tmp_path, monkeypatch, capsys, argv, target):
    """The --out disk fills up 512 bytes into the first file written: one line naming it, and neither a partial
    file, its temporary, nor a folder the command made is left."""
    import hlnas.outputs as outputs

    db, url = stored
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(outputs, "open", filling_up(512), raising=False)
    assert main([a.format(tmp=tmp_path, url=url) for a in argv]) == 2
    line = one_error_line(capsys.readouterr().err, argv[0])
    assert line.startswith(f"hlnas {argv[0]}: error: the disk is full: cannot write {tmp_path / target} (")
    assert line.endswith("bytes free there); free space on that disk or write elsewhere")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_dashboard_refresh_that_finds_the_storage_damaged_logs_one_line(stored, caplog):
    """Served, then a page of the storage is damaged: the next refresh logs what status would say, in one line
    without a traceback, and the refresher goes on."""
    import logging

    from hlnas.analysis.dashboard import FigureRefresher, open_storage

    db, url = stored
    refresher = FigureRefresher(open_storage(url), url=url)
    assert refresher.refresh_once() == ["s"]
    refresher.seen.clear()  # the next pass re-attaches, reading the trials
    corrupt_page(db, page=2)
    with caplog.at_level(logging.ERROR, logger="hlnas.analysis.dashboard"):
        refresher.refresh_once()
    records = [r for r in caplog.records if r.name == "hlnas.analysis.dashboard"]
    assert len(records) == 1 and records[0].exc_info is None
    assert records[0].getMessage() == (f"hlnas figures for study 's' failed: storage '{url}': the file is damaged "
                                       "(database disk image is malformed); restore it from a copy, or salvage what it "
                                       f"holds: sqlite3 {db} .recover | sqlite3 recovered.db, then pass --storage "
                                       "sqlite:///recovered.db")


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("MySQLdb") is not None,
                    reason="mysqlclient is installed: mysql:// finds its driver")
def test_a_server_url_without_its_driver_names_one_to_install_not_the_list_of_schemes(capsys):
    """mysql:// is an allowed scheme; SQLAlchemy's default driver for it (mysqlclient) is simply not installed."""
    assert main(["status", "--storage", "mysql://u@127.0.0.1:1/db", "--study", "st"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its database driver is not installed here" in err[0], err
    assert "pip install pymysql" in err[0] and "mysql+pymysql://" in err[0] and "allowed schemes" not in err[0]


def test_an_unknown_driver_in_a_server_url_is_refused_before_the_search_starts(capsys, tmp_path, monkeypatch):
    """postgresql+nodriver:// names a driver SQLAlchemy has no dialect for: one line naming it and a known form,
    before the search prints its banner or trains anything; a known driver passes the check."""
    from hlnas.search.storage import check_storage_url

    monkeypatch.chdir(tmp_path)
    assert main(["search", "--storage", "postgresql+nodriver://u@h/db", "--trials", "1"]) != 0
    out, err = capsys.readouterr()
    assert "study" not in out and len(err.strip().splitlines()) == 1, (out, err)
    assert "'nodriver' is not a database driver SQLAlchemy knows for postgresql" in err
    assert "postgresql+psycopg2://" in err and not list(tmp_path.iterdir())
    assert check_storage_url("postgresql+psycopg2://u@h/db") == ("postgresql", None)

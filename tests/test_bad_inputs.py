"""Every bad input a user can give a subcommand, in one table: one row per input and the fragment its one-line error
must contain (naming the value and what is allowed). Each row exits with code 2, prints no traceback, and
writes nothing it was not asked to (``hlnas eval`` never scores a checkpoint it was not given): a row that searches
names the one storage file it may write.

The faults that need another process or a held lock (a read-only file, a storage or an --out disk filling up, a lock
held past the wait) are in tests/test_storage_faults.py and tests/test_shared_failure.py."""

from __future__ import annotations

import optuna
import pytest
import yaml

from hlnas.cli.main import main
from hlnas.data.packages import CORPORA
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from tests.helpers import torch_threads
from tests.searches import tiny_raw, tiny_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A folder holding what the rows point at: a trained run (``run/``) with a text file beside its checkpoint, a
    folder without a checkpoint, a plain file, a stored hlnas study and a study hlnas did not create, a search
    space with a changed learning rate."""
    ws = tmp_path_factory.mktemp("bad")
    with torch_threads(1):  # module fixtures run before the one_thread fixture
        assert main(["train", "gla", "--ratio", "6:1", "--tokens", "512", "--seq-len", "32", "--batch-size", "2",
                     "--out", str(ws / "run"), "--no-progress", "--set", "model.n_layers=6"]) == 0
        run_search(tiny_space(), SearchOptions(storage=f"sqlite:///{ws}/s.db", study_name="st", n_trials=1))
    (ws / "run" / "notes.txt").write_text("my notes\n")
    (ws / "empty").mkdir()
    (ws / "afile").write_text("x")
    optuna.create_study(storage=f"sqlite:///{ws}/plain.db", study_name="plain").optimize(
        lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    raw = tiny_raw()
    raw["scale"]["train"]["lr"] = 1e-3
    (ws / "changed.yaml").write_text(yaml.safe_dump(raw))
    for name, model in (("nheads7", {"n_heads": 7}), ("dmodel-8", {"d_model": -8})):  # no layout can build its recall model
        raw = tiny_raw()
        raw["scale"]["score"]["mqar"]["model"] = model
        (ws / f"{name}.yaml").write_text(yaml.safe_dump(raw))
    (ws / "recall_min.yaml").write_text(yaml.safe_dump(tiny_raw(objectives=[{"metric": "recall", "direction": "minimize"}])))
    (ws / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (ws / "ratios_empty.yaml").write_text(yaml.safe_dump(tiny_raw(ratios=[])))
    (ws / "mixers_empty.yaml").write_text(yaml.safe_dump(tiny_raw(mixers=[])))  # transformer: true stays
    (ws / "fast.yaml").write_text(yaml.safe_dump(tiny_raw()))  # valid, calibration off
    raw = tiny_raw()
    raw["scale"]["model"]["mixer_hparams"] = {"gla": {"bogus_opt": 1}}
    (ws / "hparams_bad.yaml").write_text(yaml.safe_dump(raw))
    (ws / "syntax.yaml").write_text("name: x\nmixers: [gla\nratios: [pure]\n")
    (ws / "neg.csv").write_text("mixer,ratio,recall,kv_cache_bytes\ngla,pure,0.5,-10\n")
    (ws / "recall75.csv").write_text("mixer,ratio,recall,kv_cache_bytes\ngla,pure,7.5,0\n")
    (ws / "corrupt.db").write_bytes((ws / "s.db").read_bytes())
    with open(ws / "corrupt.db", "r+b") as f:  # a page of the stored study overwritten
        f.seek(4096)
        f.write(b"\xa5" * 4096)
    (ws / "corrupt_trials.db").write_bytes((ws / "s.db").read_bytes())
    with open(ws / "corrupt_trials.db", "r+b") as f:  # a page the study list does not read, its trials do
        f.seek(2 * 4096)
        f.write(b"\xa5" * 4096)
    (ws / "ragged.csv").write_text("mixer,ratio,recall,kv_cache_bytes\ngla,pure,0.5,0\ngla,6:1,0.6\n")
    (ws / "text").mkdir()
    for i in range(6):  # enough documents to split and train a vocabulary on
        (ws / "text" / f"d{i}.txt").write_text(" ".join(f"word{(i * 7 + k) % 50}" for k in range(300)) + "\n")
    run_search(tiny_space(), SearchOptions(storage=f"journal:///{ws}/bad.log", study_name="j", n_trials=1))
    with open(ws / "bad.log", "r+b") as f:
        f.seek(200)
        f.write(b"\xa5" * 64)
    return ws


RESUME = ["search", "--resume", "--storage", "sqlite:///{ws}/s.db", "--study", "st", "--no-progress"]
ALLOWED_CKPT = "allowed: a training output folder (hlnas train --out) or its checkpoint.pt"

# (argv, fragment of the error); "{ws}" stands for the workspace folder. Argparse rejects the "argument ..." ones.
ROWS = [
    # layout
    (["layout", "gdn2x", "--ratio", "6:1"], "unknown mixer 'gdn2x'"),
    (["layout", "gla", "--ratio", "5:1"], "does not divide 24 layers"),
    (["layout", "gla", "--placement", "3,99"], "out of range"),
    (["layout", "gla", "--preset", "paper-3b"], "unknown preset 'paper-3b'"),
    (["layout", "gla", "--layers", "0"], "argument --layers: 0 must be >= 1"),
    # train
    (["train", "gla", "--set", "train.lrr=1"], "unknown train key 'lrr'"),
    (["train", "gla", "--set", "nonsense"], "write SECTION.KEY=VALUE"),
    (["train", "gla", "--out", "/proc/x", "--tokens", "4096"], "--out /proc/x: cannot create that folder"),
    (["train", "gla", "--out", "{ws}/afile/sub", "--tokens", "4096"], "--out {ws}/afile/sub: cannot create that folder (Not a directory)"),
    (["train", "gla", "--device", "tpu", "--tokens", "4096"], "train.device='tpu' is not allowed; allowed: auto, cpu, cuda, cuda:N"),
    # eval: only the path given is scored: a training output folder or its checkpoint.pt (issue 25)
    (["eval", "/nonexistent/run"], f"'/nonexistent/run' does not exist; {ALLOWED_CKPT}"),
    (["eval", "{ws}/run/typo_nope", "--objectives", "val_loss"], f"'{{ws}}/run/typo_nope' does not exist; {ALLOWED_CKPT}"),
    (["eval", "{ws}/run/notes.txt", "--objectives", "val_loss"], f"'{{ws}}/run/notes.txt' is a file but not a checkpoint.pt; {ALLOWED_CKPT}"),
    (["eval", "{ws}/empty", "--objectives", "val_loss"], f"'{{ws}}/empty' is a folder without a checkpoint.pt; {ALLOWED_CKPT}"),
    (["eval", "{ws}/run", "--objectives", "val_loss", "--out", "/proc/e.json"], "--out /proc/e.json: cannot write the file"),
    (["eval", "{ws}/run", "--set", "train.lr=1"], "unknown section 'train'. Allowed: score"),
    (["eval", "{ws}/run", "--set", "score.mqar.steps=1.5"], "score.mqar.steps is an integer; got 1.5"),
    # search
    (["search", "--cpus-per-trial", "0", "--trials", "1"], "--cpus-per-trial must be > 0"),
    (["search", "--storage", "sqlite:///{ws}/nodir/s.db", "--trials", "1"], "storage 'sqlite:///{ws}/nodir/s.db': folder"),
    (["search", "--storage", "postgresql://x@127.0.0.1:1/x", "--trials", "1"], "cannot open storage 'postgresql://x@127.0.0.1:1/x'"),
    (["search", "--calibrate", "--skip-calibration"], "argument --skip-calibration: not allowed with argument --calibrate"),
    ([*RESUME, "--calibrate"], "--calibrate: space 'tiny-test' has no recall objective or has calibration.enabled: false; nothing to calibrate"),
    ([*RESUME, "--space", "{ws}/changed.yaml"], "resuming with a changed space is refused"),
    ([*RESUME, "--set", "train.lr=1"], "a resumed study keeps the settings stored with it"),
    ([*RESUME, "--sampler", "tpe"], "--sampler tpe: study 'st' is searched with --sampler grid; a resumed study keeps "
     "the sampler and seed stored with it"),
    ([*RESUME, "--seed", "7"], "--seed 7: study 'st' is searched with --seed 0; a resumed study keeps the sampler and seed"),
    (["search", "--resume", "--storage", "sqlite:///{ws}/s.db", "--study", "nope"], "no study named 'nope' in sqlite:///{ws}/s.db. Available: st"),
    (["search", "--resume", "--storage", "sqlite:///{ws}/none.db", "--study", "tiny"], "storage 'sqlite:///{ws}/none.db': no such SQLite file"),
    # status, report, dashboard, bench-samplers
    (["status", "--storage", "sqlite:///{ws}/s.db", "--study", "nope"], "no study named 'nope'"),
    (["status", "--storage", "redis://x", "--study", "st"], "scheme 'redis' is not allowed; allowed schemes: sqlite, postgresql, mysql, journal"),
    (["report", "--storage", "sqlite:///{ws}/plain.db", "--study", "plain", "--out", "{ws}/rep", "--no-png"], "study 'plain' was not created by hlnas"),
    (["dashboard", "--port", "99999"], "argument --port: 99999 is not a port number; allowed: 1-65535"),
    (["dashboard", "--port", "-1"], "argument --port: -1 is not a port number; allowed: 1-65535"),
    (["bench-samplers", "--out", "/proc/b", "--seeds", "1", "--samplers", "random"], "--out /proc/b: cannot create that folder"),
    (["bench-samplers", "--table", "{ws}/none.csv"], "results table '{ws}/none.csv' not found"),
    (["bench-samplers", "--table", "{ws}/ragged.csv"], "results table '{ws}/ragged.csv', row 3: 3 fields, the header has 4"),
    (["bench-samplers", "--evals", "0", "--out", "{ws}/ev"], "--evals must be >= 1, got 0"),  # before --out is made
    (["dashboard", "--refresh", "0"], "argument --refresh: 0 must be > 0 seconds"),
    (["layout", "gla", "--placement", "-1,5"], "attention index -1 is out of range; expected a value in [0, 24)"),
    (["train", "gla", "--placement", "-1,5"], "attention index -1 is out of range; expected a value in [0, 24)"),
    # export, corpus: an --out that cannot be made is refused before any work (a full --out disk:
    # tests/test_storage_faults.py)
    (["export", "ZZZZZA", "--out", "/proc/e"], "--out /proc/e: cannot create that folder"),
    (["export", "ZZZZZA", "--out", "{ws}/afile/sub"], "--out {ws}/afile/sub: cannot create that folder (Not a directory"),
    (["export", "--front", "--storage", "sqlite:///{ws}/s.db", "--study", "a\nb"],
     "--study 'a\\nb': a study name may not hold control characters"),
    (["corpus", "build", "mine", "--from", "{ws}/text", "--out", "/proc/c", "--no-progress"],
     "--out /proc/c: cannot create that folder"),
    (["corpus", "build", "../escape", "--from", "{ws}/text", "--no-progress"],
     "corpus name '../escape' is not allowed: it names a folder (corpora/NAME); allowed: letters, digits"),
    (["corpus", "build", "a/b", "--from", "{ws}/text", "--no-progress"], "corpus name 'a/b' is not allowed"),
    (["corpus", "build", "klingon", "--out", "{ws}/k"],
     f"unknown corpus 'klingon'. Built-in: {', '.join(CORPORA)}; or give --from PATH"),
]

# issue 63: (argv, fragment, the one file in the workspace the row may write: a search's own storage, or None)
SEARCH = ["search", "--workers", "1", "--no-progress"]
DAMAGED = "the file is damaged (database disk image is malformed); restore it from a copy"
ROWS_63 = [
    # a failure every trial shares stops the search, in one line naming the cause (a full --out disk:
    # tests/test_shared_failure.py)
    ([*SEARCH, "--space", "{ws}/nheads7.yaml", "--storage", "sqlite:///{ws}/nh.db", "--trials", "4"],
     "the first 3 trials all failed the same way, so no more were started (config): score.mqar.model: d_model=32 must be "
     "divisible by n_heads=7; change that setting", "nh.db"),
    ([*SEARCH, "--space", "{ws}/dmodel-8.yaml", "--storage", "sqlite:///{ws}/dm.db", "--trials", "4"],
     "(config): score.mqar.model: ModelConfig.d_model must be >= 1, got -8", "dm.db"),
    # a storage that fails once open (read-only, full, locked: tests/test_storage_faults.py)
    (["status", "--storage", "sqlite:///{ws}/corrupt.db"], DAMAGED, None),
    (["search", "--resume", "--storage", "sqlite:///{ws}/corrupt.db", "--study", "st", "--no-progress"], DAMAGED, None),
    (["report", "--storage", "sqlite:///{ws}/corrupt.db", "--out", "{ws}/rep", "--no-png"], DAMAGED, None),
    (["dashboard", "--storage", "sqlite:///{ws}/corrupt_trials.db", "--port", "18733"], DAMAGED, None),  # not served
    (["status", "--storage", "journal:///{ws}/bad.log"], "the journal file is damaged (a line is not a whole JSON record)",
     None),
    (["bench-samplers", "--table", "{ws}/binary.yaml"], "results table '{ws}/binary.yaml' is not a CSV text file", None),
    # study names: never empty, never control characters (and never a path: tests/test_study_names.py)
    ([*SEARCH, "--study", "", "--storage", "sqlite:///{ws}/e.db"], "--study '': a study name must be a non-empty string",
     None),
    ([*SEARCH, "--study", "a\nb", "--storage", "sqlite:///{ws}/e.db"],
     "--study 'a\\nb': a study name may not hold control characters (found '\\n' at position 1)", None),
    (["calibrate", "--study", "", "--storage", "sqlite:///{ws}/e.db"], "--study '': a study name must be a non-empty", None),
    (["status", "--storage", "sqlite:///{ws}/s.db", "--study", ""], "--study '': a study name must be a non-empty", None),
    (["report", "--storage", "sqlite:///{ws}/s.db", "--study", "", "--out", "{ws}/rep"], "a study name must be", None),
    (["dashboard", "--storage", "sqlite:///{ws}/s.db", "--study", ""], "a study name must be a non-empty", None),
    (["bench-samplers", "--storage", "sqlite:///{ws}/s.db", "--study", "", "--out", "{ws}/b"], "a study name must be", None),
    # what cannot be meant
    ([*SEARCH, "--storage", "sqlite:///:memory:"], "storage 'sqlite:///:memory:' is in memory: nothing stored in it "
     "outlives the command", None),
    ([*SEARCH, "--storage", "sqlite://"], "storage 'sqlite://' is in memory", None),
    (["status", "--storage", "sqlite:///:memory:"], "is in memory", None),
    ([*SEARCH, "--space", "{ws}/recall_min.yaml"], "objectives[0]: metric 'recall' with direction 'minimize': recall is "
     "maximized", None),
    (["bench-samplers", "--table", "{ws}/neg.csv"], "column 'kv_cache_bytes': -10.0 cannot be; it must be a byte count >= 0",
     None),
    (["bench-samplers", "--table", "{ws}/recall75.csv"], "column 'recall': 7.5 cannot be; it must be a fraction in [0, 1]",
     None),
    ([*SEARCH, "--retry-failed"], "--retry-failed acts on a stored study; it needs --resume", None),
    ([*SEARCH, "--calibrate"], "--calibrate acts on a stored study; it needs --resume", None),
    (["search", "--executor", "processes", "--workers", "2", "--gpus-per-trial", "1", "--storage", "sqlite:///{ws}/e.db"],
     "--gpus-per-trial sets what Ray reserves per trial; it needs --executor ray (got 'processes')", None),
    (["layout", "gla", "--string", "GGGA"], "--string describes the whole layout; drop the mixer and --layers", None),
    # a directory given as a file
    ([*SEARCH, "--space", "{ws}/empty"], "search space '{ws}/empty' is a directory", None),
    (["calibrate", "{ws}/empty"], "search space '{ws}/empty' is a directory", None),
    (["train", "--config", "{ws}/empty"], "recipe file '{ws}/empty' is a directory", None),
    (["bench-samplers", "--table", "{ws}/empty"], "results table '{ws}/empty' is a directory", None),
    ([*SEARCH, "--storage", "sqlite:///{ws}/empty"], "storage 'sqlite:///{ws}/empty': '{ws}/empty' is a directory", None),
    (["status", "--storage", "journal:///{ws}/empty"], "'{ws}/empty' is a directory", None),
    (["eval", "{ws}/run", "--objectives", "val_loss", "--out", "{ws}/empty"], "--out {ws}/empty is a directory", None),
    ([*SEARCH, "--space", "{ws}/binary.yaml"], "search space '{ws}/binary.yaml' is not a text file (byte 0x80", None),
    # a space that lists nothing to search, or is no YAML: refused before a storage is created
    ([*SEARCH, "--space", "{ws}/ratios_empty.yaml", "--storage", "sqlite:///{ws}/new.db"],
     "ratios_empty.yaml: ratios is empty; list at least one, e.g. ratios: [pure, '6:1']; allowed: pure", None),
    ([*SEARCH, "--space", "{ws}/mixers_empty.yaml", "--storage", "sqlite:///{ws}/new.db"],
     "mixers_empty.yaml: mixers is empty; list at least one of hgrn, ", None),
    ([*SEARCH, "--space", "{ws}/syntax.yaml", "--storage", "sqlite:///{ws}/new.db"],
     "syntax.yaml: not valid YAML at line 3, column 7: expected ',' or ']', but got ':' (while parsing a flow sequence "
     "that starts at line 2, column 9)", None),
    (["train", "--config", "{ws}/syntax.yaml", "--out", "{ws}/new"], "syntax.yaml: not valid YAML at line 3, column 7", None),
    ([*SEARCH, "--space", "{ws}/hparams_bad.yaml", "--storage", "sqlite:///{ws}/new.db"],
     "hparams_bad.yaml: scale.model.mixer_hparams['gla']: unknown key 'bogus_opt'. Allowed: ", None),
    # what every trial would fail on alike, refused before the storage is created and a trial trained
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/new.db", "--set", "data.source=/nonexistent/x.txt"],
     "scale.data.source '/nonexistent/x.txt' does not exist; give 'synthetic', an existing file", None),
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/new.db", "--set", "data.source={ws}/run/notes.txt"],
     "scale.data.source '{ws}/run/notes.txt' holds 1 document(s), and the first data.val_docs=64 are held out for "
     "validation, so none is left to train on", None),
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/new.db", "--out", "/proc/x"],
     "--out /proc/x: cannot create that folder", None),
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/new.db", "--out", "{ws}/afile"],
     "--out {ws}/afile is a file; give a folder", None),
    (["train", "gla", "--out", "{ws}/afile", "--tokens", "4096"], "--out {ws}/afile is a file; give a folder", None),
    # an empty --storage is a mistake, not the default sqlite:///hlnas.db
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", ""], "storage '' is not a URL; allowed schemes: sqlite, ", None),
    (["status", "--storage", ""], "storage '' is not a URL; allowed schemes: sqlite, ", None),
    # the studies --calibrated-by and --results-from name must exist, and a storage not there yet holds none
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/new.db", "--calibrated-by", "ghost"],
     "no study named 'ghost' in sqlite:///{ws}/new.db. Available: none (the storage does not exist yet)", None),
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/s.db", "--study", "x", "--calibrated-by", "ghost"],
     "no study named 'ghost' in sqlite:///{ws}/s.db.", None),
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "sqlite:///{ws}/new.db", "--results-from", "ghost"],
     "no study named 'ghost' in sqlite:///{ws}/new.db. Available: none", None),
    ([*SEARCH, "--space", "{ws}/fast.yaml", "--storage", "journal:///{ws}/new.log", "--study", "me", "--results-from", "me"],
     "no study named 'me' in journal:///{ws}/new.log. Available: none", None),
]


ALL_ROWS = [(a, m, None) for a, m in ROWS] + ROWS_63


@pytest.mark.parametrize(("argv", "message", "writes"), ALL_ROWS, ids=[" ".join(a)[:60] for a, _, _ in ALL_ROWS])
def test_a_bad_input_is_one_clear_line_and_exit_2(ws, monkeypatch, capsys, argv, message, writes):
    monkeypatch.chdir(ws)  # rows without a path write nothing here, or fail before they could
    argv = [a.format(ws=ws) for a in argv]
    message = message.format(ws=ws)
    before = {p: p.stat().st_mtime_ns for p in ws.rglob("*") if p.name != writes}
    if message.startswith("argument "):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    else:
        assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith(f"hlnas {argv[0]}: error: ")]
    assert len(errors) == 1 and "Traceback" not in err  # the error's own line, after any progress or usage lines
    assert message in err[err.index(errors[0]):]
    assert {p: p.stat().st_mtime_ns for p in ws.rglob("*") if p.name != writes} == before  # nothing written, nothing scored


@pytest.mark.parametrize("url", ["postgres://x", "sqlite:////nonexistent/dir/s.db", "hlnas.db"])
def test_search_refuses_a_bad_storage_url_before_it_announces_the_study(ws, monkeypatch, capsys, url):
    monkeypatch.chdir(ws)
    assert main(["search", "--storage", url, "--trials", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hlnas search: error: storage '{url}'")  # no "study ... in" banner

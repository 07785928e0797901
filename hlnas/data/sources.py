"""Text sources: where training documents come from.

A source is named by one string, ``DataConfig.source``:

* ``"synthetic"`` (default): the deterministic offline corpus of :mod:`hlnas.data.corpus`
  (infinite; the seed picks the documents);
* a local path: a ``.txt`` file (documents separated by blank lines), a ``.jsonl``/``.json`` file
  (one JSON object per line, text in ``text_key``), a ``.parquet`` file (column ``text_key``, read in
  row-group batches), or a directory holding such files (read in sorted path order);
* a corpus folder built by ``hlnas corpus build`` (:mod:`hlnas.data.token_corpus`): documents already tokenized,
  split by document when it was built (its validation split is the validation documents; ``val_docs`` does not
  apply) and read with its own tokenizer (``DataConfig.tokenizer`` = the same folder);
* ``"hf:NAME"`` or ``"hf:NAME:CONFIG"``: a Hugging Face dataset, streamed (the paper trained on
  ``hf:HuggingFaceFW/fineweb-edu:sample-10BT``). NAME may also be a local dataset folder, which
  works offline.

:func:`iter_documents` yields the documents of a source as strings, always in the same order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hlnas.errors import ConfigError, DataSourceError, did_you_mean

from .corpus import synthetic_documents

__all__ = ["DataConfig", "DataSourceError", "iter_documents", "FILE_EXTENSIONS"]

FILE_EXTENSIONS = (".txt", ".jsonl", ".json", ".parquet")
_PARQUET_BATCH_ROWS = 1024  # rows per pyarrow batch: bounded memory on multi-GB files


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where training text comes from and how it is split and ordered.

    ``seed`` picks the synthetic corpus and the shuffle order; ``val_docs`` is how many documents,
    taken from the start of the source, are held out for validation (never trained on).
    ``shuffle_rows`` > 0 shuffles packed training rows within consecutive blocks of that many rows.
    """

    source: str = "synthetic"
    tokenizer: str = "bytes"
    text_key: str = "text"
    hf_split: str = "train"
    seed: int = 0
    val_docs: int = 64
    shuffle_rows: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source:
            raise ConfigError(f"DataConfig.source must be a non-empty string, got {self.source!r}; "
                              "give 'synthetic', a local path, or 'hf:NAME[:CONFIG]'")
        if self.val_docs < 1:
            raise ConfigError(f"DataConfig.val_docs must be >= 1, got {self.val_docs}")
        if self.shuffle_rows < 0:
            raise ConfigError(f"DataConfig.shuffle_rows must be >= 0 (0 = no shuffle), got {self.shuffle_rows}")
        if not self.text_key:
            raise ConfigError("DataConfig.text_key must be a non-empty column name, got ''")

    def to_dict(self) -> dict:
        from hlnas.overrides import config_to_dict

        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "DataConfig":
        from hlnas.overrides import config_from_dict

        return config_from_dict(cls, data, "data config")


def iter_documents(cfg: DataConfig) -> Iterator[str | list[int]]:
    """The documents of ``cfg.source`` in a fixed order (infinite for ``synthetic``, else one pass; token id lists for
    a built corpus).

    Empty or missing (``None``) texts are skipped. Raises :class:`DataSourceError` on an unreadable
    source; for files, the check runs before the first document is yielded.
    """
    src = cfg.source
    if src == "synthetic":
        return synthetic_documents(cfg.seed)
    if src.startswith("hf:"):
        return _iter_hf(src[3:], cfg)
    path = Path(src).expanduser()
    from .token_corpus import TokenCorpus, is_token_corpus

    if is_token_corpus(path):  # token id lists: the validation split, then the training split in the corpus's order
        corpus = TokenCorpus(path)
        return iter([*corpus.documents("val"), *corpus.documents("train")])
    if not path.exists():
        raise DataSourceError(
            f"data source '{src}' does not exist; give 'synthetic', an existing file ({', '.join(FILE_EXTENSIONS)}) "
            "or directory of such files, or 'hf:NAME[:CONFIG]' for a Hugging Face dataset")
    files = _list_files(path)
    for f in files:  # fail on a wrong column before any document is produced
        _check_file(f, cfg.text_key)
    return _iter_files(files, cfg.text_key)


def _list_files(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix.lower() not in FILE_EXTENSIONS:
            raise DataSourceError(f"data file '{path}' has extension '{path.suffix}'; allowed: {', '.join(FILE_EXTENSIONS)}")
        return [path]
    # Sorted relative paths, hidden entries skipped (.git, .cache): the order must not depend on the filesystem.
    files = sorted(
        (p for p in path.rglob("*")
         if p.is_file() and p.suffix.lower() in FILE_EXTENSIONS
         and not any(part.startswith(".") for part in p.relative_to(path).parts)),
        key=lambda p: p.relative_to(path).as_posix(),
    )
    if not files:
        raise DataSourceError(f"data directory '{path}' holds no file with extension {', '.join(FILE_EXTENSIONS)}")
    return files


def _check_file(path: Path, key: str) -> None:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
        if key not in names:
            raise DataSourceError(f"parquet file '{path}' has no column '{key}' (text_key); "
                                  f"columns: {', '.join(names)}.{did_you_mean(key, names)}")
    elif suffix in (".jsonl", ".json"):
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    _json_text(line, key, path, lineno)
                    break


def _iter_files(files: list[Path], key: str) -> Iterator[str]:
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".txt":
            yield from _iter_txt(path)
        elif suffix == ".parquet":
            yield from _iter_parquet(path, key)
        else:
            yield from _iter_jsonl(path, key)


def _iter_txt(path: Path) -> Iterator[str]:
    lines: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                lines.append(line.rstrip("\n"))
            elif lines:
                yield "\n".join(lines)
                lines = []
    if lines:
        yield "\n".join(lines)


def _json_text(line: str, key: str, path: Path, lineno: int) -> str | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataSourceError(f"{path}:{lineno} is not valid JSON ({e.msg}); .json/.jsonl sources need one JSON object "
                              "per line (JSON Lines), not one JSON document") from None
    if not isinstance(row, dict):
        raise DataSourceError(f"{path}:{lineno} holds a {type(row).__name__}, not a JSON object; "
                              "give one object per line with the text under text_key")
    if key not in row:
        names = list(row)
        raise DataSourceError(f"{path}:{lineno} has no field '{key}' (text_key); fields: {', '.join(names)}."
                              f"{did_you_mean(key, names)}")
    return _as_text(row[key], f"{path}:{lineno}", key)


def _iter_jsonl(path: Path, key: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                text = _json_text(line, key, path, lineno)
                if text:
                    yield text


def _iter_parquet(path: Path, key: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    row = 0
    with pq.ParquetFile(path) as pf:
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=[key]):
            for value in batch.column(0).to_pylist():
                text = _as_text(value, f"{path} row {row}", key)
                row += 1
                if text:
                    yield text


def _as_text(value: object, where: str, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise DataSourceError(f"{where}: field '{key}' holds a {type(value).__name__}, not text; set text_key to a text column")


def _split_hf(spec: str) -> tuple[str, str | None]:
    # A local folder may itself contain ':'; only split when the whole spec is not a path.
    if os.path.exists(spec) or ":" not in spec:
        return spec, None
    name, config = spec.split(":", 1)
    return name, config or None


def _iter_hf(spec: str, cfg: DataConfig) -> Iterator[str]:
    name, config = _split_hf(spec)
    if not name:
        raise DataSourceError(f"data source 'hf:{spec}' names no dataset; write 'hf:NAME' or 'hf:NAME:CONFIG'")
    where = f"Hugging Face dataset '{name}'" + (f" (config '{config}')" if config else "") + f" split '{cfg.hf_split}'"
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a dependency of lm-eval
        raise DataSourceError(f"{where} needs the 'datasets' package: {e}") from e
    try:
        ds = datasets.load_dataset(name, config, split=cfg.hf_split, streaming=True)
    except Exception as e:  # datasets raises ConnectionError, FileNotFoundError, ValueError, ... by cause
        if os.path.isdir(name):
            hint = "check that the folder holds data files and the split exists"
        else:
            hint = ("streaming it needs network access to the Hugging Face Hub (offline when HF_DATASETS_OFFLINE=1 "
                    "or HF_HUB_OFFLINE=1); otherwise give a local copy as 'hf:/path/to/folder' or a file/directory "
                    "source")
        raise DataSourceError(f"could not load {where}: {type(e).__name__}: {e}; {hint}") from e
    # Streaming datasets usually know their columns up front (None when the builder cannot tell).
    columns = getattr(ds, "column_names", None)
    if columns is not None and cfg.text_key not in columns:
        raise DataSourceError(f"{where} has no column '{cfg.text_key}' (text_key); columns: {', '.join(columns)}."
                              f"{did_you_mean(cfg.text_key, columns)}")
    return _iter_hf_rows(ds, where, cfg.text_key)


def _iter_hf_rows(ds, where: str, key: str) -> Iterator[str]:
    for i, row in enumerate(ds):
        if key not in row:
            raise DataSourceError(f"{where} row {i} has no column '{key}' (text_key); columns: {', '.join(row)}.")
        text = _as_text(row[key], f"{where} row {i}", key)
        if text:
            yield text

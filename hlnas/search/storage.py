"""Opening Optuna study storages by URL, with errors that name the URL and what is allowed.

``sqlite:///file.db`` (default), any Optuna RDB URL (``postgresql://``, ``mysql://``, with an optional
``+driver``), or ``journal:///path/file.log`` (Optuna's JournalStorage, for file systems where SQLite
locking is unreliable). Readers (status, dashboard, report) open with ``create=False`` so a typo in a
file path is an error instead of a new empty database; the search opens with ``create=True``.
"""

from __future__ import annotations

import os

import optuna

from hlnas.errors import HlnasError, did_you_mean

__all__ = ["StorageError", "UnknownStudyError", "ALLOWED_SCHEMES", "DEFAULT_STORAGE", "open_storage", "load_study", "study_names",
           "only_study_name", "check_storage_url"]

DEFAULT_STORAGE = "sqlite:///hlnas.db"
SQLITE_BUSY_TIMEOUT_S = 120.0  # how long a SQLite write waits for another connection's lock
#: optuna's RDB dialects (a driver may follow: ``postgresql+psycopg2://``) and its journal file.
ALLOWED_SCHEMES = ("sqlite", "postgresql", "mysql", "journal")
_EXAMPLES = "sqlite:///path/to/study.db, postgresql://user@host/db, mysql://user@host/db, journal:///path/to/study.log"


class StorageError(HlnasError, ValueError):
    """A storage URL is malformed, of a scheme Optuna cannot open, or unreachable."""


class UnknownStudyError(HlnasError, ValueError):
    """No study of that name in the storage."""


def _file_path(url: str) -> str:
    path = url.split("://", 1)[1].split("?", 1)[0]
    return path[1:] if path.startswith("/") else path  # sqlite:///rel.db -> rel.db, sqlite:////abs.db -> /abs.db


def check_storage_url(url: str, *, create: bool = False) -> tuple[str, str | None]:
    """``url``'s storage kind and file path (None for a server), or :class:`StorageError` for a malformed URL, a scheme
    Optuna cannot open, or a file that is missing (``create`` false) or whose folder is missing (``create`` true);
    nothing is opened or written, so a command can refuse a bad URL before it starts."""
    if not isinstance(url, str) or "://" not in url:
        raise StorageError(f"storage {url!r} is not a URL; allowed schemes: {', '.join(ALLOWED_SCHEMES)} (e.g. {_EXAMPLES})")
    scheme = url.split("://", 1)[0]
    kind = scheme.split("+", 1)[0].lower()
    if kind not in ALLOWED_SCHEMES:
        raise StorageError(
            f"storage {url!r}: scheme '{scheme}' is not allowed; allowed schemes: {', '.join(ALLOWED_SCHEMES)} (e.g. {_EXAMPLES})"
        )
    if kind in ("sqlite", "journal"):
        path = _file_path(url)
        if kind == "journal" and not path:
            raise StorageError(f"storage {url!r} names no file; write journal:///path/to/study.log")
        if path and path != ":memory:":
            if kind == "journal" and os.path.isfile(path) and not _is_journal(path):
                raise StorageError(f"storage {url!r}: '{path}' exists and is not an Optuna journal (its first line is no "
                                   "journal record); it was left untouched: name a new file or an existing journal")
            if create:
                parent = os.path.dirname(os.path.abspath(path))
                if not os.path.isdir(parent):
                    raise StorageError(f"storage {url!r}: folder '{parent}' does not exist")
            elif not os.path.isfile(path):
                raise StorageError(
                    f"storage {url!r}: no such {'SQLite' if kind == 'sqlite' else 'journal'} file '{os.path.abspath(path)}' "
                    f"(relative paths start at {os.getcwd()}); check the path, or run a study first to create it"
                )
        return kind, path
    return kind, None


def open_storage(url: str | optuna.storages.BaseStorage, *, create: bool = False) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url`` (a storage object is returned as is)."""
    if isinstance(url, optuna.storages.BaseStorage):
        return url
    kind, path = check_storage_url(url, create=create)
    try:
        if kind == "journal":
            from optuna.storages.journal import JournalFileBackend

            return optuna.storages.JournalStorage(JournalFileBackend(path))
        if kind == "sqlite":
            # a reader (the dashboard, `hlnas status`, a second search) can hold SQLite's lock for a moment; wait
            # for it rather than fail the search after sqlite's default 5 s ("database is locked")
            return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}})
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as e:  # sqlalchemy and driver errors: not a database, unreachable host, missing driver
        raise StorageError(
            f"cannot open storage {url!r}: {type(e).__name__}: {str(e).splitlines()[0][:300]}; allowed schemes: {', '.join(ALLOWED_SCHEMES)}"
        ) from None


def _is_journal(path: str) -> bool:
    """An empty file, or one whose first line is a JSON journal record (optuna's op_code)."""
    import json

    with open(path, "rb") as f:
        first = f.readline(1 << 16)
    if not first.strip():
        return True
    try:
        return isinstance(rec := json.loads(first), dict) and "op_code" in rec
    except ValueError:
        return False


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]


def only_study_name(storage: str) -> str:
    """The one study ``storage`` holds, for a reader called without ``--study``; :class:`UnknownStudyError` listing
    them when it holds none or several (a guess among several could show the wrong study's front)."""
    names = sorted(study_names(open_storage(storage)))
    if len(names) == 1:
        return names[0]
    if not names:
        raise UnknownStudyError(f"{storage} holds no study yet (hlnas search stores one)")
    raise UnknownStudyError(f"{storage} holds {len(names)} studies; name one with --study: {', '.join(names)}")


def load_study(storage: str | optuna.storages.BaseStorage, study_name: str) -> optuna.Study:
    """The study ``study_name``, or :class:`UnknownStudyError` listing the studies the storage holds."""
    storage_obj = open_storage(storage)
    names = study_names(storage_obj)
    if study_name not in names:
        where = storage if isinstance(storage, str) else getattr(storage_obj, "url", "the storage")
        available = ", ".join(sorted(names)) or "none (the storage holds no study yet)"
        raise UnknownStudyError(f"no study named '{study_name}' in {where}.{did_you_mean(study_name, names)} Available: {available}")
    return optuna.load_study(study_name=study_name, storage=storage_obj)

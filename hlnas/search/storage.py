"""Opening Optuna study storages by URL, with errors that name the URL and what is allowed.

``sqlite:///file.db`` (default), any Optuna RDB URL (``postgresql://``, ``mysql://``, with an optional
``+driver``), or ``journal:///path/file.log`` (Optuna's JournalStorage, for file systems where SQLite
locking is unreliable). Readers (status, dashboard, report) open with ``create=False`` so a typo in a
file path is an error instead of a new empty database; the search opens with ``create=True``, which also refuses a
file it could not write. A storage in memory is refused: nothing in it would outlive the command.

Once open, a storage can still fail (read-only, full, damaged, locked): :func:`storage_failure` turns what SQLite,
SQLAlchemy or the journal raised into one :class:`StorageError` line naming the storage, the cause in plain words and
the remedy. Study names are checked where they are first read (:func:`check_study_name`) and never used as a path
as they are (:func:`study_slug`).
"""

from __future__ import annotations

import errno
import os
import re
import unicodedata

import optuna

from hlnas.errors import HlnasError, did_you_mean

__all__ = ["StorageError", "UnknownStudyError", "ALLOWED_SCHEMES", "DEFAULT_STORAGE", "open_storage", "load_study", "study_names",
           "only_study_name", "check_storage_url", "storage_failure", "check_study_name", "study_slug", "resumable"]

DEFAULT_STORAGE = "sqlite:///hlnas.db"
SQLITE_BUSY_TIMEOUT_S = 120.0  # how long a SQLite write waits for another connection's lock
#: optuna's RDB dialects (a driver may follow: ``postgresql+psycopg2://``) and its journal file.
ALLOWED_SCHEMES = ("sqlite", "postgresql", "mysql", "journal")
# a server's driver (SQLAlchemy's default for mysql:// is mysqlclient, which needs a compiler and MySQL's headers)
_DRIVERS = {"mysql": ("pymysql", "mysql+pymysql://user@host/db"),
            "postgresql": ("psycopg2-binary", "postgresql+psycopg2://user@host/db")}
_EXAMPLES = "sqlite:///path/to/study.db, postgresql://user@host/db, mysql://user@host/db, journal:///path/to/study.log"


class StorageError(HlnasError, ValueError):
    """A storage URL is malformed, of a scheme Optuna cannot open, or unreachable."""


class UnknownStudyError(HlnasError, ValueError):
    """No study of that name in the storage, or a name no storage should hold (empty, control characters)."""


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
    if "+" in scheme and kind != "journal":
        _check_driver(url, scheme, kind)
    if kind in ("sqlite", "journal"):
        path = _file_path(url)
        if kind == "journal" and not path:
            raise StorageError(f"storage {url!r} names no file; write journal:///path/to/study.log")
        if kind == "sqlite" and path in ("", ":memory:"):
            raise StorageError(f"storage {url!r} is in memory: nothing stored in it outlives the command; name a file, "
                               "e.g. sqlite:///hlnas.db")
        if os.path.isdir(path):
            raise StorageError(f"storage {url!r}: '{path}' is a directory; name a file in it, e.g. "
                               f"{kind}:///{os.path.join(path, 'hlnas.db' if kind == 'sqlite' else 'hlnas.log')}")
        if path:
            if kind == "journal" and os.path.isfile(path) and not _is_journal(path):
                raise StorageError(f"storage {url!r}: '{path}' exists and is not an Optuna journal (its first line is no "
                                   "journal record); it was left untouched: name a new file or an existing journal")
            if create:
                parent = os.path.dirname(os.path.abspath(path))
                if not os.path.isdir(parent):
                    raise StorageError(f"storage {url!r}: folder '{parent}' does not exist")
                # SQLite writes a journal beside the file, the journal storage a lock file: both need the folder
                unwritable = [p for p in (path, parent) if os.path.exists(p) and not os.access(p, os.W_OK)]
                if unwritable:
                    raise StorageError(f"storage {url!r}: '{unwritable[0]}' is read-only, and a search writes there; "
                                       f"make it writable (chmod u+w), or copy the file somewhere writable and pass that")
            elif not os.path.isfile(path):
                raise StorageError(
                    f"storage {url!r}: no such {'SQLite' if kind == 'sqlite' else 'journal'} file '{os.path.abspath(path)}' "
                    f"(relative paths start at {os.getcwd()}); check the path, or run a study first to create it"
                )
        return kind, path
    return kind, None


def _check_driver(url: str, scheme: str, kind: str) -> None:
    """A ``dialect+driver`` scheme names a driver SQLAlchemy knows (its dialect module loads; the driver package itself
    is not imported, so a known driver that is not installed is left to :func:`open_storage`'s message)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect()
    except NoSuchModuleError:
        example = _DRIVERS.get(kind, (None, "sqlite:///path/to/study.db"))[1]
        raise StorageError(f"storage {url!r}: '{scheme.split('+', 1)[1]}' is not a database driver SQLAlchemy knows for "
                           f"{kind}; leave it out ({kind}://...) or name a known one, e.g. {example}") from None
    except (ArgumentError, ImportError, ValueError):
        return  # a malformed URL or a driver package missing: open_storage says which


def open_storage(url: str | optuna.storages.BaseStorage, *, create: bool = False) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url`` (a storage object is returned as is)."""
    if isinstance(url, optuna.storages.BaseStorage):
        return url
    kind, path = check_storage_url(url, create=create)
    try:
        if kind == "journal":
            from optuna.storages.journal import JournalFileBackend

            _check_journal_end(url, path)
            return optuna.storages.JournalStorage(JournalFileBackend(path))
        if kind == "sqlite":
            # a reader (the dashboard, `hlnas status`, a second search) can hold SQLite's lock for a moment; wait
            # for it rather than fail the search after sqlite's default 5 s ("database is locked")
            return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}})
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as e:  # sqlalchemy and driver errors: not a database, unreachable host, missing driver
        if kind in _DRIVERS and any(isinstance(x, ImportError) for x in _chain(e)):
            package, example = _DRIVERS[kind]
            raise StorageError(f"storage {url!r}: its database driver is not installed here ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:160]}); install one, e.g. `pip install {package}`, and name "
                               f"it in the URL: {example}") from None
        failure = storage_failure(e, url, generic=False)
        if failure is not None:  # read-only, damaged, locked, ...: said in plain words
            raise failure from None
        raise StorageError(
            f"cannot open storage {url!r}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            + (f"; allowed schemes: {', '.join(ALLOWED_SCHEMES)}" if _url_error(e) else "")
        ) from None


def _check_journal_end(url: str, path: str) -> None:
    """Refuse a journal whose last record was cut short (every record ends with a newline): a reader would skip it
    without a word, and a writer would append to the broken line and make the journal unreadable."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
    raise StorageError(f"storage {url!r}: the journal's last record is cut short (a write was interrupted); the records "
                       "before it are intact: remove the partial last line (everything after the last newline) or "
                       "restore the file from a copy, then run again")


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


def _url_error(e: BaseException) -> bool:
    """The URL itself is wrong (an unknown dialect or driver, a malformed URL): worth listing the allowed schemes."""
    return type(e).__name__ in ("NoSuchModuleError", "ArgumentError") or isinstance(e, ImportError)


def _chain(e: BaseException | None) -> list[BaseException]:
    """``e``, its causes and contexts, and the DB-API errors SQLAlchemy wraps (``.orig``)."""
    out: list[BaseException] = []
    while e is not None and e not in out:
        out.append(e)
        orig = getattr(e, "orig", None)
        if isinstance(orig, BaseException) and orig not in out:
            out.append(orig)
        e = e.__cause__ or e.__context__
    return out


def _from_storage(chain: list[BaseException]) -> bool:
    """Whether the failure came from a storage: a database error, or an error raised inside optuna's storages."""
    for x in chain:
        if type(x).__module__.split(".")[0] in ("sqlalchemy", "sqlite3", "psycopg2", "psycopg", "pymysql"):
            return True
        if isinstance(x, optuna.exceptions.StorageInternalError):
            return True
        tb = x.__traceback__
        while tb is not None:
            if f"optuna{os.sep}storages" in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
    return False


_AGAIN = "then run the command again (completed trials are stored, and --resume re-queues a trial that was running)"
#: what SQLite and the file system say (phrases, errno values), the cause in plain words, the remedy ({path}: the file)
_CAUSES = (
    (("readonly database", "read-only file system"), (errno.EROFS, errno.EACCES, errno.EPERM),
     "it is read-only", "make {path} and its folder writable (chmod u+w), or copy it somewhere writable and pass that"),
    (("database or disk is full",), (errno.ENOSPC, errno.EDQUOT, errno.EFBIG),
     "there is no room for it ({room})", "make room (free space on its disk, or raise the limit), " + _AGAIN),
    (("disk i/o error",), (errno.EIO,),  # SQLite's word for a write refused at a file-size limit, or a failing disk
     "a write to it failed ({room})", "make room (free space on its disk, or raise the limit) or check the disk, "
     + _AGAIN),
    (("malformed", "file is not a database"), (),
     "the file is damaged", "restore it from a copy, or salvage what it holds: sqlite3 {path} .recover | sqlite3 "
     "recovered.db, then pass --storage sqlite:///recovered.db"),
    (("database is locked",), (),
     "another process held its lock for over {busy:.0f} s", "close the program holding it (a sqlite3 shell, a stuck "
     "hlnas), " + _AGAIN),
    (("unable to open database file",), (),
     "the file cannot be opened (its folder is missing, or not writable for SQLite's journal)",
     "check the path and make its folder writable"),
    (("codec can't decode", "expecting value", "unterminated string", "extra data"), (),
     "the journal file is damaged (a line is not a whole JSON record)",
     "restore it from a copy, or cut it after its last whole line"),
)


def storage_failure(e: BaseException, url: str, *, generic: bool = True) -> StorageError | None:
    """The :class:`StorageError` to show for ``e`` when it came from storage ``url`` (read-only, full, damaged,
    locked, ...): one line naming the storage, the cause in plain words with the storage's own words, and the
    remedy; None when ``e`` did not come from a storage (it is not this function's to explain), or, unless
    ``generic``, when its cause is none of those."""
    if isinstance(e, HlnasError):
        return e if isinstance(e, StorageError) else None
    chain = _chain(e)
    if not _from_storage(chain):
        return None
    kind = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    path = _file_path(url) if kind in ("sqlite", "journal") else url
    lines = [str(x).splitlines()[0] if str(x).strip() else type(x).__name__ for x in chain]
    for phrases, errnos, plain, remedy in _CAUSES:
        hit = next((x for x in chain if isinstance(x, OSError) and x.errno in errnos), None)
        said = hit.strerror if hit is not None else next((ln for ln in lines if any(p in ln.lower() for p in phrases)), None)
        if said is not None:
            said = re.sub(r"^\(\S+\) ", "", said)[:200]  # "(sqlite3.OperationalError) attempt to ..." -> "attempt to ..."
            room = _room(path) if "{room}" in plain else ""
            return StorageError(f"storage {url!r}: {plain.format(busy=SQLITE_BUSY_TIMEOUT_S, room=room)} ({said}); "
                                f"{remedy.format(path=path)}")
    return StorageError(f"storage {url!r} failed: {type(chain[-1]).__name__}: {lines[-1][:300]}") if generic else None


def _room(path: str) -> str:
    """Why a write to ``path`` may have found no room: this process's file-size limit, or the free space left."""
    import shutil

    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and os.path.getsize(path) + (1 << 16) >= limit:
            return f"its size reached this process's file-size limit, ulimit -f, of {limit:,} bytes"
    except (ImportError, OSError):
        pass
    try:
        return f"{shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free:,} bytes free on its disk"
    except OSError:
        return "its disk's free space unknown"


#: what an optuna storage keeps of a study name (its RDB column; longer names failed as "exceeding max length")
MAX_NAME = 512


def check_study_name(name, flag: str = "--study") -> str:
    """``name`` when a storage can hold it and a terminal can show it: a non-empty string of at most :data:`MAX_NAME`
    characters, none of them a control character; else :class:`UnknownStudyError` saying which rule it broke."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownStudyError(f"{flag} {name!r}: a study name must be a non-empty string (letters, digits, spaces, "
                                "punctuation)")
    bad = next(((i, c) for i, c in enumerate(name) if unicodedata.category(c) in ("Cc", "Cf", "Cs")), None)
    if bad is not None:
        raise UnknownStudyError(f"{flag} {name!r}: a study name may not hold control characters (found {bad[1]!r} at "
                                f"position {bad[0]}); use letters, digits, spaces and punctuation")
    if len(name) > MAX_NAME:
        raise UnknownStudyError(f"{flag}: a study name of {len(name)} characters is longer than the {MAX_NAME} a "
                                "storage keeps")
    return name


def study_slug(name: str, study_id: int) -> str:
    """A folder name for study ``name`` (id ``study_id`` in its storage): the name's letters, digits, ``.``, ``_`` and
    ``-`` (others become ``-``; at most 40), then the id. Never a path: no separator, never ``.`` or ``..``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:40].strip(".-")
    return f"{slug or 'study'}-{study_id}"


def resumable(storage: str, name: str) -> bool | None:
    """Whether ``hlnas search --resume --storage STORAGE --study NAME`` would find the study: it is stored with its
    space (a study interrupted before that is replaced by the next new search). False when the storage or the study
    does not exist, None when the storage cannot be read (unknown)."""
    try:
        store = open_storage(storage)
    except StorageError:
        if storage.split("://", 1)[0].split("+", 1)[0].lower() in ("sqlite", "journal"):
            return False  # no such file: nothing was written
        return None
    try:
        return name in study_names(store) and "hlnas_space" in optuna.load_study(study_name=name, storage=store).user_attrs
    except Exception:
        return None

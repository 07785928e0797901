"""Files and folders named by a command-line option: output folders created and files written, input text files
read, or refused in one line that names the option and why (read-only, under a file, no permission, a directory
given as a file, a binary file) instead of an OSError or UnicodeDecodeError traceback."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hlnas.errors import DiskFull, HlnasError, no_room

__all__ = ["output_dir", "check_output_dir", "write_atomic", "remove_quietly", "missing_dirs", "remove_dirs", "write_output", "read_input"]


def output_dir(path: str, flag: str = "--out") -> Path:
    """Create an output folder, or say in one line why it cannot be (read-only, under a file, no permission)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise HlnasError(f"{flag} {path} is a file; give a folder (a new one is created)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HlnasError(f"{flag} {path}: cannot create that folder ({e.strerror or type(e).__name__}); give a writable folder") from None
    return out


def check_output_dir(path: str, flag: str = "--out") -> None:
    """Say in one line why folder ``path`` could not be created or written to, without creating it: its nearest
    existing ancestor must be a folder in which a folder can be made (probed with one made and removed at once)."""
    p = Path(path).absolute()
    if p.exists() and not p.is_dir():
        raise HlnasError(f"{flag} {path}: is a file, not a folder; give a folder")
    base = p
    while not base.exists() and base.parent != base:
        base = base.parent
    if not base.is_dir():
        raise HlnasError(f"{flag} {path}: cannot create that folder (Not a directory: {base} is a file); give a "
                         "writable folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hlnas-probe-", dir=base))
    except OSError as e:
        raise HlnasError(f"{flag} {path}: cannot create that folder ({e.strerror or type(e).__name__}); give a "
                         "writable folder") from None


def missing_dirs(path) -> list[Path]:
    """The folders that creating folder ``path`` would make, deepest first (to remove them again on a failure)."""
    p, missing = Path(path).absolute(), []
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    return missing


def remove_dirs(dirs) -> None:
    """Remove the folders of :func:`missing_dirs` that are still empty, deepest first."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            break


def remove_quietly(*paths) -> None:
    """Remove files (a partial output), ignoring those already gone."""
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def write_atomic(path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, renamed into place once whole: a failure leaves
    no partial file (the temporary is removed) and the previous ``path``, if any, untouched. No room on the disk
    raises :class:`~hlnas.errors.DiskFull` naming ``path``; another OSError is one line naming it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException as e:
        remove_quietly(tmp)
        full = no_room(e)
        if full is not None:
            raise DiskFull(path, full) from None
        if isinstance(e, OSError):
            raise HlnasError(f"cannot write {path} ({e.strerror or type(e).__name__}); give a writable folder") from None
        raise


def write_output(path: Path, text: str, flag: str = "--out") -> None:
    """Write ``text`` to ``path``, or say in one line why it cannot be."""
    if path.is_dir():
        raise HlnasError(f"{flag} {path} is a directory; give a file path (e.g. {path / 'out.json'})")
    try:
        path.write_text(text)
    except OSError as e:
        raise HlnasError(f"{flag} {path}: cannot write the file ({e.strerror or type(e).__name__}); give a writable path") from None


def read_input(path: str | Path, what: str, error: type[HlnasError] = HlnasError) -> str:
    """The text of input file ``path`` (``what`` names it in messages: "search space", "recipe file"), or ``error``
    in one line when it is a directory, missing, unreadable or not UTF-8 text."""
    p = Path(path)
    if p.is_dir():
        raise error(f"{what} '{path}' is a directory; give a file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} '{path}' is not a text file (byte {e.object[e.start]:#04x} at offset {e.start} is not "
                    "UTF-8)") from None
    except OSError as e:
        raise error(f"{what} '{path}': cannot read it ({e.strerror or type(e).__name__})") from None

"""Files and folders named by a command-line option: output folders created and files written, input text files
read, or refused in one line that names the option and why (read-only, under a file, no permission, a directory
given as a file, a binary file) instead of an OSError or UnicodeDecodeError traceback."""

from __future__ import annotations

from pathlib import Path

from hlnas.errors import HlnasError

__all__ = ["output_dir", "write_output", "read_input"]


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

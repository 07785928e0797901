"""Markup and boilerplate stripped from a document before it is tokenized: what a language model should learn is
the prose, not reStructuredText directives, HTML tags or Project Gutenberg's licence header.

:func:`clean` takes the text and its markup (:data:`MARKUPS`): ``plain`` (whitespace only), ``gutenberg`` (the
``*** START OF`` / ``*** END OF`` boilerplate cut, then plain), ``rst`` (reStructuredText: code, directives that hold
no prose, comments, targets, tables and section adornments dropped; roles and inline markup reduced to their text;
paragraphs joined into lines), ``html`` (tags dropped, ``<pre>``/``<script>``/``<style>`` dropped, entities decoded,
block elements as paragraph breaks) and ``markdown`` (fenced code, images and link targets dropped). A file's markup
follows from its name (:func:`markup_for`).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from hlnas.errors import ConfigError

__all__ = ["MARKUPS", "clean", "markup_for", "strip_gutenberg", "strip_rst", "strip_html", "strip_markdown"]

MARKUPS = ("plain", "gutenberg", "rst", "html", "markdown")

_SUFFIX_MARKUP = ((".rst.txt", "rst"), (".rst", "rst"), (".html", "html"), (".htm", "html"), (".md", "markdown"),
                  (".markdown", "markdown"), (".txt", "gutenberg"), (".text", "gutenberg"))


def markup_for(name: str) -> str:
    """A file's markup from its name; plain text goes through the Gutenberg cutter, a no-op without its markers."""
    low = name.lower()
    return next((m for suffix, m in _SUFFIX_MARKUP if low.endswith(suffix)), "plain")


def clean(text: str, markup: str) -> str:
    """``text`` without ``markup``'s syntax and boilerplate, whitespace normalised (``""`` when nothing is left)."""
    if markup not in MARKUPS:
        raise ConfigError(f"markup '{markup}' is not allowed; allowed: {', '.join(MARKUPS)}")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    body = {"plain": str, "gutenberg": strip_gutenberg, "rst": strip_rst, "html": strip_html,
            "markdown": strip_markdown}[markup](text)
    return _tidy(body)


def _tidy(text: str) -> str:
    lines = [ln.rstrip() for ln in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# -- Project Gutenberg -------------------------------------------------------------------------------------------

_PG_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
_PG_END = re.compile(r"^(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg).*$", re.I | re.M)


def strip_gutenberg(text: str) -> str:
    """The text between Project Gutenberg's start and end markers (the whole text when it has none)."""
    start = _PG_START.search(text)
    if start:
        text = text[start.end():]
    end = _PG_END.search(text)
    return text[:end.start()] if end else text


# -- reStructuredText ---------------------------------------------------------------------------------------------

# Directives whose body is prose, by how their first lines read; every other directive (code, includes, tables,
# indexes, images, options) is dropped whole: prose is what the corpus is for.
# Admonitions take no argument: text after "::" and the lines under it are all content.
_ADMONITIONS = {"note", "warning", "seealso", "tip", "hint", "important", "caution", "danger", "attention", "error",
                "impl-detail", "centered", "epigraph", "highlights", "pull-quote", "glossary", "container", "only"}
# Descriptions: the argument (an API signature, continued on lines down to the first blank one) is dropped, the
# content kept.
_DESCRIPTIONS = {"function", "method", "classmethod", "staticmethod", "decorator", "decoratormethod", "class",
                 "attribute", "data", "exception", "module", "describe", "object", "coroutinefunction", "coroutinemethod",
                 "abstractmethod", "property", "opcode", "pdbcommand", "cmdoption", "option", "envvar", "type",
                 "member", "macro", "var", "struct", "enum", "enumerator", "union"}
# Titled: the argument is a title worth keeping.
_TITLED = {"topic", "sidebar", "rubric", "admonition"}
# Versions: read as Sphinx renders them ("Changed in version 3.2: ..."); the lines under the version are prose.
_VERSIONS = {"versionadded": "New in version", "versionchanged": "Changed in version", "deprecated": "Deprecated since version",
             "deprecated-removed": "Deprecated since version"}
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+(?:[\w-]+:)?([\w-]+)::\s*(.*)$")
_EXPLICIT = re.compile(r"^(\s*)\.\.(\s|$)")  # comments, targets, footnotes, substitution definitions
_ADORNMENT = re.compile(r"^\s*([=\-~^\"'`#*+_:.<>])\1{2,}\s*$")
_TABLE_BORDER = re.compile(r"^\s*(\+[-=+]+\+|=+(\s+=+)+)\s*$")
_FIELD = re.compile(r"^\s*:[\w\s.-]+:(\s|$)")
_ROLE = re.compile(r":(?:[\w.+-]+:)?([\w.+-]+):`([^`]*)`")
_LINK = re.compile(r"`([^`<]*?)\s*(<[^>]*>)?`__?")
_BULLET = re.compile(r"^\s*([-*+•]|\d+[.)]|#\.|[a-zA-Z][.)])\s+")


def _role_text(m: re.Match) -> str:
    role, inner = m.group(1), m.group(2)
    if role in ("rfc", "pep"):
        return f"{role.upper()} {inner}"
    titled = re.match(r"(.*?)\s*<[^>]*>$", inner, re.S)
    if titled and titled.group(1):
        return titled.group(1)
    inner = inner.lstrip("!")
    return inner[1:].rsplit(".", 1)[-1] if inner.startswith("~") else inner


def _inline(line: str) -> str:
    line = _ROLE.sub(_role_text, line)
    line = re.sub(r"``(.+?)``", r"\1", line)
    line = _LINK.sub(lambda m: m.group(1), line)
    line = re.sub(r"\s*\[(#[\w-]*|\d+|\*)\]_", "", line)  # footnote references
    line = re.sub(r"\|([^|\s][^|]*)\|_?", r"\1", line)  # substitutions
    line = re.sub(r"(?<![\w*])\*\*(\S(?:.*?\S)?)\*\*(?![\w*])", r"\1", line)
    line = re.sub(r"(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])", r"\1", line)
    return line.replace("\\ ", "").replace("\\", "")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], i: int, base: int) -> int:
    """The index after the block indented deeper than ``base`` that starts at ``i`` (blank lines inside it belong to it)."""
    j = i
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
        j += 1
    while j > i and not lines[j - 1].strip():  # trailing blanks are the paragraph break after it
        j -= 1
    return j


def strip_rst(text: str) -> str:
    """reStructuredText as its prose (see the module docstring for what is dropped)."""
    lines = text.expandtabs(8).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        d = _DIRECTIVE.match(line)
        if d:
            i = _directive(lines, i, out, base=len(d.group(1)), name=d.group(2), arg=d.group(3))
            continue
        if _EXPLICIT.match(line):  # a comment, target, footnote or substitution: it and its indented block
            i = _block_end(lines, i + 1, _indent(line))
            continue
        stripped = line.strip()
        if _TABLE_BORDER.match(line):  # a table runs to a border followed by a blank line (grid: to its last row)
            j = i + 1
            while j < len(lines) and not (_TABLE_BORDER.match(lines[j]) and (j + 1 == len(lines) or not lines[j + 1].strip())):
                if stripped.startswith("+") and not lines[j].strip().startswith(("+", "|")):
                    j -= 1
                    break
                j += 1
            i = j + 1
            continue
        if _ADORNMENT.match(line) or (stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1):
            i += 1
            continue
        if stripped.startswith(">>>"):  # a doctest block runs to the next blank line
            while i < len(lines) and lines[i].strip():
                i += 1
            continue
        if stripped.endswith("::"):  # a literal block follows: keep the sentence, drop the code
            kept = stripped[:-2].rstrip()
            if kept:
                out.append(" " * _indent(line) + kept + ("" if kept.endswith(":") else ":"))
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            i = _block_end(lines, j, _indent(line)) if j < len(lines) and _indent(lines[j]) > _indent(line) else i + 1
            continue
        out.append(_FIELD.sub(" ", line) if _FIELD.match(line) else line)
        i += 1
    return "\n".join(_inline(ln) for ln in _join_paragraphs(out).split("\n"))


def _directive(lines: list[str], i: int, out: list[str], *, base: int, name: str, arg: str) -> int:
    """Emit what directive ``name`` at line ``i`` holds of prose into ``out``; the index of the next line to read (the
    directive's content stays in ``lines`` to be read as any other text, nested directives included)."""
    end = _block_end(lines, i + 1, base)
    if name not in _ADMONITIONS | _DESCRIPTIONS | _TITLED | _VERSIONS.keys():
        return end
    j = i + 1
    if name in _DESCRIPTIONS:
        while j < end and lines[j].strip():  # signature continuations and options, down to the first blank line
            j += 1
    while j < end and _FIELD.match(lines[j]):  # options
        j += 1
    head = ""
    if name in _ADMONITIONS or name in _TITLED:
        head = arg
    elif name in _VERSIONS:
        version, _, rest = arg.partition(" ")
        head = f"{_VERSIONS[name]} {version}:" + (f" {rest}" if rest else "")
    if head:
        out += ["", head] if name in _TITLED else [" " * base + head]
        if name in _TITLED:
            out.append("")
    del lines[i + 1:j]
    return i + 1


def _join_paragraphs(lines: list[str]) -> str:
    """Hard-wrapped lines of one paragraph joined by spaces; blank lines and list items start new lines."""
    out: list[str] = []
    for ln in lines:
        s = ln.strip()
        if not s:
            out.append("")
        elif out and out[-1] and not _BULLET.match(ln):
            out[-1] = f"{out[-1]} {s}"
        else:
            out.append(s)
    return "\n".join(re.sub(r"\s{2,}", " ", ln) for ln in out)


# -- HTML ---------------------------------------------------------------------------------------------------------

_SKIP_TAGS = {"script", "style", "pre", "head", "nav", "footer", "noscript", "svg", "math", "template"}
_BLOCK_TAGS = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "section", "article", "blockquote",
               "h1", "h2", "h3", "h4", "h5", "h6", "hr", "header", "main", "aside", "figure", "figcaption"}


class _Text(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in _SKIP_TAGS:
            self.skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(re.sub(r"\s+", " ", data))


def strip_html(text: str) -> str:
    """HTML as its visible text, block elements as paragraph breaks."""
    parser = _Text()
    parser.feed(text)
    parser.close()
    paragraphs = (p.strip() for p in "".join(parser.parts).split("\n"))
    return "\n".join(re.sub(r" {2,}", " ", p) for p in paragraphs)


# -- Markdown -----------------------------------------------------------------------------------------------------


def strip_markdown(text: str) -> str:
    """Markdown without fenced code, images, link targets, heading marks and emphasis marks."""
    text = re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.M | re.S)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"^\s*\[[^\]]+\]:\s*\S+.*$", "", text, flags=re.M)
    text = re.sub(r"^#{1,6}\s*", "", text, flags=re.M)
    text = re.sub(r"`([^`]+)`", r"\1", text)
    text = re.sub(r"(\*\*|__)(\S(?:.*?\S)?)\1", r"\2", text)
    return strip_html(text) if re.search(r"<(p|div|br|a|span)\b", text) else text

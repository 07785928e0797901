"""Markup and boilerplate stripping (hlnas.data.cleaning) on the kinds of text the corpus packages hold."""

from __future__ import annotations

import pytest

from hlnas.data.cleaning import clean, markup_for
from hlnas.errors import ConfigError
from tests.data.archives import GUTENBERG, RST_PAGE


def test_rst_keeps_the_prose_and_drops_code_directives_targets_and_tables():
    out = clean(RST_PAGE, "rst")
    assert out.splitlines()[0] == "An Informal Intro"  # the title without its adornment
    assert ("The while loop runs as long as its condition holds, see the loop section and join for more. "
            "For example:") in out  # roles as their text, titled references as their title, the paragraph joined
    assert "A note about loops that matters." in out  # an admonition's body, emphasis marks dropped
    assert "Return the spam of eggs, as PEP 8 says." in out  # a description's body, not its signature
    assert "Changed in version 3.2: Added the ham parameter." in out  # as Sphinx renders it
    for gone in (">>>", "x += 1", "print(", "ham=None", ":noindex:", "tut-intro", "single: loop", "a table", "====", "***"):
        assert gone not in out, gone


def test_gutenberg_boilerplate_is_cut_and_plain_text_kept_as_it_is():
    out = clean(GUTENBERG, "gutenberg")
    assert out == "ACT I.\n\nWho's there?"
    plain = "Line one\nline two\n\n\n\nline three  \r\n"
    assert clean(plain, "gutenberg") == clean(plain, "plain") == "Line one\nline two\n\nline three"


def test_html_keeps_visible_text_and_drops_code_and_scripts():
    html = ("<html><head><title>T</title><style>p{}</style></head><body><h1>Heading</h1><p>One &amp; two "
            "<code>inline</code> words.</p><pre>$ code block</pre><script>var x;</script><ul><li>item</li></ul></body></html>")
    assert clean(html, "html") == "Heading\n\nOne & two inline words.\n\nitem"


def test_markdown_drops_fences_images_and_link_targets():
    md = "# Title\n\nSome **bold** [link](http://x) and `code`.\n\n```python\nprint(1)\n```\n![img](a.png)\n"
    assert clean(md, "markdown") == "Title\n\nSome bold link and code."


def test_markup_follows_the_file_name_and_a_bad_one_is_named():
    assert [markup_for(n) for n in ("a.rst.txt", "b.rst", "c.HTML", "d.md", "e.txt", "f.dat")] == [
        "rst", "rst", "html", "markdown", "gutenberg", "plain"]
    with pytest.raises(ConfigError, match="markup 'latex' is not allowed; allowed: plain, gutenberg, rst, html, markdown"):
        clean("x", "latex")

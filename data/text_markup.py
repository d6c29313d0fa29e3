"""The prose of a Markdown, reStructuredText or HTML document: markup dropped, code dropped.

Why: documentation folders hold ``.md``, ``.rst`` and ``.html`` more than ``.txt``, and a
model that learns to continue text should learn the sentences, not ``](https://``,
``.. code-block::`` or ``</div>``. Words are all the windows keep (``data.text`` splits on
whitespace), so the rules below only decide which characters are text.

The code rule, the same for every format: **code blocks are dropped, inline code is kept**.
A code block (a fenced or indented block in Markdown, a literal block after ``::``, a code
directive or a ``>>>`` doctest in reST, ``<pre>`` in HTML) is another language the text
model would learn to emit; an inline span (```name```, ````name````, ``<code>``) is a word
of the sentence around it. Plain text (``.txt`` and unknown suffixes) is kept as it is.

Markdown: YAML front matter, reference definitions, HTML comments and tags, table rules
and setext underlines are dropped; headings, quote and list markers, emphasis markers and
link targets are stripped (a link keeps its text, an image its alt text).
reST: section adornments, comments, targets, substitution definitions and the options of
directives are dropped; directives whose body is not prose (code, math, raw, image,
include, toctree, ...) are dropped with their body, other directives (note, warning, ...)
keep their body; roles and references keep their text.
HTML: the text of the body and the title; ``script``, ``style``, ``template``, ``svg`` and
``pre`` elements dropped; block elements separate words; entities decoded.
"""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

MARKDOWN = "markdown"
RST = "rst"
HTML = "html"
PLAIN = "plain"

# ---------------------------------------------------------------------------- Markdown

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MD_RULE = re.compile(r"^ {0,3}([-*_=])(\s*\1){2,}\s*$")
_MD_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_MD_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*\S+")
_MD_LIST = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+")
_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]+)\](?:\([^)]*\)|\[[^\]]*\])")
_MD_AUTOLINK = re.compile(r"<(?:https?|ftp|mailto):[^>\s]*>")
_MD_EMPHASIS = re.compile(r"(?<![\w*])(\*{1,3}|_{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][^<>]*>", re.S)
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])")


def markdown_text(source: str) -> str:
    lines = source.splitlines()
    if lines and lines[0].strip() == "---":  # YAML front matter
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() in ("---", "...")), None)
        lines = lines[end + 1:] if end is not None else lines
    kept: list[str] = []
    fence = ""
    previous_blank, previous_prose = True, False
    for line in lines:
        if fence:
            if line.strip().startswith(fence):
                fence = ""
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)[0] * len(opened.group(1))
            continue
        blank = not line.strip()
        indented = line.startswith(("    ", "\t"))
        if indented and not blank and (previous_blank or not previous_prose) and not _in_list(kept):
            previous_blank, previous_prose = False, False  # an indented code block
            continue
        previous_blank, previous_prose = blank, not blank
        if _MD_RULE.match(line) or _MD_TABLE_RULE.match(line) or _MD_REFERENCE.match(line):
            continue
        line = line.lstrip()
        line = re.sub(r"^(>\s?)+", "", line)
        line = re.sub(r"^#{1,6}\s+|\s+#+\s*$", "", line)
        line = _MD_LIST.sub("", line)
        kept.append(line)
    text = "\n".join(kept)
    text = _TAG.sub(" ", _MD_AUTOLINK.sub(" ", text))
    text = _MD_IMAGE.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    text = text.replace("`", "")
    for _ in range(2):  # nested emphasis: ***a*** or **a _b_**
        text = _MD_EMPHASIS.sub(r"\2", text)
    text = text.replace("|", " ")
    return html.unescape(_ESCAPE.sub(r"\1", text))


def _in_list(kept: list[str]) -> bool:
    """Whether the last paragraph was a list item (its indented lines continue it)."""
    for line in reversed(kept):
        if line.strip():
            return bool(_MD_LIST.match(line)) or line.startswith(("    ", "\t"))
    return False


# ------------------------------------------------------------------ reStructuredText

_RST_ADORNMENT = re.compile(r"""^([=\-`:'"~^_*+#<>.!$%&,/;?@\\|])\1{2,}\s*$""")
_RST_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s+(.*))?$")
_RST_DIRECTIVE = re.compile(r"^([\w:+-]+)::(.*)$")
_RST_FOOTNOTE = re.compile(r"^\[[^\]]+\]\s+(.*)$")
_RST_OPTION = re.compile(r"^\s*:[\w -]+:(\s|$)")
# Directives whose body is code, data or a reference to another file, never prose.
_RST_NOT_PROSE = frozenset({
    "code", "code-block", "sourcecode", "literalinclude", "highlight", "math", "raw", "image",
    "figure", "include", "toctree", "csv-table", "list-table", "graphviz", "productionlist",
    "doctest", "testcode", "testoutput", "ipython", "jupyter-execute", "mermaid", "only", "ifconfig",
    "autosummary", "automodule", "autoclass", "autofunction", "automethod", "autodata", "autoexception"})
_RST_ROLE = re.compile(r":[\w:+.-]+:`([^`<]*?)(?:\s*<[^>`]*>)?`")
_RST_REFERENCE = re.compile(r"`([^`<]*?)(?:\s*<[^>`]*>)?`__?")
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_INTERPRETED = re.compile(r"`([^`]+)`")
_RST_FOOTNOTE_REF = re.compile(r"\s?\[(?:\d+|#\w*|\*|[\w-]+)\]_")
_RST_NAMED_REF = re.compile(r"\b([\w-]+)__?(?=[\s.,;:!?)]|$)")
_RST_SUBSTITUTION = re.compile(r"\|([^|\s][^|]*)\|_{0,2}")


def rst_text(source: str) -> str:
    lines = source.splitlines()
    kept: list[str] = []
    skip_indent: int | None = None  # drop lines indented deeper than this (a dropped block's body)
    options_of: int | None = None   # a kept directive's options, then its body
    literal_next = doctest = False
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if not line.strip():
            kept.append("")
            doctest = False  # a doctest block ends at a blank line
            continue
        if doctest:
            continue
        if skip_indent is not None:
            if indent > skip_indent:
                continue
            skip_indent = None
        if options_of is not None:
            if indent > options_of and _RST_OPTION.match(line):
                continue
            options_of = None
        if literal_next:
            literal_next = False
            if indent > _paragraph_indent(kept):
                skip_indent = _paragraph_indent(kept)
                continue
        stripped = line.strip()
        if stripped.startswith(">>>"):
            doctest = True
            continue
        if _RST_ADORNMENT.match(stripped) and len(stripped) >= 3:
            continue
        explicit = _RST_EXPLICIT.match(line)
        if explicit:
            body = explicit.group(2) or ""
            directive = _RST_DIRECTIVE.match(body)
            footnote = _RST_FOOTNOTE.match(body)
            if directive and directive.group(1).lower() not in _RST_NOT_PROSE and not body.startswith("|"):
                options_of = indent
                if directive.group(2).strip():
                    kept.append(directive.group(2).strip())  # an admonition's title
            elif footnote:
                kept.append(footnote.group(1))
            else:  # comment, target, substitution definition, or a directive that is not prose
                skip_indent = indent
            continue
        if stripped.endswith("::"):
            literal_next = True
            stripped = stripped[:-2].rstrip() + (":" if not stripped[:-2].endswith((" ", "\t")) else "")
            stripped = stripped if stripped != ":" else ""
        kept.append(" " * indent + stripped)
    text = "\n".join(kept)
    text = _RST_LITERAL.sub(r"\1", text)
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_REFERENCE.sub(r"\1", text)
    text = _RST_INTERPRETED.sub(r"\1", text)
    text = _RST_FOOTNOTE_REF.sub("", text)
    text = _RST_SUBSTITUTION.sub(r"\1", text)
    text = _RST_NAMED_REF.sub(r"\1", text)
    for _ in range(2):
        text = _MD_EMPHASIS.sub(r"\2", text)  # *emphasis*, **strong**: the same markers as Markdown
    return text


def _paragraph_indent(kept: list[str]) -> int:
    """Indent of the last kept non-blank line (a literal block must be deeper)."""
    for line in reversed(kept):
        if line.strip():
            return len(line) - len(line.lstrip())
    return 0


# ------------------------------------------------------------------------------- HTML

_HTML_DROPPED = frozenset({"script", "style", "template", "svg", "pre", "noscript", "head", "textarea", "math"})
_HTML_BLOCKS = frozenset({
    "p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "td", "th", "table", "section", "article",
    "header", "footer", "nav", "aside", "main", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "title", "figcaption", "caption", "form", "option", "body", "html"})
_VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "embed", "source", "wbr"})


class _Prose(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.dropped: list[str] = []  # open elements whose content is dropped
        self.in_title = False

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in _HTML_DROPPED and tag not in _VOID:
            self.dropped.append(tag)
        if tag in _HTML_BLOCKS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag in _HTML_BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in self.dropped:  # tolerate unclosed children: pop up to the matching element
            while self.dropped and self.dropped.pop() != tag:
                pass
        if tag in _HTML_BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title or not self.dropped:
            self.parts.append(data)


def html_text(source: str) -> str:
    parser = _Prose()
    parser.feed(source)
    parser.close()
    return "".join(parser.parts)


# ---------------------------------------------------------------------------- by name

#: Suffix (lower case, after any compression suffix) -> markup kind.
MARKUP_SUFFIXES = {".md": MARKDOWN, ".markdown": MARKDOWN, ".rst": RST, ".rest": RST,
                   ".html": HTML, ".htm": HTML, ".xhtml": HTML}
_EXTRACT = {MARKDOWN: markdown_text, RST: rst_text, HTML: html_text, PLAIN: lambda text: text}


def prose(text: str, kind: str) -> str:
    """The prose of ``text`` written in ``kind`` (one of MARKDOWN, RST, HTML, PLAIN)."""
    return _EXTRACT[kind](text)

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
from collections.abc import Callable

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
_LIST_STARTS = frozenset("-*+0123456789")
_MD_QUOTE = re.compile(r"^(>\s?)+")
_MD_HEADING = re.compile(r"^#{1,6}\s+|\s+#+\s*$")
_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]+)\](?:\([^)]*\)|\[[^\]]*\])")
_MD_AUTOLINK = re.compile(r"<(?:https?|ftp|mailto):[^>\s]*>")
_UNDERSCORES = re.compile(r"_+")
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
        first = line[:1]
        if first == ">":
            line = _MD_QUOTE.sub("", line)
        if "#" in line:
            line = _MD_HEADING.sub("", line)
        if first in _LIST_STARTS:
            line = _MD_LIST.sub("", line)
        kept.append(line)
    text = "\n".join(kept)
    if "<" in text:
        text = _TAG.sub(" ", _MD_AUTOLINK.sub(" ", text))
    if "[" in text:
        text = _MD_LINK.sub(r"\1", _MD_IMAGE.sub(r"\1", text))
    text = text.replace("`", "")
    text = emphasis_stripped(text)
    text = text.replace("|", " ")
    if "\\" in text:
        text = _ESCAPE.sub(r"\1", text)
    return html.unescape(text) if "&" in text else text


def emphasis_stripped(text: str) -> str:
    """Emphasis markers dropped: every ``*``, and ``_`` runs at a word's edge (``_a_``, ``__a__``);
    an underscore inside a word (``snake_case``) stays. Words are all that is kept, so the
    markers need not be paired (a regex pairing them costs more than all other rules together)."""
    if "*" in text:
        text = text.replace("*", "")
    if "_" not in text:
        return text

    def edge(match: re.Match) -> str:
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end()] if match.end() < len(text) else " "
        return match.group(0) if before.isalnum() and after.isalnum() else ""

    return _UNDERSCORES.sub(edge, text)


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
_RST_NAMED_REF = re.compile(r"__?(?=[\s.,;:!?)]|$)", re.M)  # name_ -> name (when a word precedes)
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
    if "`" in text:
        text = _RST_LITERAL.sub(r"\1", text)
        text = _RST_ROLE.sub(r"\1", text)
        text = _RST_REFERENCE.sub(r"\1", text)
        text = _RST_INTERPRETED.sub(r"\1", text)
    if "]_" in text:
        text = _RST_FOOTNOTE_REF.sub("", text)
    if "|" in text:
        text = _RST_SUBSTITUTION.sub(r"\1", text)
    if "_" in text:
        text = _RST_NAMED_REF.sub(_after_word(text), text)
    return emphasis_stripped(text)  # *emphasis*, **strong**: the same markers as Markdown


def _after_word(text: str) -> Callable[[re.Match], str]:
    """A replacement for ``re.sub`` over ``text``: drop the match where a word precedes it."""
    def drop(match: re.Match) -> str:
        return "" if match.start() and text[match.start() - 1].isalnum() else match.group(0)

    return drop


def _paragraph_indent(kept: list[str]) -> int:
    """Indent of the last kept non-blank line (a literal block must be deeper)."""
    for line in reversed(kept):
        if line.strip():
            return len(line) - len(line.lstrip())
    return 0


# ------------------------------------------------------------------------------- HTML

# lxml's HTML parser (libxml2, in C): a real parse, where regular expressions misread a ``>``
# inside an attribute or a ``</pre>`` inside a comment, and html.parser made HTML the slowest
# format to read (benchmarks/bench_text_ingest.py).
_HTML_DROPPED = ("head", "script", "style", "template", "svg", "pre", "noscript", "textarea", "math")
_HTML_BLOCKS = frozenset((
    "p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "td", "th", "table", "section", "article",
    "header", "footer", "nav", "aside", "main", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "figcaption", "caption", "form", "option", "body", "html"))
#: lxml refuses a ``str`` that declares its own encoding; the text is decoded already.
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


def html_text(source: str) -> str:
    from lxml import etree
    from lxml import html as lxml_html

    source = _XML_DECLARATION.sub("", source, count=1)
    if not source.strip():
        return ""
    try:
        root = lxml_html.document_fromstring(source)
    except (etree.ParserError, ValueError):  # nothing an HTML parser can read: no words
        return ""
    title = root.findtext(".//title") or ""
    for element in list(root.iter(*_HTML_DROPPED)):
        element.drop_tree()  # keeps the text after the element
    for element in root.iter(*_HTML_BLOCKS):
        element.text = "\n" + (element.text or "")  # block elements separate words;
        element.tail = "\n" + (element.tail or "")  # inline ones join: <b>bo</b>ld is "bold"
    text = root.text_content()
    return f"{title}\n{text}" if title.strip() else text


# ---------------------------------------------------------------------------- by name

#: Suffix (lower case, after any compression suffix) -> markup kind.
MARKUP_SUFFIXES = {".md": MARKDOWN, ".markdown": MARKDOWN, ".rst": RST, ".rest": RST,
                   ".html": HTML, ".htm": HTML, ".xhtml": HTML}
_EXTRACT = {MARKDOWN: markdown_text, RST: rst_text, HTML: html_text, PLAIN: lambda text: text}


def prose(text: str, kind: str) -> str:
    """The prose of ``text`` written in ``kind`` (one of MARKDOWN, RST, HTML, PLAIN)."""
    return _EXTRACT[kind](text)

"""Write docs/cli.md: every command and flag of ``python -m pipeline``, read from the parser itself.

    .venv/bin/python scripts/write_cli_reference.py          (tests/test_docs.py fails when it is stale)
    .venv/bin/python scripts/write_cli_reference.py --print  (the page on stdout, written nowhere)

The page is made from ``pipeline.arguments.build_parser()``, the same parser the CLI runs, so a flag
added, renamed or re-documented there shows up here on the next run of this script, and the test says
when nobody ran it. The run settings' ranges are on docs/settings.md (also generated).
"""
import argparse
import os
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.arguments import build_parser  # noqa: E402  (no TensorFlow: --help stays instant)

TARGET = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
WIDTH = 100  # usage lines wrap here, whatever terminal runs the script
HEADER = """# Command-line reference

Every command and flag of `python -m pipeline` (also `tfx-project`, the console script), generated
from the parser the CLI itself runs (`pipeline/arguments.py`) by `scripts/write_cli_reference.py`;
a test fails when this page is stale. `python -m pipeline COMMAND --help` prints the same text.
The run settings' ranges and Kubeflow runtime parameters are on [Run settings](settings.md).

"""


def _cell(text: str) -> str:
    """Table-safe Markdown: no pipes or line breaks, and ``<model>`` shown, not taken for an HTML tag."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _flags(action: argparse.Action) -> str:
    named = action.metavar if isinstance(action.metavar, str) else None  # argparse also allows a tuple
    if not action.option_strings:
        return f"`{named or action.dest}`" + (" ..." if action.nargs in ("+", "*") else "")
    takes_value = action.nargs != 0
    metavar = named or (action.dest.upper() if takes_value else "")
    if action.choices and takes_value and not action.metavar:
        metavar = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return ", ".join(f"`{flag}{' ' + metavar if metavar else ''}`" for flag in action.option_strings)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = parser._get_formatter()._expand_help(action) if action.help else ""  # fills %(default)s as --help does
    if action.required:
        text = f"**required**; {text}" if text else "**required**"
    return _cell(text) or "-"


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | what it does |", "| --- | --- |"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        rows.append(f"| {_flags(action)} | {_help(parser, action)} |")
    return rows


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    """The usage line, wrapped here: argparse wraps it differently from one Python to the next (3.10 and
    3.13, the two stacks' Pythons), and the page must be the same whichever stack writes it."""
    words = parser.format_usage().split()
    indent = " " * len(f"usage: {parser.prog} ")  # under the first option, as argparse indents
    return ["```text", textwrap.fill(" ".join(words), width=WIDTH, subsequent_indent=indent,
                                     break_long_words=False, break_on_hyphens=False), "```"]


def document() -> str:
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps usage at the terminal's width
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in subcommands._choices_actions}
    lines = [HEADER.rstrip("\n"), "", *_usage(parser), "", _cell(parser.description or ""), "",
             "Options of every command (before the command's name):", "", *_arguments_table(parser), "",
             "| command | what it does |", "| --- | --- |"]
    lines += [f"| [`{name}`](#{name}) | {_cell(summaries.get(name) or '')} |" for name in subcommands.choices]
    for name, command in subcommands.choices.items():
        lines += ["", f"## {name}", "", *_usage(command), ""]
        if command.description:
            lines += [_cell(command.description), ""]
        lines += _arguments_table(command)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--print"]:
        print(document(), end="")
    else:
        TARGET.write_text(document())
        print(f"wrote {TARGET}")

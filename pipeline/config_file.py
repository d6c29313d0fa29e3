"""``--config FILE``: the settings of a command in a YAML file a team versions; flags still win.

Why this shape: a long command line (data, output, epochs, gates, Kubeflow image and root)
belongs in a reviewed file, but a second way to set a value must not become a second set of
rules. So a key is a flag of the command without its dashes (``epochs``, ``batch-size``,
``pipeline-root``; ``_`` reads as ``-``) and its value becomes that flag's text on the command
line, put before the flags typed: argparse then converts and checks it exactly as if
it had been typed, the flag typed by hand wins (the last one does), and the same range checks
name it. What a file can get wrong that a command line cannot (an unknown key, a list for a
single value, a value of the wrong type or out of range) is said here, naming the key and the
file.

    python -m pipeline run --config team.yaml --epochs 3     # team.yaml's settings, 3 epochs

Nothing here imports TensorFlow: ``--help`` stays instant.
"""
from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Iterable, Sequence
from typing import Any

from stackenv.errors import ConfigError
from stackenv.user_files import SMALL_JSON_MAX_BYTES, read_user_file

import yaml

from pipeline import settings

FLAG = "--config"
#: The commands whose flags a file may hold: the ones that take the run settings, and deploy (docs/settings.md).
COMMANDS = settings.DATA_COMMANDS | {"deploy"}
HELP = ("a YAML file of this command's settings: each key a flag without its dashes (epochs: 3, "
        "pipeline-root: gs://b/tfx, no-cache: true), each value as it would be typed; flags on the command "
        "line override it")


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(FLAG, metavar="FILE", default=None, help=HELP)


def expand(argv: Sequence[str], parser: argparse.ArgumentParser,
           declarations: Iterable[type] = ()) -> list[str]:
    """``argv`` with the settings of its ``--config`` file inserted as flags after the command name.

    ``declarations``: the settings dataclasses whose ranges a value is checked against here (so the
    message names the file); argparse checks types and choices again when it parses.
    """
    argv = list(argv)
    command_at = next((i for i, token in enumerate(argv) if not token.startswith("-")), None)
    if command_at is None or argv[command_at] not in COMMANDS:
        return argv
    path, rest = _config_path(argv[command_at + 1:])
    if path is None:
        return argv
    command_parser = _subparser(parser, argv[command_at])
    values = _read(path)
    return [*argv[:command_at + 1], *_flags(values, path, command_parser, rest, list(declarations)), *rest]


def _config_path(tokens: list[str]) -> tuple[str | None, list[str]]:
    """The ``--config`` value among a command's tokens, and the tokens without it (the last one wins)."""
    path, rest, i = None, [], 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            rest.extend(tokens[i:])
            break
        if token == FLAG:
            if i + 1 >= len(tokens):
                raise ConfigError(FLAG, "needs a file: --config FILE, a YAML file of the command's settings.")
            path = tokens[i + 1]
            i += 2
            continue
        if token.startswith(FLAG + "="):
            path = token[len(FLAG) + 1:]
        else:
            rest.append(token)
        i += 1
    return path, rest


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise LookupError(f"no subcommand {command}")


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first, self.second = key, first, second


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error: YAML 1.2 requires unique keys,
    and PyYAML keeps the last silently, so a forgotten line would win without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _DuplicateKey(key, seen[key], line)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _read(path: str) -> dict[str, Any]:
    text = read_user_file(path, flag=FLAG, what="the command's settings as YAML", max_bytes=SMALL_JSON_MAX_BYTES)
    try:
        values = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader that also refuses duplicates
    except _DuplicateKey as error:
        raise ConfigError(FLAG, f"{path} sets `{error.key}` twice (lines {error.first} and {error.second}); a "
                          "setting appears once in the file: keep the one you mean.") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(FLAG, f"{path} is not valid YAML{where} ({problem}): write one `key: value` per line, "
                          "the keys being the command's flags without their dashes.") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(FLAG, f"{path} holds a {type(values).__name__}, not settings: write one `key: value` "
                          "per line, e.g. `epochs: 3`.")
    return values


def _flags(values: dict[str, Any], path: str, parser: argparse.ArgumentParser, typed: list[str],
           declarations: list[type]) -> list[str]:
    by_flag = {option: action for action in parser._actions for option in action.option_strings
               if option.startswith("--") and option not in (FLAG, "--help")}
    overridden = _set_on_command_line(typed, by_flag, parser)
    ranges = {spec.flag: spec for declaration in declarations for _, spec in settings.declared(declaration)}
    tokens: list[str] = []
    taken: dict[str, Any] = {}  # dest -> the file's key that set it
    for key, value in values.items():
        flag = "--" + str(key).lstrip("-").replace("_", "-")
        action = by_flag.get(flag)
        if action is None:
            raise ConfigError(FLAG, _unknown(key, path, parser.prog, by_flag))
        if action.dest in overridden:
            continue
        if action.dest in taken:  # `batch_size` and `batch-size`: one flag twice
            raise ConfigError(FLAG, f"{path} sets {flag} twice (as `{taken[action.dest]}` and `{key}`); keep one.")
        taken[action.dest] = key
        tokens += _tokens(flag, action, value, key, path, ranges.get(flag))
    _check_exclusive(taken, parser, path)
    return tokens


def _check_exclusive(taken: dict[str, Any], parser: argparse.ArgumentParser, path: str) -> None:
    """Two keys of the file that argparse takes only one of (``epochs`` and ``train-steps``), named with the file
    (argparse would print its usage and name neither)."""
    for group in parser._mutually_exclusive_groups:
        keys = [taken[action.dest] for action in group._group_actions if action.dest in taken]
        if len(keys) > 1:
            flags = " or ".join(action.option_strings[-1] for action in group._group_actions)
            raise ConfigError(FLAG, f"{path} sets both `{keys[0]}` and `{keys[1]}`, and a command takes only one of "
                              f"{flags}: keep the one you mean (a flag typed on the command line replaces the "
                              "file's).")


def _set_on_command_line(typed: list[str], by_flag: dict[str, argparse.Action],
                         parser: argparse.ArgumentParser) -> set[str]:
    """The destinations the typed flags set, with their mutually exclusive partners (``--train-steps`` typed
    replaces a file's ``epochs``, which argparse would otherwise refuse beside it)."""
    typed_flags = {token.split("=", 1)[0] for token in typed if token.startswith("--")}
    dests = {action.dest for flag, action in by_flag.items() if flag in typed_flags}
    for group in parser._mutually_exclusive_groups:
        members = {action.dest for action in group._group_actions}
        if members & dests:
            dests |= members
    return dests


def _unknown(key: Any, path: str, prog: str, by_flag: dict[str, argparse.Action]) -> str:
    keys = sorted(flag[2:] for flag in by_flag)
    close = difflib.get_close_matches(str(key).replace("_", "-"), keys, n=1)
    hint = f" Did you mean `{close[0]}`?" if close else ""
    return (f"{path}: unknown key `{key}`: `{prog}` has no flag --{str(key).replace('_', '-')}.{hint} "
            f"The keys are the command's flags without their dashes: {', '.join(keys)}.")


def _tokens(flag: str, action: argparse.Action, value: Any, key: Any, path: str,
            spec: settings.Setting | None) -> list[str]:
    where = f"{path}: key `{key}`"
    if action.nargs == 0:  # store_true / store_false: the flag alone
        if not isinstance(value, bool):
            raise ConfigError(FLAG, f"{where} is a switch: write `{key}: true` (to pass {flag}) or "
                              f"`{key}: false`, got {value!r}.")
        return [flag] if value else []
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
    elif isinstance(value, (list, dict)):
        raise ConfigError(FLAG, f"{where} takes one value ({flag} {action.metavar or 'VALUE'}), got a "
                          f"{type(value).__name__}: {value!r}.")
    else:
        items = [value]
    tokens: list[str] = []
    for item in items:
        if item is None or isinstance(item, (dict, list)):
            raise ConfigError(FLAG, f"{where} needs a value ({flag} {action.metavar or 'VALUE'}), got {item!r}.")
        text = ("true" if item else "false") if isinstance(item, bool) else str(item)
        if text.startswith("~"):  # as a shell expands an unquoted word: `output: ~/runs` is the home's runs
            text = os.path.expanduser(text)
            if text.startswith("~"):
                raise ConfigError(FLAG, f"{where}: {text} starts with ~ but names no home folder this machine "
                                  "knows; write the full path.")
        _check(text, action, where, spec)
        tokens.append(f"{flag}={text}")  # one token: a value may start with '-' (--beam-arg=--x=1)
    return tokens


def _check(text: str, action: argparse.Action, where: str, spec: settings.Setting | None) -> None:
    """The value converted and checked as the flag would be, so a mistake names the file."""
    converted: Any = text
    if callable(action.type):
        try:
            converted = action.type(text)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
            kinds: dict[Any, str] = {int: "an integer", float: "a number"}
            kind = kinds.get(action.type, str(action.metavar or "another value"))
            detail = f": {error}" if isinstance(error, argparse.ArgumentTypeError) else ""
            raise ConfigError(FLAG, f"{where} must be {kind}, got {text!r}{detail}.") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(FLAG, f"{where} must be one of {', '.join(map(str, action.choices))}, got {text!r}.")
    if spec is not None and isinstance(converted, (int, float)) and not isinstance(converted, bool):
        try:
            settings.check_value(spec, converted)
        except ConfigError as error:
            raise ConfigError(FLAG, f"{where}: {str(error).split(': ', 1)[1]}") from None

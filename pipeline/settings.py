"""One declaration per run setting: its type, default, range and help, read by everything that shows or checks it.

Before this, adding a setting meant three edits that drifted apart: an argparse flag with its own help and
default, a dataclass field, and again wherever Kubeflow compile or the docs named it. Now a setting is one
dataclass field made by :func:`setting`; from it come the command-line flag (:func:`add_arguments`), the
value the config gets from parsed arguments (:func:`values_from_args`), the range check with a message naming
the flag, the value and the range (:func:`check_values`), the Kubeflow runtime parameters
(:func:`runtime_settings`) and the settings table of the docs (:func:`settings_table`). The model families'
own settings (pipeline/families/) are declared the same way.

Nothing here imports TensorFlow: ``--help`` stays instant.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from stackenv.errors import ConfigError

T = typing.TypeVar("T")

SETTING_KEY = "setting"
# The subcommands that build a whole pipeline from these settings; a setting names the ones it applies to.
PIPELINE_COMMANDS = frozenset({"run", "compile", "tfjob"})
DATA_COMMANDS = PIPELINE_COMMANDS | {"prepare"}  # and `prepare`, which only converts data


@dataclasses.dataclass(frozen=True)
class Setting:
    """How a setting appears to people: its flag and help, the values it accepts, where it applies."""

    flag: str
    help: str | Callable[[], str]      # a callable: text read from the registered families when asked
    low: float | None = None           # inclusive bounds of a number
    high: float | None = None
    choices: tuple[Any, ...] | Callable[[], tuple[Any, ...]] | None = None
    metavar: str | None = None
    commands: frozenset[str] = PIPELINE_COMMANDS
    group: str | None = None           # argparse group title (shown as a section of --help)
    exclusive: str | None = None       # settings sharing this name are mutually exclusive on the command line
    parse: Callable[[str], Any] | None = None  # text -> value, for types argparse cannot build (a range, a pair)
    repeatable: bool = False           # a list filled by repeating the flag
    negate: bool = False               # a boolean that defaults to True and whose flag turns it off (--no-cache)
    runtime: bool = False              # a Kubeflow runtime parameter: can be set when a run is created
    required: bool = False             # the command refuses to start without it (its field has no default)
    default_text: Callable[[], str] | None = None  # the default as people read it, when it is not one value
    command_help: dict[str, str] = dataclasses.field(default_factory=dict)  # a subcommand's own wording

    def describe(self, command: str = "") -> str:
        if command in self.command_help:
            return self.command_help[command]
        return self.help() if callable(self.help) else self.help

    def allowed(self) -> tuple[Any, ...] | None:
        return self.choices() if callable(self.choices) else self.choices

    def range_text(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{_number(self.low)} to {_number(self.high)}"
        if self.low is not None:
            return f">= {_number(self.low)}"
        if self.high is not None:
            return f"<= {_number(self.high)}"
        return ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@typing.overload
def setting(default: T, *, flag: str, help: str | Callable[[], str], **spec: Any) -> T: ...


@typing.overload
def setting(*, flag: str, help: str | Callable[[], str], default_factory: Callable[[], T], **spec: Any) -> T: ...


@typing.overload
def setting(*, flag: str, help: str | Callable[[], str], required: bool, **spec: Any) -> Any: ...


def setting(default: Any = dataclasses.MISSING, *, flag: str, help: str | Callable[[], str],
            default_factory: Callable[[], Any] | None = None, **spec: Any) -> Any:
    """A dataclass field that is a setting (see :class:`Setting` for ``spec``), typed as its default:
    ``epochs: int = setting(None, ...)`` does not type-check (see :func:`resolved_setting`). A ``required``
    setting has no default: its field is typed by its annotation, and argparse refuses a command without it."""
    metadata = {SETTING_KEY: Setting(flag=flag, help=help, **spec)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def resolved_setting(*, flag: str, help: str | Callable[[], str], **spec: Any) -> Any:
    """A setting whose default depends on other settings (the family's epochs, the model's name):
    None when the flag is left out, set by the settings' ``__post_init__`` before anything reads it,
    so its field is typed as the resolved value. The one place a setting's default is not its type."""
    return setting(None, flag=flag, help=help, **spec)


def declared(settings_type: type) -> list[tuple[dataclasses.Field, Setting]]:
    """The fields of a settings dataclass that are settings, in declaration order."""
    return [(field, field.metadata[SETTING_KEY]) for field in dataclasses.fields(settings_type)
            if SETTING_KEY in field.metadata]


def value_type(settings_type: type, field: dataclasses.Field) -> type:
    """The field's value type with ``| None`` taken off: ``int | None`` -> int."""
    hint = typing.get_type_hints(settings_type)[field.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = options[0] if len(options) == 1 else hint
    return typing.get_origin(hint) or hint


def default_of(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _default_text(field: dataclasses.Field, spec: Setting) -> str:
    if spec.default_text is not None:
        return spec.default_text()
    value = default_of(field)
    if spec.negate:
        return "on"
    if value is None or value == [] or value is False:
        return ""
    return str(value)


def help_text(settings_type: type, field: dataclasses.Field, spec: Setting, command: str = "") -> str:
    """The flag's help: what it does, then its range and default, both read from the declaration."""
    if command in spec.command_help:
        return spec.command_help[command].replace("%", "%%")
    notes = []
    if spec.range_text() and value_type(settings_type, field) in (int, float):
        notes.append(spec.range_text())
    default = _default_text(field, spec)
    if default:
        notes.append(f"default: {default}")
    text = spec.describe().replace("%", "%%")
    return f"{text} ({'; '.join(notes)})" if notes else text


def add_arguments(parser: argparse.ArgumentParser, settings_type: type, command: str,
                  added: set[str] | None = None) -> None:
    """Every setting of ``settings_type`` that ``command`` takes, as a flag (dest: the field's name).

    ``added``: flags already on the parser (two families may declare the same one), left as they are.
    """
    groups: dict[str, Any] = {}
    exclusive: dict[str, Any] = {}
    added = set() if added is None else added
    for field, spec in declared(settings_type):
        if command not in spec.commands or spec.flag in added:
            continue
        added.add(spec.flag)
        target: Any = parser
        if spec.group:
            if spec.group not in groups:
                groups[spec.group] = parser.add_argument_group(spec.group)
            target = groups[spec.group]
        if spec.exclusive:
            if spec.exclusive not in exclusive:
                exclusive[spec.exclusive] = target.add_mutually_exclusive_group()
            target = exclusive[spec.exclusive]
        target.add_argument(spec.flag, dest=field.name, help=help_text(settings_type, field, spec, command),
                            **_argparse_kwargs(settings_type, field, spec))


def _argparse_kwargs(settings_type: type, field: dataclasses.Field, spec: Setting) -> dict[str, Any]:
    kind = value_type(settings_type, field)
    if kind is bool:
        return {"action": "store_false" if spec.negate else "store_true", "default": default_of(field)}
    kwargs: dict[str, Any] = {"required": True} if spec.required else {"default": default_of(field)}
    if spec.repeatable:
        kwargs.update(action="append", default=[])
    if spec.parse is not None:
        kwargs["type"] = spec.parse
    elif kind in (int, float):
        kwargs["type"] = kind
    if spec.choices is not None:
        kwargs["choices"] = spec.allowed()
        kwargs["metavar"] = spec.metavar or "{" + ",".join(map(str, kwargs["choices"])) + "}"
        return kwargs
    # The metavar names the flag, not the field: --serving-name SERVING_NAME.
    kwargs["metavar"] = spec.metavar or spec.flag.lstrip("-").upper().replace("-", "_")
    return kwargs


def values_from_args(args: argparse.Namespace, settings_type: type) -> dict[str, Any]:
    """The settings a parsed command line holds (the ones its subcommand takes), by field name."""
    return {field.name: getattr(args, field.name) for field, _ in declared(settings_type) if hasattr(args, field.name)}


def from_args(args: argparse.Namespace, settings_type: type[T], **fixed: Any) -> T:
    """The ``settings_type`` a parsed command line holds, checked (:func:`check_values`); ``fixed``: its fields
    that are not flags. Typed: ``from_args(args, DeploySettings).wait_timeout`` is a float to mypy."""
    values = settings_type(**values_from_args(args, settings_type), **fixed)
    check_values(values)
    return values


def check_values(values: Any) -> None:
    """Every number finite and within its declared range, every choice one of its values; the error names the
    flag, the value and what it accepts.

    A bound checked here is the whole rule: a batch of 10^12 or a seed beyond 2^32 never reaches TensorFlow,
    where it would fail with an allocation error or a traceback.
    """
    for field, spec in declared(type(values)):
        check_value(spec, getattr(values, field.name))


def check_value(spec: Setting, value: Any) -> None:
    """One setting's value against its declaration (see :func:`check_values`)."""
    allowed = spec.allowed()
    if allowed is not None and value is not None and value not in allowed:
        raise ConfigError(spec.flag, f"must be one of {', '.join(map(str, allowed))}, got {value!r}.")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    in_range = math.isfinite(value) and (spec.low is None or value >= spec.low) and (
        spec.high is None or value <= spec.high)
    if not in_range:
        bounds = spec.range_text()
        within = f"from {bounds}" if spec.low is not None and spec.high is not None else bounds
        raise ConfigError(spec.flag, f"must be a number {within}, got {value}."
                          if bounds else f"must be a finite number, got {value}.")


def runtime_settings(settings_type: type) -> list[tuple[dataclasses.Field, Setting]]:
    """The settings a Kubeflow run can change when it is created (``runtime=True``)."""
    return [(field, spec) for field, spec in declared(settings_type) if spec.runtime]


def settings_table(settings_types: Iterable[tuple[str, type]]) -> str:
    """The docs' settings table (Markdown): every flag with its range, default, where it applies, and help."""
    lines = ["| flag | range or values | default | commands | what it does |", "| --- | --- | --- | --- | --- |"]
    for title, settings_type in settings_types:
        for field, spec in declared(settings_type):
            values = spec.range_text() if value_type(settings_type, field) in (int, float) else ""
            if spec.choices:
                values = ", ".join(str(choice) for choice in spec.allowed() or ())
            commands = ", ".join(sorted(spec.commands))
            if spec.runtime:
                commands += " (Kubeflow runtime parameter)"
            default = f"`{_default_text(field, spec)}`" if _default_text(field, spec) else "-"
            what = spec.describe()
            what = what if not title or what.startswith(f"{title}: ") else f"{title}: {what}"
            what = what.replace("|", "/").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")
            lines.append(f"| `{spec.flag}` | {values or '-'} | {default} | {commands} | {what} |")
    return "\n".join(lines) + "\n"

"""Hardening 5 (issue 56): flags spelled in full, any bytes a file name holds, the project's own files
never overwritten, object-store roots named as the store allows, bounded HTTP, folder flags apart.

Each category has rows run through the real CLI in a subprocess (exit code, no traceback, the
paragraph's key phrase) and unit rows of the one place that fixes it. Complements
``tests/test_hardening4.py``.
"""
from __future__ import annotations

import ast
import argparse
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, run_cli

USER_ERROR = 2


def _assert_paragraph(result, code: int, *phrases: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == code, (result.returncode, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    for phrase in phrases:
        assert phrase in output, output[-3000:]


# ---- 1. A flag only as spelled in full ------------------------------------------------------------------

@pytest.mark.parametrize("argv, full", [
    (["run", "--conf", "team.yaml"], "--config"),
    (["prepare", "--conf", "team.yaml"], "--config"),
    (["compile", "--conf", "team.yaml", "--image", "i:1", "--pipeline-root", "gs://bucket/tfx"], "--config"),
    (["run", "--outp", "elsewhere"], "--output"),
    (["models", "--serving", "x"], "--serving-dir"),
    (["report", "--requ"], "--require-latest"),
])
def test_an_abbreviated_flag_is_refused_naming_the_full_one(tmp_path, argv, full):
    (tmp_path / "team.yaml").write_text("epochs: 1\n")
    result = run_cli(*argv, cwd=tmp_path, timeout=120)
    _assert_paragraph(result, USER_ERROR, f"{argv[1]} is the start of {full}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.yaml"]  # no ./output, nothing run


def test_every_parser_of_every_command_refuses_abbreviations():
    from pipeline.arguments import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) >= {"run", "prepare", "compile", "deploy", "report", "models", "tensorboard"}
    assert [name for name, sub in commands.items() if sub.allow_abbrev] == []
    assert parser.allow_abbrev is False


def test_every_argument_parser_in_the_code_refuses_abbreviations():
    """The pods' entrypoints (pipeline/kubeflow/) parse flags too: each ``ArgumentParser(...)`` says
    ``allow_abbrev=False`` or is the CLI's ExactParser."""
    loose = []
    for path in Path(PROJECT_ROOT, "pipeline").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "ArgumentParser"
                    and not any(k.arg == "allow_abbrev" for k in node.keywords)):
                loose.append(f"{path}:{node.lineno}")
    assert loose == []

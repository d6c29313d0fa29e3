"""kubeflow/Dockerfile stays consistent with the project (no Docker engine here to build it)."""
import re

import pytest
from conftest import PROJECT_ROOT

from pipeline.families import FAMILIES
from pipeline.kubeflow.compile import IMAGE_DATA_ROOT

DOCKERFILE = (PROJECT_ROOT / "kubeflow" / "Dockerfile").read_text()


STACKS = sorted(path.stem for path in (PROJECT_ROOT / "constraints").glob("*.txt"))


def _pinned(package: str, stack: str) -> str:
    for line in (PROJECT_ROOT / "constraints" / f"{stack}.txt").read_text().splitlines():
        if line.lower().startswith(package + "=="):
            return line.split("==")[1]
    raise AssertionError(f"{package} not pinned in constraints/{stack}.txt")


def test_every_stack_has_a_base_stage_and_the_default_is_tfx_116():
    assert STACKS == ["tfx-1.16", "tfx-1.21"]
    for stack in STACKS:
        assert re.search(rf"^FROM \S+ AS base-{re.escape(stack)}$", DOCKERFILE, flags=re.M), stack
    assert "FROM base-${STACK}" in DOCKERFILE
    assert "ARG STACK=tfx-1.16" in DOCKERFILE


def test_the_older_stack_builds_on_tfx_of_its_pinned_version():
    assert f"ARG TFX_VERSION={_pinned('tfx', 'tfx-1.16')}" in DOCKERFILE
    assert "FROM tensorflow/tfx:${TFX_VERSION} AS base-tfx-1.16" in DOCKERFILE


def test_the_newer_stack_builds_on_the_python_its_constraints_were_resolved_on():
    """constraints/tfx-1.21.txt is resolved on Debian 13's Python 3.13 (glibc 2.41): so is the image."""
    assert re.search(r"^FROM python:3\.13-slim-trixie AS base-tfx-1\.21$", DOCKERFILE, flags=re.M)
    assert _pinned("tfx", "tfx-1.21") == "1.21.0"


def test_installs_the_project_with_the_same_constraints():
    assert re.search(r"pip install [^\n]*-c constraints/\$\{STACK\}\.txt \"\.\[", DOCKERFILE)
    assert "COPY constraints/ constraints/" in DOCKERFILE
    for source in re.findall(r"^COPY (.+) \S+$", DOCKERFILE, flags=re.M):
        for path in source.split():
            assert (PROJECT_ROOT / path.rstrip("/")).exists(), path
    for package in ("pipeline", "components", "models", "data"):
        assert f"COPY {package}/ {package}/" in DOCKERFILE


def test_sets_legacy_keras_before_python_starts():
    assert re.search(r"ENV TF_USE_LEGACY_KERAS=1", DOCKERFILE)


@pytest.mark.parametrize("model", sorted(FAMILIES))
def test_bakes_default_data_where_compiled_pipelines_read_it(model):
    match = re.search(rf"python -m pipeline prepare --model {model} --output (\S+)", DOCKERFILE)
    assert match and f"{match.group(1)}/data" == IMAGE_DATA_ROOT

"""kubeflow/Dockerfile stays consistent with the project (no Docker engine here to build it)."""
import re

import pytest
from conftest import PROJECT_ROOT

from pipeline.families import FAMILIES
from pipeline.kubeflow.compile import IMAGE_DATA_ROOT

DOCKERFILE = (PROJECT_ROOT / "kubeflow" / "Dockerfile").read_text()


def _pinned(package: str) -> str:
    for line in (PROJECT_ROOT / "constraints.txt").read_text().splitlines():
        if line.lower().startswith(package + "=="):
            return line.split("==")[1]
    raise AssertionError(f"{package} not pinned in constraints.txt")


def test_base_image_is_tfx_of_the_pinned_version():
    assert f"ARG TFX_VERSION={_pinned('tfx')}" in DOCKERFILE
    assert "FROM tensorflow/tfx:${TFX_VERSION}" in DOCKERFILE


def test_installs_the_project_with_the_same_constraints():
    assert re.search(r"pip install [^\n]*-c constraints\.txt \.", DOCKERFILE)
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

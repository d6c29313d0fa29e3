"""The pipeline image's Python environment, built from kubeflow/Dockerfile's own lines, without Docker.

KFP runs every step in the image, not in the development venv: a package the image lacks, a
file ``pip install .`` leaves out of site-packages, or a module importable only from the
checkout fails there and nowhere else. This builds what the Dockerfile builds, read from the
Dockerfile itself so that the two cannot drift:

- ``COPY`` lines: the listed files and folders into ``<dir>/src`` (the ``WORKDIR``), minus what
  .dockerignore keeps out of the build context;
- a fresh venv of this interpreter's Python (the base image's ``python``: Python 3.10, like
  ``tensorflow/tfx:1.16.0``) with nothing of the development venv;
- every ``RUN`` line of the final stage (after the last ``FROM``), in order, by ``bash`` in
  ``<dir>/src`` with the venv first on ``PATH``, the ``ENV`` lines set, the ``ARG`` values in the
  environment as ``docker build`` gives them to ``RUN`` (``STACK``: the stack installed here, as
  ``make image IMAGE_STACK=...`` would pass it; the others their defaults), and the image's
  ``/opt/tfx-data`` at ``<dir>/tfx-data``.

Deviations, because there is no Docker here: the base image is not reproduced, neither its own
packages (TFX's image ships TFX and its dependencies preinstalled), so the ``pip install`` line
must bring everything itself (stricter, not kinder), nor the ``RUN`` lines of the base stages
(``apt-get install g++`` for tfx-1.21's Python image: this machine's own compiler stands in).
The build takes minutes (hundreds of packages): a ``build.sha256`` of the Dockerfile, the build
arguments and the files it copies lets a later call on the same folder reuse it.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from support.kfp_contract import REPO, dockerfile_env

DOCKERFILE = Path(REPO) / "kubeflow" / "Dockerfile"
IMAGE_DATA = "/opt/tfx-data"  # where the Dockerfile prepares the bundled data (compile.py IMAGE_DATA_ROOT's parent)


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.partition(" ")
        lines.append((word.upper(), rest.strip()))
        current = ""
    return lines


def _stage_starts(lines: list[tuple[str, str]]) -> list[int]:
    """The indices of the ``FROM`` lines: where each build stage begins."""
    return [i for i, (word, _) in enumerate(lines) if word == "FROM"]


def final_stage(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The instructions after the last ``FROM``: the stage ``docker build`` makes the image of (the
    earlier ones are the bases it may start from)."""
    starts = _stage_starts(lines)
    return lines[starts[-1] + 1:] if starts else lines


def build_args(path: Path = DOCKERFILE) -> dict[str, str]:
    """The ``ARG`` values ``RUN`` lines see: each ``ARG``'s default (global or redeclared in the final
    stage, ``ARG NAME`` taking the global default), ``STACK`` set to the stack installed here."""
    import stackenv

    lines = instructions(path)
    starts = _stage_starts(lines)
    global_args, args = {}, {}
    for index, (word, rest) in enumerate(lines):
        if word != "ARG":
            continue
        name, _, default = rest.partition("=")
        if starts and index < starts[0]:
            global_args[name] = default
        elif not starts or index > starts[-1]:
            args[name] = default or global_args.get(name, "")
    if "STACK" in args:
        args["STACK"] = stackenv.stack()
    return args


def _ignored(relative: str, patterns: list[str]) -> bool:
    """.dockerignore's rule, as far as this repository's patterns need: a path is out when it or a
    folder above it matches a pattern (``**/`` matching at any depth)."""
    parts = relative.split(os.sep)
    prefixes = [os.sep.join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(prefix, pattern) or
               (pattern.startswith("**/") and fnmatch.fnmatch(part, pattern[3:]))
               for pattern in patterns for prefix, part in zip(prefixes, parts))


def _context_files(path: Path = DOCKERFILE) -> list[Path]:
    """Every file the COPY lines take from the build context (the repository), in order."""
    ignore_file = Path(REPO) / ".dockerignore"
    patterns = [p.strip() for p in ignore_file.read_text().splitlines()
                if p.strip() and not p.startswith("#")] if ignore_file.exists() else []
    files = []
    for word, rest in final_stage(instructions(path)):
        if word != "COPY":
            continue
        *sources, _ = shlex.split(rest)
        for source in sources:
            top = Path(REPO) / source
            candidates = sorted(top.rglob("*")) if top.is_dir() else [top]
            files += [f for f in candidates
                      if f.is_file() and not _ignored(os.path.relpath(f, REPO), patterns)]
    return files


def _fingerprint(path: Path = DOCKERFILE) -> str:
    digest = hashlib.sha256(path.read_bytes() + repr(sorted(build_args(path).items())).encode())
    for file in _context_files(path):
        digest.update(os.path.relpath(file, REPO).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def build(directory: str | os.PathLike, log=print, timeout_s: int = 3600) -> tuple[str, str]:
    """Build (or reuse) the image's environment in ``directory``; returns (its python, its data root,
    i.e. what the image has at ``/opt/tfx-data``). A failing line raises with its output's tail."""
    directory = Path(directory)
    venv, src, data = directory / "venv", directory / "src", directory / "tfx-data"
    marker, fingerprint = directory / "build.sha256", _fingerprint()
    python = str(venv / "bin" / "python")
    if marker.exists() and marker.read_text() == fingerprint and os.path.exists(python):
        return python, str(data)
    for stale in (venv, src, data):
        shutil.rmtree(stale, ignore_errors=True)
    marker.unlink(missing_ok=True)
    src.mkdir(parents=True)
    for word, rest in final_stage(instructions()):
        if word == "COPY":
            *sources, dest = shlex.split(rest)
            for source in sources:
                origin, target = Path(REPO) / source, src / dest
                if origin.is_dir():
                    for file in (f for f in _context_files() if Path(REPO) / source in f.parents):
                        out = target / os.path.relpath(file, origin)
                        out.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(file, out)
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target / origin.name)
    base_python = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=600)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not key.startswith(("AWS_", "S3_"))}
    env.update(build_args(), **dockerfile_env(), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    for word, rest in final_stage(instructions()):
        if word != "RUN":
            continue
        line = rest.replace(IMAGE_DATA, str(data))
        log(f"image environment: RUN {line}")
        result = subprocess.run(["bash", "-c", line], cwd=src, env=env, capture_output=True, text=True,
                                timeout=timeout_s)
        if result.returncode != 0:
            raise RuntimeError(f"kubeflow/Dockerfile line `RUN {rest}` failed ({result.returncode}):\n"
                               f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    marker.write_text(fingerprint)
    return python, str(data)

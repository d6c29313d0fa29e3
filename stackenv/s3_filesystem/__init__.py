"""``s3://`` for ``tf.io.gfile`` where tensorflow-io has no build: the tfx-1.21 stack's TensorFlow.

TensorFlow has no S3 filesystem of its own. On tfx-1.16, tensorflow-io registers one on import;
for TensorFlow 2.17+ there is no tensorflow-io, and its last plugin cannot be loaded into them
(it needs C++ symbols TensorFlow no longer exports). This package is the same filesystem through
TensorFlow's stable C API for filesystem plugins: plugin.cc, compiled against the installed
TensorFlow's headers, hands every operation to operations.py (boto3, which Beam's S3 filesystem
already uses). ``make setup`` and the pipeline image build it (``python -m stackenv.s3_filesystem``);
a process that needs it and finds it missing builds it once, in a few seconds.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import tempfile

from stackenv.errors import ProjectError

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_HERE, "plugin.cc")
BUILD_TIMEOUT_S = 300
#: Set by ``register``, so the Python processes a step starts (Beam's workers, through
#: stackenv/beam_worker_site) register it too.
INHERITED = "PIPELINE_S3_FILESYSTEM_PLUGIN"
_registered = False


def plugin_path() -> str:
    """The built plugin, per TensorFlow and Python version (it is tied to the headers it saw) and per
    source (a changed plugin.cc, after a pull, is built again rather than an old build loaded)."""
    import tensorflow as tf

    with open(SOURCE, "rb") as handle:
        source = hashlib.sha256(handle.read()).hexdigest()[:12]
    python = f"{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(_HERE, f"_plugin-tf{tf.__version__}-py{python}-{source}.so")


def build(target: str | None = None) -> str:
    """Compile plugin.cc into ``target`` (default ``plugin_path()``); the file appears whole or not at all."""
    import tensorflow as tf

    target = target or plugin_path()
    compiler = os.environ.get("CXX") or "g++"
    descriptor, partial = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
    os.close(descriptor)
    command = [compiler, "-shared", "-fPIC", "-O2", SOURCE, "-o", partial, *tf.sysconfig.get_compile_flags(),
               f"-I{sysconfig.get_paths()['include']}", *tf.sysconfig.get_link_flags(),
               f"-Wl,-rpath,{tf.sysconfig.get_lib()}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        os.unlink(partial)
        raise ProjectError(_cannot_build(compiler, str(error))) from None
    if done.returncode != 0:
        os.unlink(partial)
        raise ProjectError(_cannot_build(compiler, done.stderr.strip()[-2000:]))
    os.replace(partial, target)
    return target


def _cannot_build(compiler: str, why: str) -> str:
    return (f"TensorFlow's s3:// filesystem for this stack (stackenv/s3_filesystem/plugin.cc) could not be "
            f"compiled with {compiler}: {why}. It needs a C++ compiler and Python's headers, which `make setup` "
            "checks for. Fix: install them (on Debian/Ubuntu `sudo apt-get install g++ python3-dev`) and run "
            "`python -m stackenv.s3_filesystem`, or use a gs:// location.")


def register() -> None:
    """Give ``tf.io.gfile`` (and so TFX and TensorFlow's own ops) ``s3://`` in this process; idempotent."""
    global _registered
    if _registered:
        return
    import tensorflow as tf

    path = plugin_path()
    if not os.path.exists(path):
        print("Building TensorFlow's s3:// filesystem for this stack (once) ...", file=sys.stderr, flush=True)
        build(path)
    tf.experimental.register_filesystem_plugin(path)
    os.environ[INHERITED] = "1"
    _registered = True

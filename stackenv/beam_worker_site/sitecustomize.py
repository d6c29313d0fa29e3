"""Hooks for Python processes a step starts itself (Beam's multi_processing SDK workers).

pipeline/kubeflow/entrypoint.py puts this folder first on PYTHONPATH, so every interpreter the
step starts runs it at start-up: it installs the same Beam S3 work-around as the step's own
process (stackenv/compat.py single_deletes_where_batch_is_denied), registers TensorFlow's s3://
filesystem where the step registered the project's (stackenv/s3_filesystem: Transform's workers
write through tf.io.gfile), and then runs the next ``sitecustomize`` on the path, if any, as
Python would have.
"""
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _next_sitecustomize() -> None:
    later = [entry for entry in sys.path if entry and os.path.abspath(entry) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is not None and spec.loader is not None and spec.origin != __file__:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _install() -> None:
    try:
        from stackenv.compat import single_deletes_where_batch_is_denied
    except ImportError:  # the project is not importable here: nothing to install
        return
    single_deletes_where_batch_is_denied()
    from stackenv import s3_filesystem

    if os.environ.get(s3_filesystem.INHERITED):
        s3_filesystem.register()


_next_sitecustomize()
_install()

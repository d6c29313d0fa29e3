"""How the CLI reports a failure: one paragraph on the terminal, the traceback in a file.

``pipeline.cli.main`` is the one place that catches; this module decides what it prints.
A :class:`~stackenv.errors.ProjectError` found anywhere on the exception chain (Beam and
TFX wrap an executor's error, sometimes twice) is printed as its paragraph; an OS error on
a path becomes a paragraph naming the path; anything else prints its first line (the
part that says what happened) and the path of the saved traceback.
"""
import argparse
import os
import re
import sys
import tempfile
import time
import traceback

from stackenv import text_out
from stackenv.errors import EXIT_PIPELINE_FAILED, EXIT_USER_ERROR, PathError, ProjectError, find_in_chain, path_error

from pipeline.local import disk_full

#: A screenful: a longer message (a paragraph listing 300 class names) is cut here, whole in a file.
MAX_MESSAGE_CHARS = 1200


def failure_report(error: BaseException, logs_dir: str) -> tuple[str, int]:
    """The paragraph to print for ``error`` and the exit code, at most a screenful.

    A ProjectError outside a component (bad flag, bad data, busy output dir) is the whole
    report: ``error: <paragraph>``. An OS error on a path becomes a paragraph naming the
    path. A component's failure says which component failed, then the ProjectError it
    raised or the first line of the unexpected error, then where the traceback is.
    """
    message, code = _full_report(error, logs_dir)
    if len(message) <= MAX_MESSAGE_CHARS:
        return message, code
    path = _save_traceback(error, logs_dir, message)
    return shortened(message, path), code


def shortened(message: str, path: str) -> str:
    """``message`` cut to about a screenful in its middle: what is wrong (its start) and how to fix it (its
    last sentence, and the traceback line after it) stay; a long list between them is what is left out."""
    head, _, tail = message.rpartition("\n") if "\n" in message[-400:] else (message, "", "")
    body, fix = head, ""
    last = body.rstrip().rfind(". ", 0, len(body.rstrip()) - 1)
    if last > 0 and len(body) - last < MAX_MESSAGE_CHARS // 2:
        body, fix = body[:last + 1], body[last + 2:]
    kept = MAX_MESSAGE_CHARS - len(fix) - len(tail)
    cut = body[:max(kept, 200)].rsplit(" ", 1)[0]
    left_out = len(body) - len(cut)
    text = f"{cut} ... [{left_out} characters left out; the whole message: {path}]"
    return " ".join(filter(None, (text, fix))) + (f"\n{tail}" if tail else "")


#: When this command began: a model version published since then is this run's (pipeline/local/disk_full.py).
STARTED = time.time()


def _full_report(error: BaseException, logs_dir: str) -> tuple[str, int]:
    failed = _component_failed(error)
    output_dir = os.path.dirname(logs_dir) if os.path.basename(logs_dir) == "logs" else None
    full = disk_full.paragraph(error, output_dir, failed.node_id if failed is not None else None, STARTED)
    if full is not None:  # no traceback file: there is no room for one, and none is written elsewhere
        return f"error: {full.paragraph}", full.exit_code
    if failed is None:
        known = _known(error)
        if known is not None:
            return f"error: {known.paragraph}", known.exit_code
    cause = failed.cause if failed is not None else error
    known = _known(cause)
    if known is not None and known.exit_code == EXIT_USER_ERROR:
        # Bad input found inside a step (the ExampleGen reading --data) reads as it did when
        # the check ran before the pipeline: the paragraph alone; Beam's step name is noise.
        return f"error: {_BEAM_STEP.sub('', known.paragraph)}", known.exit_code
    root = known or _root_cause(cause)
    text = known.paragraph if known else (str(root).strip().splitlines() or [""])[0]
    text = _BEAM_STEP.sub("", text)  # a check inside a Beam step gets Beam's suffix
    where = f"Component {failed.node_id} failed" if failed is not None else "The pipeline failed"
    log_path = _save_traceback(error, logs_dir)
    return (f"{where}: {type(root).__name__}: {text}\n"
            f"Full traceback: {log_path} (re-run with -v for TFX/Beam logs).",
            known.exit_code if known else EXIT_PIPELINE_FAILED)


_BEAM_STEP = re.compile(r"(\s*\[while running '[^']*'\])+$")


def _known(error: BaseException) -> ProjectError | None:
    return (find_in_chain(error, ProjectError) or path_error(error) or _tf_permission_error(error)
            or _not_utf8_error(error))


def _not_utf8_error(error: BaseException) -> ProjectError | None:
    """A name holding bytes that are not UTF-8 reached a strict encoder (TensorFlow's file system, a proto):
    the paragraph shows the text as written (``\\xNN``) instead of the encoder's internals."""
    encode = find_in_chain(error, UnicodeEncodeError)
    if encode is None or not isinstance(encode.object, str):
        return None
    shown = text_out.printable(encode.object)[:200]
    return PathError(f"A name holds bytes that are not UTF-8 ({shown}, each such byte shown as \\xNN), and the "
                     "library that was to open or record it takes UTF-8 only. Rename the file or folder to a UTF-8 "
                     "name, or pass another one.", shown)


def _tf_permission_error(error: BaseException) -> ProjectError | None:
    """tf.io.gfile reports a refused path as its own PermissionDeniedError, not an OSError."""
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")  # loaded only if TF ran
    denied = find_in_chain(error, tf_errors.PermissionDeniedError) if tf_errors is not None else None
    if denied is None:
        return None
    first = (str(denied.message).strip().splitlines() or ["permission denied"])[0]
    return PathError(f"The file system refused a path: {first}. The folder is read-only or not yours; make it "
                     "writable or choose a location you can write to.", "")


def _component_failed(error: BaseException):
    runner = sys.modules.get("pipeline.local.runner")  # only a local run can have failed in a component
    return find_in_chain(error, runner.ComponentFailed) if runner is not None else None


def is_interrupt(error: BaseException) -> bool:
    if find_in_chain(error, KeyboardInterrupt) is not None:
        return True
    return str(error).startswith("KeyboardInterrupt")


def _root_cause(error: BaseException) -> BaseException:
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def logs_dir(args: argparse.Namespace) -> str:
    """<output>/logs for commands that have a local output directory, else a temp folder."""
    output = getattr(args, "output", None)
    if isinstance(output, str) and "://" not in output:
        return os.path.join(os.path.abspath(output), "logs")
    return os.path.join(tempfile.gettempdir(), "tfx-project-logs")


def _save_traceback(error: BaseException, logs_dir: str, message: str = "") -> str:
    """Write the full traceback (after ``message``, when given); falls back to a temp folder when
    ``logs_dir`` is unwritable."""
    name = f"error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (logs_dir, os.path.join(tempfile.gettempdir(), "tfx-project-logs")):
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, name)
            with open(path, "w", encoding="utf-8", errors=text_out.ERRORS) as handle:
                if message:
                    handle.write(message + "\n\n")
                traceback.print_exception(type(error), error, error.__traceback__, file=handle)
            return path
        except OSError:
            continue
    return "(not saved: no writable log folder)"

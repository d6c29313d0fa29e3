"""The project's one error type: a paragraph a person can act on, and an exit code.

Every error a user can fix (bad data, a bad flag, a busy output directory, an
unreachable Kubeflow host, data that drifted from the pinned schema) derives from
:class:`ProjectError`, so the CLI catches one type and prints its message as is. Some
classes also derive from the built-in they replaced (``ValueError``, ``FileNotFoundError``)
only so existing ``except`` clauses keep working; the CLI never relies on that.

This module sits at the bottom of the dependency graph (beside ``stackenv``): it imports
nothing from the project and nothing heavy, so ``data/``, ``models/``, ``components/`` and
``pipeline/`` can all raise these errors.
"""
from __future__ import annotations

import errno

EXIT_PIPELINE_FAILED = 1
EXIT_USER_ERROR = 2


class ProjectError(Exception):
    """A problem described for the person running the pipeline.

    The message is the whole report, one paragraph: what is wrong, where (path, flag,
    component) and how to fix it. ``exit_code`` is what the CLI returns for it.
    """

    exit_code = EXIT_USER_ERROR

    @property
    def paragraph(self) -> str:
        return str(self).strip()


class ConfigError(ProjectError, ValueError):
    """A setting is invalid; ``flag`` names the command-line option that sets it."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


class MissingInput(ProjectError, FileNotFoundError):
    """A path the user named (a model, a serving dir, a run's output) is not there."""

    def __init__(self, message: str) -> None:
        # FileNotFoundError's (errno, strerror) form would print as "[Errno ...]"; one argument keeps the paragraph.
        super().__init__(message)


class PathError(ProjectError):
    """The operating system refused a path (not a directory, read-only, no permission, disk full)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


_OS_ERROR_HINTS = {
    errno.ENOTDIR: "a part of it is a file, not a directory; choose another path or remove that file",
    errno.EISDIR: "it is a directory where a file was expected; pass a file path",
    errno.EEXIST: "something already exists there; remove it or choose another path",
    errno.EROFS: "the file system is read-only; choose a writable location (e.g. under your home directory)",
    errno.EACCES: "permission denied; choose a location you can write to, or fix its permissions",
    errno.EPERM: "the operation is not permitted there; choose a location you own",
    errno.ENOSPC: "the disk is full; free space or choose another location",
    errno.ENAMETOOLONG: "the path is too long; choose a shorter one",
}


def find_in_chain(error: BaseException | None, kind: type[BaseException] | tuple[type[BaseException], ...]):
    """The first exception of ``kind`` among ``error`` and its causes/contexts, else None.

    Beam and TFX wrap an executor's exception (sometimes more than once) before it reaches
    the CLI; the original is still on the ``__cause__``/``__context__`` chain.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def path_error(error: BaseException) -> PathError | None:
    """One paragraph naming the path for an OS error on a path in ``error``'s chain, else None."""
    os_error = find_in_chain(error, OSError)
    if os_error is None or not os_error.filename or os_error.errno not in _OS_ERROR_HINTS:
        return None
    path = str(os_error.filename)
    target = f" (to {os_error.filename2})" if os_error.filename2 else ""
    return PathError(f"Cannot use the path {path}{target}: {os_error.strerror}; "
                     f"{_OS_ERROR_HINTS[os_error.errno]}.", path)

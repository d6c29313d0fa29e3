"""Errors raised for bad user input while preparing data.

The CLI catches :class:`~stackenv.errors.ProjectError` and prints only its message (no traceback), so every
message is written for the person running the pipeline: one paragraph saying what is
wrong, where (path, file or feature), and how to fix it.
"""

from stackenv.errors import ProjectError


class DataError(ProjectError, ValueError):
    """Bad input data or arguments; the message is the whole user-facing explanation."""

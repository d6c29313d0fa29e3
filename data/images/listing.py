"""Listing an image folder through ``tf.io.gfile``: the one place that says what a class
folder must look like.

Both the prepare step (``folder.plan_folder``) and the ExampleGen's units
(``sources.list_source``) list folders here, so a local path, ``gs://`` and ``s3://`` give
the same classes, the same walk order and the same paragraphs for bad input.
"""
from __future__ import annotations

import tensorflow as tf

from data.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
IGNORED_DIRS = frozenset({"__MACOSX"})  # OS metadata folders, never classes


def join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name.strip("/")


def visible_names(root: str, ignored: frozenset[str] = frozenset()) -> list[str]:
    """Sorted children of ``root`` (any gfile URI) without hidden entries and ``ignored`` names."""
    try:
        names = sorted({n.rstrip("/") for n in tf.io.gfile.listdir(root)})
    except tf.errors.OpError as exc:
        raise DataError(
            f"Cannot list folder {root} ({exc.message}). Check that it exists and is readable by "
            "the user (or service account) running the pipeline."
        ) from exc
    return [n for n in names if not n.startswith(".") and n not in ignored]


def find_files(root: str, suffixes: tuple[str, ...], ignored: frozenset[str] = frozenset()) -> list[str]:
    """Files below ``root`` ending in ``suffixes`` (any case), in the walk order of
    ``data.prepare.find_files``: a folder's files, then its sub-folders, both sorted."""
    found, subdirs = [], []
    for name in visible_names(root):
        path = join(root, name)
        if tf.io.gfile.isdir(path):
            if name not in ignored:
                subdirs.append(path)
        elif name.lower().endswith(suffixes):
            found.append(path)
    for sub in subdirs:
        found += find_files(sub, suffixes, ignored)
    return found


def list_class_files(root: str, names: list[str] | None = None) -> dict[str, list[str]]:
    """Class name -> its image files (searched recursively), both sorted; DataError for a
    folder that is not one sub-folder of images per class. ``names``: the root's visible
    children when the caller has already listed them."""
    names = visible_names(root, IGNORED_DIRS) if names is None else names
    class_dirs = [n for n in names if tf.io.gfile.isdir(join(root, n))]
    if not class_dirs:
        if any(n.lower().endswith(IMAGE_SUFFIXES) for n in names):
            raise DataError(
                f"Folder {root} holds images directly, but images must be grouped in one "
                "sub-folder per class (e.g. cats/ and dogs/), the sub-folder name being the "
                "class name. Move each image into the sub-folder of its class."
            )
        what = "is empty" if not names else "has no class sub-folders"
        raise DataError(
            f"Image folder {root} {what}. Put the images in one sub-folder per class (e.g. "
            f"{root}/cats/*.png and {root}/dogs/*.png), with at least two classes."
        )
    per_class = {}
    for name in class_dirs:
        images = find_files(join(root, name), IMAGE_SUFFIXES, IGNORED_DIRS)
        if not images:
            raise DataError(
                f"Class folder {join(root, name)} contains no images (files ending in "
                f"{', '.join(IMAGE_SUFFIXES)}). Add images of class '{name}' to "
                "it, or remove the folder if it is not a class."
            )
        per_class[name] = images
    if len(class_dirs) < 2:
        raise DataError(
            f"Image folder {root} has only one class ('{class_dirs[0]}'), but a "
            "classifier needs at least two. Add a sub-folder of images for each other class."
        )
    return per_class

"""Unlabeled inputs for batch scoring (``run --score DIR``): the folder's files, and each one as
the serialized ``tf.train.Example`` a model's ``serving_default`` signature reads.

Why here and through the training readers: a scored image must be decoded and resized exactly
as the training images were (``data.images.pixels``), and a scored text read as the training
documents were (``data.text_files``: decompression, encodings, markup), or the scores would
carry a train/serving skew. Each example also holds ``example_id`` = the file's path below the
folder, so a prediction can be traced back to its file (the signatures ignore it).

A reader raises :class:`UnreadableInput` for a file it cannot read; the caller lists it, it is
never dropped silently.
"""
from __future__ import annotations

import posixpath

import tensorflow as tf

from data import features, text_features
from data.errors import DataError
from data.manifest import image_shape_in
from data.walk import File, Problem, walk

#: exec/custom-config key of the example id every scoring example carries.
EXAMPLE_ID = features.EXAMPLE_ID


class UnreadableInput(DataError):
    """A scoring file that yields no example; its message says why."""


def list_inputs(root: str, follow_links: bool = False) -> tuple[list[File], list[Problem]]:
    """Every file below ``root`` (local or a ``tf.io.gfile`` URI; hidden ones not listed), and the
    entries that are not regular files (fifos, devices, symlink loops: never opened) or, unless
    ``follow_links`` (``--follow-links``), symlinks leading out of ``root``: as for ``--data``."""
    if not tf.io.gfile.isdir(root):
        what = "does not exist" if not tf.io.gfile.exists(root) else "is a file, not a folder"
        raise DataError(f"--score {root} {what}. Pass a folder of the files to score (images for the image "
                        "family, text files for the text family); every file below it is scored.")
    files, problems = walk(root, follow_links)
    if not files and not problems:
        raise DataError(f"--score folder {root} holds no file to score (hidden files are not read). Put the "
                        "images or text files to score in it, or leave --score out.")
    return files, problems


def _bytes(value: str) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))


def image_example(uri: str, relative: str, settings: dict) -> bytes:
    """One image file -> an Example with ``image`` (pixels at the training shape, from the data's facts)."""
    from data.images.pixels import load_image_file

    try:
        height, width, channels = image_shape_in(settings)
        pixels = load_image_file(uri, (height, width, channels),
                                 remedy="Replace it with a good copy, or remove it from the --score folder.")
    except DataError as error:
        raise UnreadableInput(str(error)) from error
    return tf.train.Example(features=tf.train.Features(feature={
        features.IMAGE: tf.train.Feature(int64_list=tf.train.Int64List(value=pixels.ravel().tolist())),
        EXAMPLE_ID: _bytes(relative),
    })).SerializeToString()


def text_example(uri: str, relative: str, settings: dict) -> bytes:
    """One text file -> an Example whose ``context`` is its last ``settings["context_words"]`` words
    (the model predicts what follows the file's end)."""
    from data.text_decode import Unusable
    from data.text_files import read_words

    read = read_words(uri, posixpath.basename(relative))
    if isinstance(read, Unusable):
        why = f"{read.reason}: {read.detail}" if read.detail else read.reason
        raise UnreadableInput(f"Text file {uri} cannot be read ({why}). Replace it with a readable text file, "
                              "or remove it from the --score folder.")
    if not read.words:
        raise UnreadableInput(f"Text file {uri} has no words, so there is nothing to continue. Remove it from "
                              "the --score folder.")
    context = " ".join(read.words[-int(settings["context_words"]):])
    return tf.train.Example(features=tf.train.Features(feature={
        text_features.CONTEXT: _bytes(context), EXAMPLE_ID: _bytes(relative),
    })).SerializeToString()

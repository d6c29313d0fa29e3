"""The bad-input table: each row is one mistake a user can make, run through the real CLI.

Every row asserts the exit code, that no ``Traceback`` reaches the terminal, a key phrase of
the paragraph, that nothing was pushed and that nothing was written outside the output
directory. Most rows fail before TFX starts (cheap); a future bad input is one more row.
Read-only cases use ``chattr +i`` (root bypasses permission bits, not the immutable flag).
"""
import contextlib
import dataclasses
import os
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from PIL import Image

USER_ERROR = 2


@dataclasses.dataclass
class Case:
    id: str
    args: Callable[[Path], list[object]]   # builds its input under the test's tmp dir, returns the argv
    phrase: str                            # a key phrase of the paragraph ("{tmp}" = the tmp dir)
    exit_code: int = USER_ERROR
    timeout: int = 300                     # a bound, not a speed assertion (TFX rows get more)


def _file(tmp: Path, name: str = "a-file", content: bytes = b"x") -> Path:
    path = tmp / name
    path.write_bytes(content)
    return path


def _png(tmp: Path) -> Path:
    path = tmp / "x.png"
    Image.new("L", (8, 8), 100).save(path)
    return path


def _versions(tmp: Path, corrupt: bool = False) -> Path:
    """A serving dir with versions 1 and 2 (saved_model.pb garbage: only rollback/parsing look at it)."""
    base = tmp / "serving" / "cnn"
    for version in (1, 2):
        (base / str(version)).mkdir(parents=True)
        (base / str(version) / "saved_model.pb").write_bytes(b"not a protobuf" if corrupt else b"")
    return base


def _immutable(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chattr", "+i", str(path)], check=True, timeout=30)
    return path


def _cifar(tmp: Path) -> Path:
    folder = tmp / "cifar"
    folder.mkdir()
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump({b"label_names": [b"cat", b"dog"]}, handle)
    with open(folder / "data_batch_1", "wb") as handle:
        pickle.dump({b"data": np.zeros((0, 3072), np.uint8), b"labels": []}, handle)
    return folder


def _two_images(tmp: Path) -> Path:
    for name, colour in (("a", (10, 10, 10)), ("b", (200, 10, 10))):
        (tmp / "img" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8), colour).save(tmp / "img" / name / "1.png")
    return tmp / "img"


def _unusable_texts(tmp: Path) -> Path:
    """A text folder where no file yields a window: each for another reason, one paragraph for all."""
    folder = tmp / "texts"
    folder.mkdir()
    (folder / "short.txt").write_text("four words, no more")
    (folder / "empty.md").write_text("# \n\n```\ncode only\n```\n")
    (folder / "blob.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" * 64)
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    os.mkfifo(folder / "pipe.txt")
    (folder / "loop").symlink_to("loop")
    return folder


def _run(tmp: Path, *args: object) -> list[object]:
    return ["run", "--output", tmp / "out", "--train-steps", "2", *args]


CASES = [
    # Options: every number and name checked with its flag, before anything starts.
    Case("train-steps-negative", lambda t: _run(t, "--train-steps", "-5"),
         "--train-steps: must be a number from 1 to 1000000000, got -5."),
    Case("eval-steps-zero", lambda t: _run(t, "--eval-steps", "0"),
         "--eval-steps: must be a number from 1 to 1000000000, got 0."),
    Case("batch-size-zero", lambda t: _run(t, "--batch-size", "0"),
         "--batch-size: must be a number from 1 to 65536, got 0."),
    Case("epochs-zero", lambda t: ["run", "--output", t / "out", "--epochs", "0"],
         "--epochs: must be a number from 1 to 100000, got 0."),
    Case("learning-rate-nan", lambda t: _run(t, "--learning-rate", "nan"),
         "--learning-rate: must be a number from 1e-09 to 10, got nan."),
    Case("learning-rate-negative", lambda t: _run(t, "--learning-rate", "-1"),
         "--learning-rate: must be a number from 1e-09 to 10, got -1.0."),
    Case("min-accuracy-nan", lambda t: _run(t, "--min-accuracy", "nan"),
         "--min-accuracy: must be a number from 0 to 1, got nan."),
    Case("max-regression-inf", lambda t: _run(t, "--max-regression", "inf"), "--max-regression"),
    Case("image-size-one", lambda t: _run(t, "--image-size", "1"),
         "--image-size: must be a number from 2 to 4096, got 1."),
    Case("serving-name-escapes", lambda t: _run(t, "--serving-name", "../../x"), "--serving-name: '../../x'"),
    Case("pipeline-name-slash", lambda t: _run(t, "--pipeline-name", "a/b"), "--pipeline-name: 'a/b'"),
    # Kubeflow commands' flags are declared settings too: their ranges are checked before anything connects.
    Case("deploy-wait-timeout-zero", lambda t: ["deploy", "--host", "http://127.0.0.1:9", "--package", _file(t),
                                                "--run", "--wait", "--wait-timeout", "0"],
         "--wait-timeout: must be a number from 1 to 2592000, got 0.0."),
    Case("tfjob-workers-zero", lambda t: ["tfjob", "--output", t / "out", "--image", "registry.example/tfx:1",
                                          "--examples", "gs://b/t", "--transform-graph", "gs://b/g",
                                          "--model-dir", "gs://b/m", "--workers", "0"],
         "--workers: must be a number from 1 to 1000, got 0."),
    Case("generate-temperature-nan", lambda t: ["generate", "--model-dir", t, "--temperature", "nan", "x"],
         "--temperature: must be a finite number"),
    Case("generate-temperature-inf", lambda t: ["generate", "--model-dir", t, "--temperature", "inf", "x"],
         "--temperature: must be a finite number"),
    Case("generate-top-p-zero", lambda t: ["generate", "--model-dir", t, "--top-p", "0", "x"],
         "--top-p: must be a number in (0, 1]"),
    Case("generate-repetition-penalty-below-one", lambda t: ["generate", "--model-dir", t, "--repetition-penalty",
                                                             "0.5", "x"], "--repetition-penalty: must be a finite"),
    Case("generate-no-repeat-negative", lambda t: ["generate", "--model-dir", t, "--no-repeat-ngram", "-1", "x"],
         "--no-repeat-ngram: must be >= 0"),
    Case("generate-empty-prompt", lambda t: ["generate", "--model-dir", t, ""], "prompt 1 of 1 is empty"),
    # Paths: one paragraph naming the path.
    Case("output-is-a-file", lambda t: ["run", "--output", _file(t)], "Cannot use the path {tmp}/a-file"),
    Case("output-under-a-file", lambda t: ["run", "--output", _file(t) / "sub"], "Not a directory"),
    Case("output-read-only", lambda t: ["run", "--output", _immutable(t / "ro")], "{tmp}/ro/"),
    Case("predict-missing-image", lambda t: ["predict", "--model-dir", _versions(t), t / "nope.png"],
         "Image file {tmp}/nope.png does not exist"),
    Case("predict-model-dir-is-a-file", lambda t: ["predict", "--model-dir", _file(t), _png(t)],
         "--model-dir {tmp}/a-file is a file"),
    Case("predict-corrupt-saved-model", lambda t: ["predict", "--model-dir", _versions(t, corrupt=True), _png(t)],
         "Cannot load the SavedModel in {tmp}/serving/cnn/2"),
    Case("predict-tflite-missing", lambda t: ["predict", "--model-dir", _versions(t), "--tflite", _png(t)],
         "No float16 TFLite model in {tmp}/serving/cnn/2 (expected tflite/model_float16.tflite)"),
    Case("predict-quantization-without-tflite",
         lambda t: ["predict", "--model-dir", _versions(t), "--quantization", "int8", _png(t)], "needs --tflite"),
    Case("rollback-serving-dir-is-a-file", lambda t: ["rollback", "--serving-dir", _file(t)], "is a file"),
    Case("rollback-read-only", lambda t: ["rollback", "--serving-dir", _immutable(_versions(t))],
         "{tmp}/serving/cnn/2"),
    # Data: checked before TFX starts.
    Case("cifar-empty-batch", lambda t: _run(t, "--data", _cifar(t)), "holds no images"),
    # Rows that run TFX: nothing usable in a text folder (the ExampleGen's paragraph lists every reason);
    # too little data for both splits (up to ExampleValidator).
    Case("text-folder-nothing-usable", lambda t: _run(t, "--model", "seq2seq", "--data", _unusable_texts(t)),
         "leaves too little to train and evaluate: no document is usable. Of the 6 files found, 6 could not be "
         "used: 1 shorter than one window (short.txt), 1 empty (empty.md), 1 binary (blob.bin), 1 other format "
         "(photo.png), 1 not a regular file (pipe.txt), 1 symlink loop (loop).", timeout=600),
    Case("two-image-folder", lambda t: _run(t, "--data", _two_images(t)),
         "Component ExampleValidator failed: SplitError", exit_code=1, timeout=600),
]


def _tree(root: Path) -> set:
    return {p for p in root.rglob("*")}


@contextlib.contextmanager
def _thawed(root: Path):
    """Clear chattr +i afterwards, or pytest could not delete the tmp dir."""
    try:
        yield
    finally:
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                subprocess.run(["chattr", "-i", str(path)], timeout=30, capture_output=True)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path):
    with _thawed(tmp_path):
        args = case.args(tmp_path)
        before = _tree(tmp_path)
        result = run_cli(*args, timeout=case.timeout)
        written = _tree(tmp_path) - before
    output = result.stdout + result.stderr
    assert result.returncode == case.exit_code, (result.returncode, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    assert case.phrase.format(tmp=tmp_path) in result.stderr, result.stderr[-3000:]
    pushed = [p for p in written if p.name == "saved_model.pb"]
    assert not pushed, pushed
    outside = [p for p in written if (tmp_path / "out") not in (p, *p.parents)]
    assert not outside, outside  # e.g. --serving-name ../../x must not create tmp/x

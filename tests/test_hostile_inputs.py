"""Hostile inputs (issue 30): each row is a file system or a model a user could hand the CLI,
run through the real CLI in a subprocess.

Every row asserts the exit code, that no ``Traceback`` reaches the terminal, a key phrase of
the one paragraph (or line), that nothing was written outside the output directory (or the
row's serving dir) and that no model was pushed where none should be, and that no row
hangs (a fifo is the classic way to make a reader block forever). All rows but one fail
before TFX starts; the one full run reads a tiny folder of every image format.
Complements ``tests/test_bad_input.py`` (flags and plain bad paths).
"""
import dataclasses
import os
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
    args: Callable[[Path], list[object]]      # builds its input under the test's tmp dir, returns the argv
    phrases: tuple[str, ...]                  # key phrases of the output ("{tmp}" = the tmp dir)
    exit_code: int = USER_ERROR
    timeout: int = 120                        # a bound against hangs, not a speed assertion
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    writes_outside: tuple[str, ...] = ()      # paths (relative to tmp) a row may change outside out/
    check: Callable[[Path], None] | None = None  # what must hold on disk afterwards
    pushes: bool = False                      # the row's run may push a model (under out/serving)
    slow: bool = False                        # a full pipeline run


def _saved_model(path: Path, truncated: bool = False) -> Path:
    """A real SavedModel with a variable (built in this process), its variables file cut when ``truncated``."""
    import tensorflow as tf

    module = tf.Module()
    module.weights = tf.Variable(tf.ones([256]))
    module.apply = tf.function(lambda x: x * module.weights[0], input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(path))
    if truncated:
        data = path / "variables" / "variables.data-00000-of-00001"
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    return path


def _versions(tmp: Path, *names: str) -> Path:
    """A serving dir whose entries hold a saved_model.pb (garbage: only listing and rollback read them)."""
    base = tmp / "serving" / "cnn"
    for name in names:
        (base / name).mkdir(parents=True)
        (base / name / "saved_model.pb").write_bytes(b"x")
    return base


def _file(tmp: Path, name: str, content: bytes = b"some notes\n") -> Path:
    (tmp / name).write_bytes(content)
    return tmp / name


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _png(tmp: Path) -> Path:
    Image.new("L", (8, 8), 100).save(tmp / "x.png")
    return tmp / "x.png"


def _output_with_link(tmp: Path, name: str) -> Path:
    """--output holding a symbolic link ``name`` to a victim outside it."""
    victim = tmp / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    (tmp / "out").mkdir()
    os.symlink(victim / "precious" if name.endswith(".lock") else victim, tmp / "out" / name)
    return tmp / "out"


def _victim_intact(tmp: Path) -> None:
    assert sorted(os.listdir(tmp / "victim")) == ["precious"]
    assert (tmp / "victim" / "precious").read_text() == "keep me"


def _nothing_renamed(tmp: Path) -> None:
    assert sorted(os.listdir(tmp / "serving" / "cnn")) == ["0099", "5", "²"]


def _tmpfs(tmp: Path, size: str = "32m") -> Path:
    """A real small file system (tmpfs) as --output's disk; the row is skipped where mounting is not allowed."""
    mount = tmp / "small-disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                            capture_output=True, timeout=30)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    return mount / "out"


def _image_folder(tmp: Path) -> Path:
    """Two classes, 12 images each in every format Pillow reads (an animated GIF among them), plus
    what must be left out and named: a dot-named class folder, a text file, a hidden file, a fifo."""
    root = tmp / "img"
    formats = ["PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF"]
    for label, base in (("dark", 30), ("light", 220)):
        (root / label).mkdir(parents=True)
        for i in range(12):
            fmt = formats[i % len(formats)]
            shade = base + (i % 5) * 4
            image = Image.fromarray(np.full((10, 10, 3), shade, np.uint8))
            path = root / label / f"{i}.{fmt.lower()}"
            if fmt == "GIF" and i == 2:  # animated: the first frame is the image
                frames = [image, Image.fromarray(np.full((10, 10, 3), 255 - shade, np.uint8))]
                frames[0].save(path, save_all=True, append_images=frames[1:])
            else:
                image.save(path, fmt)
    (root / ".trash").mkdir()
    Image.new("RGB", (10, 10)).save(root / ".trash" / "old.png")
    (root / "dark" / "notes.txt").write_text("not an image")
    (root / "light" / ".DS_Store").write_bytes(b"\0")
    _fifo(root / "light" / "stuck.png")
    return root


def _run(tmp: Path, *args: object) -> list[object]:
    return ["run", "--output", tmp / "out", "--train-steps", "2", *args]


def _compile(tmp: Path, *args: object) -> list[object]:
    return ["compile", "--pipeline-root", "gs://bucket/tfx", "--output", tmp / "out" / "package.yaml", *args]


def _nothing_compiled(tmp: Path) -> None:
    assert not (tmp / "out" / "package.yaml").exists()


def _tfjob(tmp: Path, *args: object) -> list[object]:
    return ["tfjob", "--output", tmp / "out", "--to", tmp / "out" / "tfjob.yaml", "--examples",
            "gs://b/t", "--transform-graph", "gs://b/g", "--model-dir", "gs://b/m", *args]


IMAGE = "registry.example.com/team/tfx-project:1.0"

CASES = [
    # Serving directory: only plain ASCII int64 names are versions.
    Case("models-lists-odd-names-as-ignored", lambda t: ["models", "--serving-dir", _versions(t, "5", "²", "٣", "007")],
         ("* 5 ", "'²': not a version name", "'٣': not a version name", "'007': not a version name"), exit_code=0),
    Case("rollback-never-targets-an-odd-name", lambda t: ["rollback", "--serving-dir", _versions(t, "5", "²", "0099")],
         ("Nothing to roll back to in {tmp}/serving/cnn: 1 version(s)",), check=_nothing_renamed),
    Case("rollback-onto-an-earlier-rollback", lambda t: [
        "rollback", "--serving-dir", _versions(t, "1", "2", ".rolled-back-2")],
         ("version 2 -> 1 is now served (moved 2 to .rolled-back-2-2",), exit_code=0,
         writes_outside=("serving",)),
    Case("predict-truncated-variables", lambda t: [
        "predict", "--model-dir", _saved_model(t / "serving" / "cnn" / "3", truncated=True).parent, _png(t)],
         ("Cannot load the SavedModel in {tmp}/serving/cnn/3: IndexError: Read less bytes than requested",)),
    # predict: its own wording, and a fifo is never opened.
    Case("predict-a-text-file", lambda t: ["predict", "--model-dir", _versions(t, "1"), _file(t, "notes.txt")],
         ("Image file {tmp}/notes.txt cannot be read", "Pass an image file (PNG, JPEG, GIF, WebP, BMP or TIFF)")),
    Case("predict-a-fifo", lambda t: ["predict", "--model-dir", _versions(t, "1"), _fifo(t / "pipe.png")],
         ("Image file {tmp}/pipe.png is not a regular file (a fifo, socket or device)",)),
    # --output: links inside it, a disk nearly full.
    Case("output-lock-file-is-a-symlink", lambda t: ["run", "--output", _output_with_link(t, ".run.lock")],
         ("{tmp}/out/.run.lock is a symbolic link",), check=_victim_intact),
    Case("output-serving-is-a-symlink", lambda t: ["run", "--output", _output_with_link(t, "serving")],
         ("{tmp}/out/serving is a symbolic link (to {tmp}/victim) inside --output",), check=_victim_intact),
    Case("output-logs-is-a-symlink", lambda t: ["run", "--output", _output_with_link(t, "logs")],
         ("{tmp}/out/logs is a symbolic link (to {tmp}/victim) inside --output",), check=_victim_intact),
    Case("output-on-a-nearly-full-disk-tmpfs", lambda t: ["run", "--output", _tmpfs(t)],
         ("--output {tmp}/small-disk/out: only 32 MB free on its disk", "a run needs at least 512 MB")),
    Case("output-below-the-free-space-floor", lambda t: ["run", "--output", t / "out"],
         ("--output {tmp}/out: only", "a run needs at least 100000000 MB"),
         env={"TFX_PROJECT_MIN_FREE_MB": "100000000"}),
    # Data folders: a fifo as the data is refused unopened.
    Case("data-is-a-fifo", lambda t: _run(t, "--data", _fifo(t / "data.tfrecord")),
         ("{tmp}/data.tfrecord is neither a regular file nor a folder",), timeout=300),
    # Settings whose memory cannot fit: refused before the lock, the data or TensorFlow.
    Case("batch-and-image-size-beyond-memory", lambda t: _run(t, "--batch-size", "65536", "--image-size", "2048"),
         ("--batch-size: 65536 needs at least", "for one training batch of 2048x2048x3 images", "GiB available (",
          "the estimate leaves out TensorFlow's own memory")),
    # A text corpus of one word repeated: refused when the ExampleGen has counted it, before any training.
    Case("text-corpus-of-one-word", lambda t: _run(t, "--model", "seq2seq", "--data",
                                                   _file(t, "spam.txt", b"spam " * 50_000)),
         ("Text source {tmp}/spam.txt has only 1 distinct word ('spam') in 50k words over 1 document",
          "so no training was started"), timeout=300),
    # Strings that land in a Kubernetes manifest or a KFP package: refused before anything is compiled.
    Case("compile-empty-image", lambda t: _compile(t, "--image", ""),
         ("--image '' is empty (the image reference grammar of distribution/reference",), check=_nothing_compiled),
    Case("compile-image-with-upper-case-and-space", lambda t: _compile(t, "--image", "Registry.io/Team/X:1 "),
         ("--image 'Registry.io/Team/X:1 ' contains white space",), check=_nothing_compiled),
    Case("compile-memory-not-a-quantity", lambda t: _compile(t, "--image", IMAGE, "--memory-request", "4GB"),
         ("--memory-request '4GB' is not a Kubernetes quantity", "resource.Quantity"), check=_nothing_compiled),
    Case("compile-secret-name-with-underscore", lambda t: _compile(t, "--image", IMAGE, "--secret-env",
                                                                   "DB_PASSWORD=db_creds:password"),
         ("'db_creds' is not a valid Kubernetes secret: it must be an RFC 1123 DNS subdomain",),
         check=_nothing_compiled),
    Case("compile-pipeline-name-kfp-refuses", lambda t: _compile(t, "--image", IMAGE, "--pipeline-name", "My_Pipe"),
         ("--pipeline-name 'My_Pipe' is not a valid Kubeflow pipeline name", "e.g. my-pipe"),
         check=_nothing_compiled),
    Case("tfjob-namespace-not-a-dns-label", lambda t: _tfjob(t, "--image", IMAGE, "--namespace", "Team_A"),
         ("--namespace 'Team_A' is not a valid Kubernetes namespace: it must be an RFC 1123 DNS label",)),
    Case("deploy-namespace-not-a-dns-label", lambda t: ["deploy", "--host", "http://127.0.0.1:9", "--package",
                                                        _file(t, "p.yaml"), "--namespace", "kubeflow user"],
         ("--namespace 'kubeflow user' is not a valid Kubernetes namespace",)),
    # The one full run: every format read, everything left out named, the fifo never opened.
    Case("image-folder-of-every-format", lambda t: _run(t, "--data", _image_folder(t), "--image-size", "8",
                                                        "--min-accuracy", "0", "--gate-margin", "-1"),
         ("Examples: 24 in ->", "Not read from the data: 4 entries: {tmp}/img/.trash/ (its name starts with a dot: "
          "not a class); {tmp}/img/dark/notes.txt (not a png/jpg/jpeg/gif/webp/bmp/tif/tiff file); "
          "{tmp}/img/light/.DS_Store (hidden); {tmp}/img/light/stuck.png (not a regular file",),
         exit_code=0, timeout=900, pushes=True, slow=True),
]


def _tree(root: Path) -> dict[Path, float]:
    """Every path under ``root`` (links not followed, tmpfs mounts included) with its mtime."""
    return {p: p.lstat().st_mtime for p in root.rglob("*") if not p.is_relative_to(root / "small-disk")}


def _unmount(tmp: Path) -> None:
    if os.path.ismount(tmp / "small-disk"):
        subprocess.run(["umount", str(tmp / "small-disk")], timeout=30, check=True)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else [])
                                  for c in CASES])
def test_hostile_input(case, tmp_path):
    try:
        args = case.args(tmp_path)
        before = _tree(tmp_path)
        result = run_cli(*args, timeout=case.timeout, env={**os.environ, **case.env})
        after = _tree(tmp_path)
    finally:
        _unmount(tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == case.exit_code, (result.returncode, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    for phrase in case.phrases:
        assert phrase.format(tmp=tmp_path) in output, output[-3000:]
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    allowed = [tmp_path / "out", *(tmp_path / p for p in case.writes_outside)]
    outside = [p for p in changed if not any(a in (p, *p.parents) for a in allowed)]
    assert not outside, outside
    pushed = [p for p in changed - set(before)
              if p.name == "saved_model.pb" and p.parent.name.isascii() and p.parent.name.isdigit()]
    assert case.pushes or not pushed, pushed
    if case.check:
        case.check(tmp_path)


def test_an_animated_gif_is_read_as_its_first_frame(tmp_path):
    from data.images.pixels import load_image_file

    frames = [Image.new("L", (4, 4), 40), Image.new("L", (4, 4), 200)]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    assert Image.open(tmp_path / "a.gif").n_frames == 2
    assert load_image_file(tmp_path / "a.gif", (4, 4, 1)).max() == 40


def test_a_long_failure_message_is_cut_to_a_screenful_and_kept_whole_in_a_file(tmp_path):
    """A 300-class paragraph (about 3.5 KB) through the CLI's one failure path."""
    from stackenv.errors import ProjectError

    from pipeline.failures import MAX_MESSAGE_CHARS, failure_report

    names = ", ".join(f"class-{i:03d}" for i in range(300))
    paragraph = f"Classes missing from the train split: {names}. Add images of them."
    message, code = failure_report(ProjectError(paragraph), str(tmp_path / "logs"))
    assert code == USER_ERROR and len(paragraph) > 3000
    assert len(message) < MAX_MESSAGE_CHARS + 200 and message.startswith("error: Classes missing")
    saved = message.rsplit("the whole message: ", 1)[1].split("]", 1)[0]
    assert paragraph in Path(saved).read_text()
    assert message.endswith("] Add images of them.")  # the cut is in the middle: the fix stays (issue 56)
